"""What viewers cost: a real dashboard server, `--jobs` finished jobs (200 by default; each with its log,
its records and the final progress its runner stores) and one running demo job, watched by 1, 5, 10 and
20 headless Chromium tabs on Jobs and then on Logs.

First, before the demo job starts and with no tab open (a quiet machine), a fresh Jobs page's load time
(`--loads` first visits and returning ones; target 2 s with 2,000 jobs). Then the demo job's steps per
minute with no tab open, over `--window` seconds.

`--pages mix` opens N Logs tabs and N Jobs tabs together (N from `--viewers`) and prints the steps per
minute the running job kept against no tab (target 85% with 5 + 5): the trainer's own pace drifts and
other work shares the cores, so `--cycles` windows with the tabs open and as many with none take turns
and their medians are compared.

For each page and number of tabs, over a window of `--window` seconds with the tabs open:

- the server process's CPU (psutil, sampled every second; % of one core: mean and max) and RSS;
- a fresh tab's load time of that page (navigation to the page drawn, while the others watch), on a
  first visit (empty browser cache) and for a returning viewer (the app's scripts cached);
- the running job's steps per minute (from its log), which shares the machine with all of this;
- the CPU the browsers' processes used over the window (% of one core: every tab's drawing);
- per tab, its browser main thread's time per second of wall time (the Chrome DevTools Protocol's
  Performance metrics: TaskDuration, counted in the main thread's own CPU time) and the bytes the
  server sent it per update (websocket frames, CDP Network.webSocketFrameReceived, and the pushed
  feed files of its live sections; an update is a burst of frames, one page or fragment run, or a
  feed).

After each group the tabs are closed and the server's RSS is measured again after `--settle` seconds,
against its one-viewer figure. Streamlit keeps a closed tab's session for
`server.disconnectedSessionTTL` (120 s by default): a settle shorter than that measures the closed
sessions too (`--settle 135` measures what is given back once they are gone). Targets: 10 tabs on
Jobs under 10% of one core on average, a fresh Jobs page under 2 s, RSS back within 20% of the
one-viewer figure once the tabs are closed; one Logs tab on the running job: its main thread at most
0.03 s per second, the server at most 2% of a core.

The app runs from a copy in a temporary folder (the demo job's weights and checkpoints go there).
Figures on a shared machine are noisy: the browsers, the trainer and other work compete for the same
cores.

A single page load varies a lot on a busy machine: `--loads N` times N first visits and N returning
ones per group and prints their median (with the range).

    python3 -m bench.bench_viewers [--jobs 200] [--viewers 1,5,10,20] [--window 30] [--settle 10] [--pages jobs,logs,mix]
                                   [--loads 1] [--cycles 3]

`--scale` runs the large case instead: 20 finished runs of 200,000 steps each (`--scale-runs`,
`--scale-steps`), with their logs and records, overlaid on one Logs page, while one of them grows by a
step every half second. It prints the server's first reading of them (a warm-up tab), a fresh tab's
page run (its last message) and the end of its charts' first draw, both timed by the page from its
navigation (`--loads` fresh tabs: their medians), the points per trace sent, a zoom into a 1,000-step
window (its time and points), then the update cost of one tab over `--window` seconds (main thread,
bytes per update, server CPU) and the server's RSS. Targets: first draw within 2 s of the page's run,
at most 2,000 points per trace, every point of the zoomed window.

    python3 -m bench.bench_viewers --scale [--scale-runs 20] [--scale-steps 200000] [--window 30] [--loads 1]
"""
import argparse
import json
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
    from mmcore.jobs import progress
    from mmcore.runs import metric_stream
    from mmcore.jobs.jobstore import JobStore
    store = JobStore()
    log, count = sys.argv[1], int(sys.argv[2])
    records = "".join(json.dumps({"global_step": s, "epoch": 1, "step": s, "loss": 5 - s / 100, "lr": 5e-4}) + "\\n"
                      for s in range(10, 201, 10))
    now = time.time()
    for i in range(count):
        job_id = store.create("pretrain", f"finished-{i:04d}", {"epochs": "1"}, ["python", "train_pretrain.py"],
                              "/tmp", {})
        job = store.get(job_id)
        with open(job.log_path, "w") as f:
            f.write(log)
        folder = metric_stream.job_dir(store.home, job_id)  # its records: the table's sparkline and health
        folder.mkdir(parents=True, exist_ok=True)
        (folder / metric_stream.METRICS_FILE).write_text(records)
        # As its runner leaves a finished job: its final progress in its row.
        store.update(job_id, status="succeeded", started_at=now - 3600 + i, ended_at=now - 3000 + i, exit_code=0,
                     final_progress=progress.final_progress(job).as_dict())
""")

LAUNCH = textwrap.dedent("""
    from mmcore.queue import launch
    from mmcore.widgets import train_form as forms
    from mmcore.jobs.jobstore import JobStore
    form = forms.preset_form("pretrain")
    form["epochs"] = "200"  # runs through the whole bench
    form["log_interval"] = "1"
    values = forms.command_values("pretrain", form)
    print(launch.launch(JobStore(), "pretrain", "running-demo", values, 0))
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

    def window(self, seconds, sleep=time.sleep):
        """(mean CPU %, max CPU %, max RSS) over `seconds`; `sleep` waits a second (a tab's wait lets
        the browser's events in meanwhile)."""
        cpu, rss = [], []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            sleep(1.0)
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


class TabProbe:
    """One tab's browser main-thread time and the bytes the server sent it for its updates, through the
    Chrome DevTools Protocol (Performance metrics in thread time; Network websocket frames, and the
    fed sections' pushed feed files, `live-<pid>-feed-<token>.json`)."""

    BURST_S = 0.3  # frames closer than this belong to one update (one page or fragment run, or a feed)

    def __init__(self, tab):
        self.cdp = tab.context.new_cdp_session(tab)
        self.cdp.send("Performance.enable", {"timeDomain": "threadTicks"})
        self.frames = []  # (browser timestamp, bytes)
        self._feeds = {}  # request id -> browser timestamp, for feed files not finished yet
        self.cdp.on("Network.webSocketFrameReceived", self._frame)
        self.cdp.on("Network.responseReceived", self._response)
        self.cdp.on("Network.loadingFinished", self._loaded)
        self.cdp.send("Network.enable")
        self.start()

    def _response(self, event):
        if "-feed-" in event["response"]["url"] and event["response"]["status"] == 200:
            self._feeds[event["requestId"]] = event["timestamp"]

    def _loaded(self, event):
        at = self._feeds.pop(event["requestId"], None)
        if at is not None:
            self.frames.append((at, event["encodedDataLength"]))

    def _frame(self, event):
        response = event["response"]
        data = response.get("payloadData", "")
        size = len(data) * 3 // 4 if response.get("opcode") == 2 else len(data.encode())  # binary: base64
        self.frames.append((event["timestamp"], size))

    def task_s(self):
        metrics = self.cdp.send("Performance.getMetrics")["metrics"]
        return next(m["value"] for m in metrics if m["name"] == "TaskDuration")

    def start(self):
        self.frames.clear()
        self._feeds.clear()
        self.task0, self.t0 = self.task_s(), time.monotonic()

    def figures(self):
        """(main-thread seconds per second, bytes per update, updates) since `start`."""
        main = (self.task_s() - self.task0) / (time.monotonic() - self.t0)
        bursts, last = 0, None
        for at, _ in sorted(self.frames):
            if last is None or at - last > self.BURST_S:
                bursts += 1
            last = at
        total = sum(size for _, size in self.frames)
        return main, (total / bursts if bursts else 0.0), bursts


def probe_text(probes):
    """ "0.012 s/s, 1.8 kB/update": the mean over the tabs."""
    if not probes:
        return ""
    figures = [p.figures() for p in probes]
    main = statistics.mean(f[0] for f in figures)
    per_update = statistics.mean(f[1] for f in figures)
    return f"{main:.3f} s/s {per_update / 1000:>6.1f} kB"


JOBS_READY = """() => [...document.querySelectorAll('.minimind-table td')]
                       .some(td => td.innerText.includes('finished-'))"""
LOGS_READY = f"() => document.querySelectorAll('{browser.PLOTS}').length > 0"


# -- the large case: many long runs on one Logs page ----------------------------------------------------

def scale_line(step, total, loss):
    return f"Epoch:[1/1]({step}/{total}) loss:{loss:.6f} lr:0.000500000000 epoch_Time:1.0min:\n"


def scale_record(step, loss):
    return json.dumps({"global_step": step, "epoch": 1, "step": step, "samples": step * 32, "tokens": step * 16_384,
                       "time": 1.7e9 + step / 2, "elapsed_s": step / 2, "loss": loss, "lr": 0.0005,
                       "time/step_s": 0.5, "tokens_per_s": 32_768.0}) + "\n"


def scale_loss(run, steps):
    """A run's loss: a decaying curve with noise and a spike or two, different for each run."""
    import numpy as np

    rng = np.random.default_rng(run)
    x = np.arange(1, steps + 1)
    loss = 2 + 3 * np.exp(-x / (20_000 + 2_000 * run)) + rng.normal(0, 0.05, steps)
    loss[rng.integers(0, steps, 2)] += 2.0
    return loss


def write_scale_runs(store, runs, steps):
    """`runs` finished pretrain jobs of `steps` logged steps each, with their logs and records -> job ids."""
    from mmcore.runs import metric_stream

    now, ids = time.time(), []
    for run in range(runs):
        job_id = store.create("pretrain", f"scale-{run:02d}", {"epochs": "1"}, ["python", "train_pretrain.py"], "/tmp", {})
        store.update(job_id, status="succeeded", started_at=now - 3600, ended_at=now - 60, exit_code=0)
        folder = metric_stream.job_dir(store.home, job_id)
        folder.mkdir(parents=True, exist_ok=True)
        loss = scale_loss(run, steps)
        with open(store.get(job_id).log_path, "w") as log, open(folder / metric_stream.METRICS_FILE, "w") as records:
            for start in range(0, steps, 20_000):
                chunk = range(start, min(start + 20_000, steps))
                log.write("".join(scale_line(i + 1, steps, loss[i]) for i in chunk))
                records.write("".join(scale_record(i + 1, float(loss[i])) for i in chunk))
        ids.append(job_id)
    return ids


_CHARTS_STATE_JS = """() => [...document.querySelectorAll('.minimind-livechart')].map(d => ({
    drawn: !!d.__minimindChart && d.__minimindChart.draws > 0 && !d.__minimindChart.dirty,
    drawnAt: d.__minimindChart ? d.__minimindChart.drawnAt : 0,
    points: (d.data || []).map(t => t.x.length),
    title: String(d.layout?.title?.text ?? '')}))"""
_ALL_DRAWN_JS = f"(n) => {{ const s = ({_CHARTS_STATE_JS})(); return s.length >= n && s.every(c => c.drawn); }}"


# When the page last received a message from the server (performance.now(), from its navigation).
MESSAGE_CLOCK_JS = """(() => {
    const Native = window.WebSocket;
    window.__lastMessageAt = 0;
    window.WebSocket = class extends Native {
        constructor(...args) {
            super(...args);
            this.addEventListener('message', () => { window.__lastMessageAt = performance.now(); });
        }
    };
})()"""


def charts_drawn(page, count, timeout_s):
    """Wait until `count` live charts have drawn what they were sent."""
    page.wait_for_function(_ALL_DRAWN_JS, arg=count, timeout=timeout_s * 1000, polling=50)
    return page.evaluate(_CHARTS_STATE_JS)


def scale(args):
    from playwright.sync_api import sync_playwright

    from mmcore.jobs.jobstore import JobStore
    from mmcore.logs import charts

    with tempfile.TemporaryDirectory(prefix="bench-viewers-scale-") as tmp:
        tmp = Path(tmp)
        app = browser.copy_app(tmp / "app")
        home = tmp / "home"
        home.mkdir()
        started = time.monotonic()
        store = JobStore(home)
        ids = write_scale_runs(store, args.scale_runs, args.scale_steps)
        print(f"store: {args.scale_runs} finished runs of {args.scale_steps:,} steps, logs and records "
              f"({time.monotonic() - started:.0f} s to write)", flush=True)
        url = f"/logs?job={','.join(map(str, ids))}"
        with browser.StreamlitServer(app, home=home, log_path=tmp / "server.log") as server, \
                sync_playwright() as playwright:
            chromium = browser.launch_browser(playwright)
            sampler = Sampler(server.proc.pid)
            timeout_s = 1800
            # Charts draw once on screen: the tabs are tall enough to show them all.
            # A first tab: the server reads every run once (what later tabs share).
            warm = browser.new_page(chromium, height=4000)
            started = time.monotonic()
            warm.goto(server.url + url, wait_until="domcontentloaded", timeout=timeout_s * 1000)
            shown = charts_drawn(warm, 1, timeout_s)
            browser.wait_for_rerun(warm, timeout_s)
            shown = charts_drawn(warm, len(shown), timeout_s)
            print(f"first reading of the runs (a first tab, until its charts are drawn): {time.monotonic() - started:.1f} s, "
                  f"server RSS {sampler.rss() / 2**20:.0f} MiB", flush=True)
            warm.context.close()

            # Fresh tabs (first visits: the browser's cache empty); the last one goes on below.
            runs_s, drawn_s = [], []
            for load in range(max(1, args.loads)):
                if load:
                    tab.context.close()
                tab = browser.new_page(chromium, height=4000)
                tab.add_init_script(MESSAGE_CLOCK_JS)
                tab.goto(server.url + url, wait_until="domcontentloaded", timeout=timeout_s * 1000)
                tab.wait_for_selector('[data-testid="stApp"]', timeout=timeout_s * 1000)
                browser.wait_for_rerun(tab, timeout_s)
                shown = charts_drawn(tab, len(shown), timeout_s)
                # On the page's own clock, from its navigation (what the polling here adds, and its
                # waits for a quiet page, left out): the last message of the server's run of the page,
                # and the end of its last chart's draw.
                runs_s.append(tab.evaluate("() => window.__lastMessageAt") / 1000)
                drawn_s.append(max(c["drawnAt"] for c in shown) / 1000)
            after_s = [max(0.0, drawn - run) for run, drawn in zip(runs_s, drawn_s)]
            most = max(max(c["points"] or [0]) for c in shown)
            print(f"fresh tab: page run {load_text(runs_s)}, charts drawn {load_text(drawn_s)} after navigation "
                  f"({load_text(after_s)} after the run; target 2 s); {len(shown)} charts, "
                  f"at most {most:,} points per trace (target {charts.MAX_POINTS:,})", flush=True)

            # Zoom the loss chart into a 1,000-step window.
            low = args.scale_steps // 2
            loss_title = charts.chart_title("loss")
            count_js = """([title, low, high]) => {
                const plot = [...document.querySelectorAll('.minimind-livechart')].find(
                    p => String(p.layout?.title?.text ?? '').includes(title));
                return plot.data.map(t => Array.from(t.x).filter(x => x >= low && x <= high).length);
            }"""
            started = time.monotonic()
            tab.evaluate("""([title, low, high]) => {
                const plot = [...document.querySelectorAll('.minimind-livechart')].find(
                    p => String(p.layout?.title?.text ?? '').includes(title));
                return window.Plotly.relayout(plot, {'xaxis.range': [low, high]});
            }""", [loss_title, low, low + 1000])
            tab.wait_for_function(f"(a) => ({count_js})(a).every(n => n === 1001)", arg=[loss_title, low, low + 1000],
                                  timeout=timeout_s * 1000, polling=50)
            zoomed = tab.evaluate(count_js, [loss_title, low, low + 1000])
            points = tab.evaluate("""(title) => [...document.querySelectorAll('.minimind-livechart')].find(
                p => String(p.layout?.title?.text ?? '').includes(title)).data.map(t => t.x.length)""", loss_title)
            print(f"zoom to steps {low:,}-{low + 1000:,}: {time.monotonic() - started:.2f} s until every trace shows "
                  f"all {min(zoomed)} of its points there; at most {max(points):,} points per trace", flush=True)

            # Updates: the first run grows by a step every half second; one tab watches.
            from mmcore.runs import metric_stream
            grown = store.get(ids[0])
            records = metric_stream.job_dir(home, ids[0]) / metric_stream.METRICS_FILE
            steps = args.scale_steps
            probe = TabProbe(tab)
            cpu_figures = []

            def grow(_seconds):
                nonlocal steps
                for _ in range(2):
                    steps += 1
                    with open(grown.log_path, "a") as log, open(records, "a") as rec:
                        log.write(scale_line(steps, args.scale_steps * 2, 2.0))
                        rec.write(scale_record(steps, 2.0))
                    tab.wait_for_timeout(500)
            cpu, cpu_max, rss = sampler.window(args.window, grow)
            cpu_figures.append(cpu)
            main_s, per_update, updates = probe.figures()
            print(f"updates (run 1 grows 2 steps/s, one tab, {args.window:.0f} s): browser main thread {main_s:.3f} s/s, "
                  f"{per_update / 1000:.1f} kB per update ({updates} updates), server CPU {cpu:.0f}% mean / "
                  f"{cpu_max:.0f}% max of one core, server RSS {rss / 2**20:.0f} MiB", flush=True)
            chromium.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--viewers", default="1,5,10,20")
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument("--pages", default="jobs,logs", help="jobs, logs, mix (N Logs and N Jobs tabs together)")
    parser.add_argument("--jobs", type=int, default=200, help="finished jobs in the store")
    parser.add_argument("--cycles", type=int, default=3,
                        help="mix: windows with the tabs and without them, taking turns, this many of each")
    parser.add_argument("--loads", type=int, default=1, help="fresh loads of each kind per group (median printed)")
    parser.add_argument("--scale", action="store_true", help="the large case (see above) instead")
    parser.add_argument("--scale-runs", type=int, default=20)
    parser.add_argument("--scale-steps", type=int, default=200_000)
    args = parser.parse_args()
    # A timeout's SIGTERM must still stop the demo job and the server (the finally blocks below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    counts = [int(n) for n in args.viewers.split(",")]
    missing = browser.browser_missing_reason()
    if missing:
        sys.exit(f"needs Chromium and Playwright: {missing}")
    if args.scale:
        return scale(args)
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="bench-viewers-") as tmp:
        tmp = Path(tmp)
        app = browser.copy_app(tmp / "app")
        home = tmp / "home"
        env = {**os.environ, "MINIMIND_DASHBOARD_HOME": str(home), "PYTHONPATH": str(app)}
        started = time.monotonic()
        subprocess.run([sys.executable, "-c", SETUP, FINISHED_LOG, str(args.jobs)], cwd=app, env=env, check=True)
        print(f"store: {args.jobs} finished jobs with logs and records ({time.monotonic() - started:.0f} s to write)")
        print("Figures are noisy: the machine is shared (browsers, the trainer and other work on the same cores).")
        from mmcore.jobs.jobstore import JobStore
        store = JobStore(home)
        job_id = None
        urls = {"jobs": "/jobs", "logs": "/logs?job={job}"}
        ready = {"jobs": JOBS_READY, "logs": LOGS_READY}
        try:
            with browser.StreamlitServer(app, home=home, log_path=tmp / "server.log") as server, \
                    sync_playwright() as playwright:
                chromium = browser.launch_browser(playwright)
                sampler = Sampler(server.proc.pid)
                warm = browser.new_page(chromium)  # the server's first request settles its navigation
                browser.open_app(warm, server.url + urls["jobs"])  # and the server reads the jobs once
                warm.context.close()
                time.sleep(3)
                # A quiet machine: no job trains yet, no other tab is open.
                firsts, returnings = fresh_loads(chromium, server.url + urls["jobs"], JOBS_READY, args.loads)
                print(f"fresh Jobs page, {args.jobs} jobs in the store, quiet machine: first visit {load_text(firsts)}, "
                      f"returning {load_text(returnings)} (target 2 s)", flush=True)

                job_id = int(subprocess.run([sys.executable, "-c", LAUNCH], cwd=app, env=env, check=True,
                                            capture_output=True, text=True).stdout.split()[-1])
                running_log = store.get(job_id).log_path
                urls["logs"] = urls["logs"].format(job=job_id)
                while last_step(running_log) < 5:  # the trainer has started and logs its steps
                    time.sleep(1.0)
                time.sleep(15)  # its first steps are slower (caches, allocator): not a fair reference
                print(f"job {job_id} training (demo pretrain on the CPU)")

                def no_tab_steps():
                    step0, t0 = last_step(running_log), time.monotonic()
                    figures = sampler.window(args.window)
                    return (last_step(running_log) - step0) * 60 / (time.monotonic() - t0), figures

                steps0, (cpu0, cpu0_max, rss0) = no_tab_steps()
                print(f"0 viewers: server CPU {cpu0:.1f}% mean / {cpu0_max:.0f}% max of one core, "
                      f"RSS {rss0 / 2**20:.0f} MiB, {steps0:.0f} steps/min")
                header = (f"{'page':5} {'tabs':>5} {'CPU mean':>9} {'CPU max':>8} {'RSS MiB':>8} "
                          f"{'fresh load (first visit / returning)':>37} {'steps/min':>9} {'kept':>5} "
                          f"{'RSS after close':>16} {'browsers CPU':>12} {'per tab: main thread, per update':>33}")
                print(header)
                for name in args.pages.split(","):
                    one_viewer_rss = None
                    for n in counts:
                        # "mix": n Logs tabs and n Jobs tabs open together; its fresh loads are of Jobs.
                        opened = ["logs", "jobs"] if name == "mix" else [name]
                        fresh = "jobs" if name == "mix" else name
                        tabs = open_tabs(chromium, [server.url + urls[p] for p in opened] * n,
                                         [ready[p] for p in opened] * n)
                        probes = [TabProbe(tab) for tab in tabs]
                        step0, t0, browser0 = last_step(running_log), time.monotonic(), browser_cpu_s()
                        cpu, cpu_max, rss = sampler.window(args.window, lambda s: tabs[0].wait_for_timeout(s * 1000))
                        per_tab = probe_text(probes)
                        elapsed = time.monotonic() - t0
                        steps_per_min = (last_step(running_log) - step0) * 60 / elapsed
                        browser_cpu = 100 * (browser_cpu_s() - browser0) / elapsed
                        firsts, returnings = fresh_loads(chromium, server.url + urls[fresh], ready[fresh], args.loads)
                        for tab in tabs:
                            tab.context.close()
                        time.sleep(args.settle)
                        after = sampler.rss()
                        if one_viewer_rss is None:
                            one_viewer_rss = rss
                        tabs_text = f"{n}+{n}" if name == "mix" else str(n)
                        print(f"{name:5} {tabs_text:>5} {cpu:>8.1f}% {cpu_max:>7.0f}% {rss / 2**20:>8.0f} "
                              f"{load_text(firsts):>27} / {load_text(returnings):>7} {steps_per_min:>9.0f} "
                              f"{100 * steps_per_min / max(steps0, 1e-9):>4.0f}% "
                              f"{after / 2**20:>10.0f} ({100 * (after / one_viewer_rss - 1):+.0f}%) "
                              f"{browser_cpu:>11.0f}% {per_tab:>33}", flush=True)
                        if name == "mix":
                            # The trainer's own pace drifts (and other work shares the cores): windows with
                            # the tabs and without them take turns, and their medians are compared.
                            with_tabs, without = [steps_per_min], [steps0, no_tab_steps()[0]]
                            for _ in range(args.cycles - 1):
                                tabs = open_tabs(chromium, [server.url + urls[p] for p in opened] * n,
                                                 [ready[p] for p in opened] * n)
                                time.sleep(3)  # the tabs' first runs are over
                                step0, t0 = last_step(running_log), time.monotonic()
                                tabs[0].wait_for_timeout(args.window * 1000)
                                with_tabs.append((last_step(running_log) - step0) * 60 / (time.monotonic() - t0))
                                for tab in tabs:
                                    tab.context.close()
                                without.append(no_tab_steps()[0])
                            kept = statistics.median(with_tabs) / max(statistics.median(without), 1e-9)
                            print(f"      steps/min with {n} Logs + {n} Jobs tabs: {figures_text(with_tabs)}; with no tab: "
                                  f"{figures_text(without)}; kept {100 * kept:.0f}% (medians; target 85%)", flush=True)
                chromium.close()
        finally:
            if job_id is not None:
                from mmcore.jobs import runner
                runner.stop(store, job_id, grace=5, wait=True)


def open_tabs(chromium, urls, ready_js):
    """A tab for each of `urls`, one after the other (a page's first load is the heavy part), each
    waited for until its `ready_js` holds."""
    tabs = []
    for url, ready in zip(urls, ready_js):
        tab = browser.new_page(chromium)
        tab.goto(url, wait_until="domcontentloaded", timeout=180_000)
        tab.wait_for_function(ready, timeout=180_000, polling=250)
        tabs.append(tab)
    return tabs


def figures_text(values):
    """ "412 (380, 455, 401)": the median, then each figure in turn."""
    return f"{statistics.median(values):.0f} ({', '.join(f'{v:.0f}' for v in values)})"


def fresh_loads(chromium, url, ready_js, loads):
    """`loads` first visits and as many returning ones of `url` -> (first visit seconds, returning seconds)."""
    firsts, returnings = [], []
    for _ in range(loads):
        first_visit = browser.new_page(chromium).context
        firsts.append(fresh_load_s(first_visit, url, ready_js))
        returnings.append(fresh_load_s(first_visit, url, ready_js))
        first_visit.close()
    return firsts, returnings


if __name__ == "__main__":
    main()
