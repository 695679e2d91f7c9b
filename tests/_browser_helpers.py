"""Helpers for driving the dashboard in headless Chromium: a throwaway copy of the app, a real
`streamlit run` server, a Playwright browser, and waits that know when a Streamlit rerun has ended.

Facts these rely on (Streamlit 1.67): `[data-testid="stApp"]` carries `data-test-script-state`
(`running` / `notRunning` / ...), a rerun shows `stStatusWidget` and may show `stSkeleton`
placeholders, the selectbox is a React Aria combobox, and the page scrolls inside `stMain` (so a
full-page screenshot needs a viewport as tall as the content).
"""
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
# What the app needs to run and to train; out/, checkpoints/, runs/ and user data sets stay behind.
APP_PARTS = (".streamlit", "streamlit_app.py", "static", "pages", "mmcore", "trainer", "model", "dataset")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    # Any host but this machine fails at once instead of waiting for a timeout.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
]
# Headless Chromium hangs without a word on a native save dialog (st.dataframe's CSV download).
NO_SAVE_PICKER = "delete window.showSaveFilePicker;"


def browser_missing_reason():
    """Why the browser test cannot run here (no Chromium, no Playwright), or None when it can."""
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} not found (Debian package `chromium`)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the Python package `playwright` is not installed"
    return None


# -- the app and its server ------------------------------------------------------------------------

def copy_app(dest):
    """Copy the app's code and bundled data into `dest`, so jobs write out/ and checkpoints/ there.

    Caches, training outputs and large user data sets (`dataset/*.jsonl`) are left out.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "out", "checkpoints", "live-*.json", ".live-*.tmp")
    for name in APP_PARTS:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=skip)
        else:
            shutil.copy2(src, dest / name)
    for data in (dest / "dataset").glob("*.jsonl"):  # only dataset/demo/ is bundled data
        data.unlink()
    return dest


def write_pretrain_head(app_dir, name, lines):
    """`dataset/<name>` in the app copy: the first `lines` lines of the bundled demo pretrain data."""
    with open(Path(app_dir) / "dataset" / "demo" / "pretrain.jsonl", encoding="utf-8") as demo:
        (Path(app_dir) / "dataset" / name).write_text("".join(next(demo) for _ in range(lines)), encoding="utf-8")


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StreamlitServer:
    """`python -m streamlit run streamlit_app.py` in `app_dir`, in its own process group.

    Use as a context manager: entering waits until `/_stcore/health` answers `ok`; leaving stops the
    whole group (the server and anything it started in that group). Jobs the dashboard launches run
    in their own sessions and are not part of the group. Server output goes to `log_path`.
    """

    def __init__(self, app_dir, home, log_path, port=None, start_timeout=60.0, address="127.0.0.1", unset_env=(),
                 options=(), launcher=None, env=None):
        self.app_dir = Path(app_dir)
        # what starts the server, before its options: `streamlit run streamlit_app.py` unless given
        # (e.g. ["minimind-dashboard"], the installed command)
        self.launcher = list(launcher or [sys.executable, "-m", "streamlit", "run", "streamlit_app.py"])
        self.options = tuple(options)  # more `streamlit run` options, e.g. ("--server.enableStaticServing", "false")
        self.address = address  # "0.0.0.0": every interface, as a dashboard served to a team
        self.unset_env = tuple(unset_env)  # variables of this process the server must not see
        # variables the server (and the jobs it starts) gets on top of this process's, e.g. narrower write roots
        # so that its Models catalogue walks only the app's out/ (the tests' roots hold the run's temporary folder)
        self.env = dict(env or {})
        self.home = Path(home)
        self.log_path = Path(log_path)
        self.port = port or free_port()
        self.start_timeout = start_timeout
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def __enter__(self):
        env = {**{k: v for k, v in os.environ.items() if k not in self.unset_env},
               "MINIMIND_DASHBOARD_HOME": str(self.home), "PYTHONPATH": str(self.app_dir), "PYTHONUNBUFFERED": "1", **self.env}
        argv = [*self.launcher,
                "--server.headless", "true", "--server.address", self.address, "--server.port", str(self.port),
                "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none", *self.options]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, cwd=self.app_dir, env=env, stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def output(self):
        """What the server printed so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _wait_healthy(self):
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with code {self.proc.returncode}:\n{self.output()}")
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as reply:
                    if reply.read().decode().strip() == "ok":
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        raise TimeoutError(f"streamlit did not answer {self.url}/_stcore/health within "
                           f"{self.start_timeout:.0f} s:\n{self.output()}")

    def stop(self, grace=10.0):
        """SIGTERM to the server's process group, SIGKILL if it is still there after `grace` seconds."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        self._log.close()
        self.proc = None


def stop_jobs(home):
    """Stop whatever a test left running: jobs run in sessions of their own, outside the server's group."""
    from mmcore.jobs import runner
    from mmcore.jobs.jobrow import ACTIVE_STATUSES
    from mmcore.jobs.jobstore import JobStore

    store = JobStore(home)
    for job in store.list(status=ACTIVE_STATUSES, limit=None):
        runner.stop(store, job.id, grace=5, wait=True)


# -- the browser -----------------------------------------------------------------------------------

def launch_browser(playwright):
    """Debian's headless Chromium through Playwright (never a downloaded browser)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)


@contextlib.contextmanager
def chromium():
    """A headless Chromium for the `with` block (Playwright started and stopped with it)."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as playwright:
        browser = launch_browser(playwright)
        try:
            yield browser
        finally:
            browser.close()


@contextlib.contextmanager
def app_page(url, width=1400, height=900, timeout_ms=30_000, browser=None):
    """A page with the app at `url` loaded, for the `with` block: in `browser`, or in a fresh headless
    Chromium (one Playwright at a time: a test module that opens several pages passes its browser)."""
    if browser is None:
        with chromium() as fresh, app_page(url, width, height, timeout_ms, fresh) as page:
            yield page
        return
    page = new_page(browser, width, height)
    try:
        page.set_default_timeout(timeout_ms)
        open_app(page, url)
        yield page
    finally:
        page.context.close()


def new_page(browser, width=1400, height=900):
    """A fresh page (own context) with downloads allowed and the save-dialog hang removed."""
    context = browser.new_context(viewport={"width": width, "height": height}, accept_downloads=True)
    context.add_init_script(NO_SAVE_PICKER)
    return context.new_page()


# Resolves once `stApp` has been free of DOM changes for `quietMs` (or rejects after `limitMs`).
_QUIET_JS = """([quietMs, limitMs]) => new Promise((resolve, reject) => {
    const app = document.querySelector('[data-testid="stApp"]');
    if (!app) { reject(new Error('no stApp on the page')); return; }
    let timer;
    const started = performance.now();
    const done = () => { observer.disconnect(); clearTimeout(limit); resolve(performance.now() - started); };
    const observer = new MutationObserver(() => { clearTimeout(timer); timer = setTimeout(done, quietMs); });
    const limit = setTimeout(() => { observer.disconnect(); clearTimeout(timer);
                                     reject(new Error('the page kept changing for ' + limitMs + ' ms')); }, limitMs);
    observer.observe(app, {subtree: true, childList: true, attributes: true, characterData: true});
    timer = setTimeout(done, quietMs);
})"""

# True when no script run is in progress and nothing shows a pending rerun.
_IDLE_JS = """() => {
    const app = document.querySelector('[data-testid="stApp"]');
    if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
    if (document.querySelector('[data-testid="stStatusWidget"]')) return false;
    for (const s of document.querySelectorAll('[data-testid="stSkeleton"]')) {
        if (s.offsetParent !== null) return false;
    }
    return true;
}"""


def wait_for_rerun(page, timeout=30.0, quiet_ms=150):
    """Wait until the current rerun has ended: script state `notRunning`, no status widget, no
    visible skeleton, then `quiet_ms` without any DOM change (a very fast rerun never shows
    `running`, so the quiet period is what catches it). Checked twice, since a fragment refresh
    may start in between."""
    deadline = time.monotonic() + timeout
    for _ in range(2):
        left_ms = max(1000, (deadline - time.monotonic()) * 1000)
        page.wait_for_function(_IDLE_JS, timeout=left_ms, polling=50)
        left_ms = max(1000, (deadline - time.monotonic()) * 1000)
        page.evaluate(_QUIET_JS, [quiet_ms, left_ms])
        if page.evaluate(_IDLE_JS):
            return
    page.wait_for_function(_IDLE_JS, timeout=max(1000, (deadline - time.monotonic()) * 1000), polling=50)


def open_app(page, url, timeout=60.0):
    """Load the app at `url` and wait for its first run to finish."""
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_selector('[data-testid="stApp"]', timeout=timeout * 1000)
    wait_for_rerun(page, timeout)


def go_to(page, title, timeout=30.0):
    """Open a page by its sidebar link title ("Jobs") and wait for its run to finish."""
    link = page.locator('a[data-testid="stSidebarNavLink"]', has_text=title)
    link.first.click()
    page.wait_for_function(
        """(title) => [...document.querySelectorAll('a[data-testid="stSidebarNavLink"][aria-current="page"]')]
                      .some(a => a.textContent.includes(title))""", arg=title, timeout=timeout * 1000)
    wait_for_rerun(page, timeout)


def selectbox(page, label):
    """The `stSelectbox` whose label is `label` (exact)."""
    return page.locator('[data-testid="stSelectbox"]').filter(
        has=page.locator('[data-testid="stWidgetLabel"]', has_text=label)).filter(
        has=page.get_by_label(label, exact=True)).first


def choose(page, label, option, timeout=30.0):
    """Pick `option` (its visible text, exact) in the selectbox labelled `label`, then wait for the rerun."""
    box = selectbox(page, label)
    field = box.locator('input[role="combobox"]')
    field.click()
    # Long lists render only the first rows: typing filters them down to the wanted one.
    field.fill(option)
    dropdown = page.locator('[data-testid="stSelectboxVirtualDropdown"] [role="option"]')
    dropdown.filter(has_text=option).filter(has=page.get_by_text(option, exact=True)).first.click()
    wait_for_rerun(page, timeout)


def input_value(scope, label):
    """The value shown by the text/number input or selectbox labelled `label` inside `scope`."""
    return scope.get_by_label(label, exact=True).first.input_value()


def wait_for_input_value(scope, label, value, timeout=30.0):
    """Wait until the input labelled `label` shows `value` (a field that follows another one's choice is filled by
    the rerun that choice starts, which a loaded server may begin after wait_for_rerun's quiet period); fails with
    the value it shows after `timeout` seconds."""
    from playwright.sync_api import expect

    expect(scope.get_by_label(label, exact=True).first).to_have_value(value, timeout=timeout * 1000)


def card(page, title):
    """The bordered container whose bold title is exactly `title` ("GRPO parameters")."""
    heading = page.locator('[data-testid="stMarkdownContainer"] strong').filter(
        has_text=re.compile(rf"^{re.escape(title)}$"))
    # The innermost block holding both the title and widgets: the card, not the page around it.
    return page.locator('[data-testid="stVerticalBlock"]').filter(has=heading).filter(
        has=page.locator('[data-testid="stWidgetLabel"]')).last


def main_text(page):
    """The visible text of the page's main area (not the sidebar)."""
    return page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]')?.innerText ?? ''")


def wait_for_main_text(page, pattern, timeout=60.0):
    """The main area's text once the regex `pattern` matches it (a page opened from a link draws its sidebar before
    its main area, and a loaded server may start that run after wait_for_rerun's quiet period)."""
    deadline = time.monotonic() + timeout
    while not pattern.search(text := main_text(page)):
        assert time.monotonic() < deadline, f"{pattern.pattern!r} is not on the page:\n{text[:2000]}"
        time.sleep(0.2)
    return text


def dataframe_cells(page, index=0):
    """The rendered cells of the `index`-th st.dataframe, row by row (its canvas mirrors them in a
    hidden grid table; only the rows in view are there)."""
    return page.evaluate("""(index) => {
        const frame = document.querySelectorAll('[data-testid="stDataFrame"]')[index];
        if (!frame) return null;
        return [...frame.querySelectorAll('table[role="grid"] tr')]
            .map(tr => [...tr.querySelectorAll('th, td')].map(c => c.innerText.trim()));
    }""", index)


def jobs_table_cells(page):
    """The cells of the Jobs page's table (`mmcore.jobs.htmltable.table_parts`), row by row, header first."""
    return page.evaluate("""() => {
        const table = document.querySelector('.st-key-jobs_table');
        if (!table) return null;
        return [...table.querySelectorAll('tr')].map(tr => [...tr.querySelectorAll('th, td')].map(c => c.innerText.trim()));
    }""")


def wait_for_table_cell(page, text, timeout=30.0):
    """Wait until a cell of a plain table (the jobs table) shows `text`."""
    page.wait_for_function("""(text) => [...document.querySelectorAll('.minimind-table td')]
                              .some(td => td.innerText.includes(text))""", arg=text, timeout=timeout * 1000,
                           polling=200)


def wait_for_dataframe_cell(page, text, timeout=30.0):
    """Wait until a cell of some st.dataframe shows `text` (the grid fills its hidden table a few
    frames after the canvas is drawn)."""
    page.wait_for_function("""(text) => [...document.querySelectorAll('[data-testid="stDataFrame"] td')]
                              .some(td => td.innerText.includes(text))""", arg=text, timeout=timeout * 1000)


def fill(page, label, value, timeout=30.0):
    """Type `value` into the text input labelled `label`, leave the field (which commits it), and
    wait for the rerun."""
    field = page.get_by_label(label, exact=True).first
    field.fill(value)
    field.press("Tab")
    wait_for_rerun(page, timeout)


def exceptions(page):
    """The text of every `stException` on the page (empty when there is none)."""
    return page.locator('[data-testid="stException"]').all_inner_texts()


# Streamlit's own Plotly charts, and the dashboard's live charts (mmcore.live.livechart).
PLOTS = '[data-testid="stPlotlyChart"] .js-plotly-plot, .minimind-livechart.js-plotly-plot'
_CHARTS_JS = """() => Object.fromEntries(
    [...document.querySelectorAll('""" + PLOTS + """')].map((plot, i) => {
        // Streamlit's theme wraps titles in <b>: keep only the text.
        const title = String(plot.layout?.title?.text ?? `chart ${i}`).replace(/<[^>]*>/g, '');
        const traces = (plot.data || []).map((t, j) => {
            const full = (plot._fullData || [])[j];
            const n = full && Number.isFinite(full._length) ? full._length
                    : Math.max((t.x || []).length || 0, (t.y || []).length || 0);
            return [String(t.name ?? ''), n];
        });
        return [title, traces];
    }))"""


def plotly_charts(page, title, timeout=30.0):
    """{title: [(trace name, number of points), ...]} of every Plotly chart on the page, once the
    chart titled `title` has drawn its traces (the first Plotly chart on a page loads its code
    first, about 2 s).

    Points are counted from Plotly's own resolved traces (`_fullData[i]._length`), which also covers
    data sent as typed arrays.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(f"(title) => ({_CHARTS_JS})()[title]?.length > 0", arg=title,
                               timeout=timeout * 1000, polling=100)
    except PlaywrightTimeout:
        # Say what the page showed instead: its address, its charts and its text.
        raise AssertionError(f"no chart {title!r} with traces after {timeout:.0f} s at {page.url}; charts: "
                             f"{page.evaluate(_CHARTS_JS)}; page text:\n{main_text(page)[:3000]}") from None
    return page.evaluate(_CHARTS_JS)


def screenshot(page, name):
    """Save a full-page screenshot to test-artifacts/<name>.png and return its path.

    Streamlit scrolls inside `stMain`, so the viewport is grown to the content's height first (and
    put back afterwards).
    """
    from playwright.sync_api import Error as PlaywrightError

    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    size = page.viewport_size
    height = page.evaluate("""() => {
        // a page with a chat input scrolls in another container
        const main = document.querySelector('[data-testid="stMain"], [data-testid="stAppScrollToBottomContainer"]');
        const side = document.querySelector('[data-testid="stSidebarContent"]');
        return Math.max(main ? main.scrollHeight : 0, side ? side.scrollHeight : 0, window.innerHeight);
    }""")
    page.set_viewport_size({"width": size["width"], "height": min(int(height) + 40, 12000)})
    try:
        page.evaluate("() => document.activeElement?.blur()")  # no focus ring in the picture
        try:
            page.evaluate(_QUIET_JS, [150, 5000])
        except PlaywrightError:
            pass  # a page that keeps refreshing is photographed as it is
        page.screenshot(path=str(path), full_page=True)
    finally:
        page.set_viewport_size(size)
    return path


@contextlib.contextmanager
def screenshot_on_failure(page, name):
    """On any failure inside the block, save a screenshot `<name>-failed` and name it in the error."""
    try:
        yield
    except Exception as exc:
        try:
            exc.add_note(f"screenshot: {screenshot(page, f'{name}-failed')}")
        except Exception as shot_error:  # the page itself may be what broke
            exc.add_note(f"no screenshot: {shot_error}")
        raise
