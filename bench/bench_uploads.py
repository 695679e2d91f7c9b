"""What uploaded logs cost the dashboard server, and what it gets back when their tab is closed.

A real server (the tests' harness) with a member's roles; a warm-up tab charts a small upload and is
closed; then, `--cycles` times, a tab uploads `--logs` upstream-format logs of `--mb` MB each on Logs,
waits until each is a trace of the loss chart, and is closed. Printed per cycle: the server's RSS
before, while charted, and once the closed tab's session has expired (its reconnect time,
`server.disconnectedSessionTTL`, then the session janitor's sweeps: mmcore.widgets.session_janitor).
A second cycle that ends where the first ended shows reuse, not a leak.

    python -m bench.bench_uploads [--mb 20] [--logs 3] [--cycles 2]
"""
import argparse
import tempfile
import time
from pathlib import Path

import psutil

from mmcore.access import roles
from mmcore.logs.charts import chart_title
from mmcore.widgets import session_janitor
from tests import _browser_helpers as browser  # (the tests' real-server and Chromium harness)

SESSION_TTL_S = 3
LOSS = chart_title("loss")


def big_log(path, megabytes):
    """An upstream-format pretrain log of about `megabytes` MB -> its number of steps."""
    lines, size, step, total = [], 0, 0, 2_000_000
    while size < megabytes * 1_000_000:
        step += 1
        line = f"Epoch:[1/1]({step}/{total}) loss:{8 - step / total:.6f} lr:0.000500000000 epoch_Time:{step // 1000}min:\n"
        lines.append(line)
        size += len(line)
    path.write_text("".join(lines))
    return step


def rss_mb(pid):
    return psutil.Process(pid).memory_info().rss / 2**20


def settled_rss_mb(pid, seconds=3.0):
    """The RSS once it changes by less than 1 MB over `seconds`."""
    last = rss_mb(pid)
    for _ in range(20):
        time.sleep(seconds)
        now = rss_mb(pid)
        if abs(now - last) < 1:
            return now
        last = now
    return last


def upload_and_chart(chromium, server, logs):
    """A new tab on Logs uploads `logs` and waits for their traces; closed afterwards -> RSS meanwhile."""
    with browser.app_page(f"{server.url}/logs", timeout_ms=60_000, browser=chromium) as page:
        browser.wait_for_rerun(page)
        page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files([str(p) for p in logs])
        traces = [name for name, _ in browser.plotly_charts(page, LOSS, timeout=300)[LOSS]]
        missing = [p.name for p in logs if not any(t.startswith(f"{p.name} (uploaded)") for t in traces)]
        if missing:
            raise SystemExit(f"not charted: {missing}")
        return rss_mb(server.proc.pid)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=20, help="size of each uploaded log")
    parser.add_argument("--logs", type=int, default=3, help="logs uploaded per tab")
    parser.add_argument("--cycles", type=int, default=2, help="tabs that upload, one after the other")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-uploads-") as tmp:
        tmp = Path(tmp)
        app_dir = browser.copy_app(tmp / "app")
        home = tmp / "home"
        home.mkdir()
        (home / "roles.toml").write_text(f'[users]\n"{roles.os_user()}" = "member"\n')
        small = tmp / "warmup.log"
        big_log(small, 0.01)
        logs = [tmp / f"big{i}.log" for i in range(args.logs)]
        steps = sum(big_log(p, args.mb) for p in logs)
        server = browser.StreamlitServer(app_dir, home=home, log_path=tmp / "streamlit.log",
                                         unset_env=(roles.ROLES_ENV,),
                                         options=("--server.disconnectedSessionTTL", str(SESSION_TTL_S)))
        expire_s = SESSION_TTL_S + 2 * session_janitor.SWEEP_S
        with server, browser.chromium() as chromium:
            upload_and_chart(chromium, server, [small])
            time.sleep(expire_s)
            print(f"{args.logs} logs x {args.mb:g} MB ({steps} steps) per tab; RSS of the server in MiB")
            for cycle in range(1, args.cycles + 1):
                before = settled_rss_mb(server.proc.pid)
                peak = upload_and_chart(chromium, server, logs)
                time.sleep(expire_s)
                after = settled_rss_mb(server.proc.pid)
                print(f"cycle {cycle}: before {before:.0f}, charted {peak:.0f}, tab closed and expired {after:.0f} "
                      f"({after / before:.2f}x before)")


if __name__ == "__main__":
    main()
