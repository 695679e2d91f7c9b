"""What a member's uploaded logs cost the real server, and that it is given back: in headless Chromium a
member's tab uploads three logs on Logs, charts them and is closed; once its session has expired (the
reconnect time, then the session janitor's sweeps), the server's RSS is back within 20% of what it was
before the upload. Twice, so that the second upload starts from what the first left. The figures for
bigger logs are `python -m bench.bench_uploads`'.
"""
import time

import _browser_helpers as browser
import pytest

from bench import bench_uploads
from mmcore.access import roles
from mmcore.widgets import session_janitor

pytestmark = pytest.mark.browser

MISSING = browser.browser_missing_reason()
LOG_MB = 15


def test_a_closed_tabs_uploads_are_given_back(tmp_path):
    if MISSING:
        pytest.skip(f"browser test needs Chromium and Playwright: {MISSING}")
    app_dir = browser.copy_app(tmp_path / "app")
    home = tmp_path / "home"
    home.mkdir()
    (home / "roles.toml").write_text(f'[users]\n"{roles.os_user()}" = "member"\n')
    warmup = tmp_path / "warmup.log"
    bench_uploads.big_log(warmup, 0.01)
    logs = [tmp_path / f"big{i}.log" for i in range(3)]
    for path in logs:
        bench_uploads.big_log(path, LOG_MB)
    server = browser.StreamlitServer(app_dir, home=home, log_path=tmp_path / "streamlit.log",
                                     unset_env=(roles.ROLES_ENV,),
                                     options=("--server.disconnectedSessionTTL", str(bench_uploads.SESSION_TTL_S)))
    expire_s = bench_uploads.SESSION_TTL_S + 2 * session_janitor.SWEEP_S
    with server, browser.chromium() as chromium:
        bench_uploads.upload_and_chart(chromium, server, [warmup])  # the first chart's imports and caches
        time.sleep(expire_s)
        for cycle in (1, 2):
            before = bench_uploads.settled_rss_mb(server.proc.pid)
            charted = bench_uploads.upload_and_chart(chromium, server, logs)
            time.sleep(expire_s)
            after = bench_uploads.settled_rss_mb(server.proc.pid)
            assert after <= 1.2 * before, (
                f"cycle {cycle}: server RSS {before:.0f} MiB before, {charted:.0f} MiB charted, "
                f"{after:.0f} MiB after the tab's session ended")
