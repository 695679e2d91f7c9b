"""What viewers cost: a real dashboard server, 200 finished jobs and one running demo job, watched by
1, 5, 10 and 20 headless Chromium tabs on Jobs and then on Logs.

For each page and number of tabs, over a window of `--window` seconds with the tabs open:

- the server process's CPU (psutil, sampled every second; % of one core: mean and max) and RSS;
- a fresh tab's load time of that page (navigation to the page drawn, while the others watch), on a
  first visit (empty browser cache) and for a returning viewer (the app's scripts cached);
- the running job's steps per minute (from its log), which shares the machine with all of this;
- the CPU the browsers' processes used over the window (% of one core: every tab's drawing).

After each group the tabs are closed and the server's RSS is measured again after `--settle` seconds,
against its one-viewer figure. Streamlit keeps a closed tab's session for
`server.disconnectedSessionTTL` (120 s by default): a settle shorter than that measures the closed
sessions too (`--settle 135` measures what is given back once they are gone). Targets: 10 tabs on
Jobs under 10% of one core on average, a fresh Jobs page under 2 s, RSS back within 20% of the
one-viewer figure once the tabs are closed.

The app runs from a copy in a temporary folder (the demo job's weights and checkpoints go there).
Figures on a shared machine are noisy: the browsers, the trainer and other work compete for the same
cores.

A single page load varies a lot on a busy machine: `--loads N` times N first visits and N returning
ones per group and prints their median (with the range).

    python3 -m bench.bench_viewers [--viewers 1,5,10,20] [--window 30] [--settle 10] [--pages jobs,logs] [--loads 1]
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil

from tests import _browser_helpers as browser  # (the tests' real-server and Chromium harness)

ROOT = Path(__file__).resolve().parent.parent

FINISHED_LOG = "".join(f"Epoch:[1/1]({s}/200) loss:{5 - s / 100:.6f} lr:0.000500000000 epoch_Time:0.0min:\n"
                       for s in range(10, 201, 10))
STEP = re.compile(rb"Epoch:\[(\d+)/\d+\]\((\d+)/(\d+)\)")

SETUP = textwrap.dedent("""
    import json, sys, time
    from mmcore.queue import launch
    from mmcore.widgets import train_form as forms
    from mmcore.jobs.jobstore import JobStore
    store = JobStore()
    log = sys.argv[1]
    now = time.time()
    for i in range(200):
        job_id = store.create("pretrain", f"finished-{i:03d}", {"epochs": "1"}, ["python", "train_pretrain.py"],
                              "/tmp", {})
        store.update(job_id, status="succeeded", started_at=now - 3600 + i, ended_at=now - 3000 + i, exit_code=0)
        with open(store.get(job_id).log_path, "w") as f:
            f.write(log)
    form = forms.preset_form("pretrain")
    form["epochs"] = "200"  # runs through the whole bench
    form["log_interval"] = "1"
    values = forms.command_values("pretrain", form)
    print(launch.launch(store, "pretrain", "running-demo", values, 0))
""")


def last_step(log_path):
    """The last global step in a log (epochs folded in), or 0."""
    try:
        data = Path(log_path).read_bytes()[-4096:]
    except OSError:
        return 0
    found = STEP.findall(data)
    if not found:
        return 0
    epoch, step, steps = (int(v) for v in found[-1])
    return (epoch - 1) * steps + step


class Sampler:
    """CPU (% of one core) and RSS of a process, sampled once a second."""

    def __init__(self, pid):
        self.proc = psutil.Process(pid)
        self.proc.cpu_percent(None)

    def window(self, seconds):
        cpu, rss = [], []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(1.0)
            cpu.append(self.proc.cpu_percent(None))
            rss.append(self.proc.memory_info().rss)
        return statistics.mean(cpu), max(cpu), max(rss)

    def rss(self):
        return self.proc.memory_info().rss


def browser_cpu_s():
    """CPU seconds used so far by this process's browser processes (Chromium and its renderers)."""
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            if "chrom" in child.name():
                times = child.cpu_times()
                total += times.user + times.system
        except psutil.Error:
            pass
    return total


def fresh_load_s(context, url, ready_js):
    """Seconds from navigating a new tab of `context` to `url` until `ready_js` holds (the page is
    drawn). A new context is a first visit (the browser's cache empty); a context that has shown the
    page before is a returning teammate (the app's scripts cached)."""
    page = context.new_page()
    try:
        started = time.monotonic()
        page.goto(url, wait_until="domcontentloaded", timeout=180_000)
        page.wait_for_function(ready_js, timeout=180_000, polling=100)
        return time.monotonic() - started
    finally:
        page.close()


def load_text(seconds):
    """ "2.31s", or the median and range of several loads: "2.31s (2.10-2.90)"."""
    text = f"{statistics.median(seconds):.2f}s"
    return text if len(seconds) == 1 else f"{text} ({min(seconds):.2f}-{max(seconds):.2f})"


JOBS_READY = """() => [...document.querySelectorAll('.minimind-table td')]
                       .some(td => td.innerText.includes('finished-'))"""
LOGS_READY = """() => document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot').length > 0"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--viewers", default="1,5,10,20")
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument("--pages", default="jobs,logs")
    parser.add_argument("--loads", type=int, default=1, help="fresh loads of each kind per group (median printed)")
    args = parser.parse_args()
    # A timeout's SIGTERM must still stop the demo job and the server (the finally blocks below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    counts = [int(n) for n in args.viewers.split(",")]
    missing = browser.browser_missing_reason()
    if missing:
        sys.exit(f"needs Chromium and Playwright: {missing}")
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="bench-viewers-") as tmp:
        tmp = Path(tmp)
        app = browser.copy_app(tmp / "app")
        home = tmp / "home"
        env = {**os.environ, "MINIMIND_DASHBOARD_HOME": str(home), "PYTHONPATH": str(app)}
        job_id = int(subprocess.run([sys.executable, "-c", SETUP, FINISHED_LOG], cwd=app, env=env, check=True,
                                    capture_output=True, text=True).stdout.split()[-1])
        from mmcore.jobs.jobstore import JobStore
        store = JobStore(home)
        running_log = store.get(job_id).log_path
        print(f"store: 200 finished jobs, job {job_id} training (demo pretrain on the CPU)")
        print("Figures are noisy: the machine is shared (browsers, the trainer and other work on the same cores).")
        urls = {"jobs": "/jobs", "logs": f"/logs?job={job_id}"}
        ready = {"jobs": JOBS_READY, "logs": LOGS_READY}
        try:
            with browser.StreamlitServer(app, home=home, log_path=tmp / "server.log") as server, \
                    sync_playwright() as playwright:
                chromium = browser.launch_browser(playwright)
                sampler = Sampler(server.proc.pid)
                warm = browser.new_page(chromium)  # the server's first request settles its navigation
                browser.open_app(warm, server.url)
                warm.context.close()
                time.sleep(3)
                cpu0, cpu0_max, rss0 = sampler.window(min(10.0, args.window))
                print(f"0 viewers: server CPU {cpu0:.1f}% mean / {cpu0_max:.0f}% max of one core, "
                      f"RSS {rss0 / 2**20:.0f} MiB")
                header = (f"{'page':5} {'tabs':>4} {'CPU mean':>9} {'CPU max':>8} {'RSS MiB':>8} "
                          f"{'fresh load (first visit / returning)':>37} {'steps/min':>9} {'RSS after close':>16} {'browsers CPU':>12}")
                print(header)
                for name in args.pages.split(","):
                    one_viewer_rss = None
                    for n in counts:
                        tabs = []
                        for _ in range(n):  # one after the other: a page's first load is the heavy part
                            tab = browser.new_page(chromium)
                            tab.goto(server.url + urls[name], wait_until="domcontentloaded", timeout=180_000)
                            tab.wait_for_function(ready[name], timeout=180_000, polling=250)
                            tabs.append(tab)
                        step0, t0, browser0 = last_step(running_log), time.monotonic(), browser_cpu_s()
                        cpu, cpu_max, rss = sampler.window(args.window)
                        elapsed = time.monotonic() - t0
                        steps_per_min = (last_step(running_log) - step0) * 60 / elapsed
                        browser_cpu = 100 * (browser_cpu_s() - browser0) / elapsed
                        firsts, returnings = [], []
                        for _ in range(args.loads):
                            first_visit = browser.new_page(chromium).context
                            firsts.append(fresh_load_s(first_visit, server.url + urls[name], ready[name]))
                            returnings.append(fresh_load_s(first_visit, server.url + urls[name], ready[name]))
                            first_visit.close()
                        for tab in tabs:
                            tab.context.close()
                        time.sleep(args.settle)
                        after = sampler.rss()
                        if one_viewer_rss is None:
                            one_viewer_rss = rss
                        print(f"{name:5} {n:>4} {cpu:>8.1f}% {cpu_max:>7.0f}% {rss / 2**20:>8.0f} "
                              f"{load_text(firsts):>27} / {load_text(returnings):>7} {steps_per_min:>9.0f} "
                              f"{after / 2**20:>10.0f} ({100 * (after / one_viewer_rss - 1):+.0f}%) "
                              f"{browser_cpu:>11.0f}%", flush=True)
                chromium.close()
        finally:
            from mmcore.jobs import runner
            runner.stop(store, job_id, grace=5, wait=True)


if __name__ == "__main__":
    main()
