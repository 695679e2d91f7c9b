"""The Logs page's live charts in headless Chromium (mmcore.live.livechart): a chart of a growing
log gains points without being drawn anew and keeps the user's zoom; zooming into a long run shows
every point of the zoomed range; a hidden tab sends nothing and draws nothing until it is shown."""
import json
import re
import shutil
import threading
import time
from pathlib import Path

import _browser_helpers as browser
import pytest

from mmcore.jobs.jobstore import JobStore
from mmcore.logs import charts
from mmcore.runs import metric_stream, rlview

pytestmark = pytest.mark.browser

MISSING = browser.browser_missing_reason()
LOSS = charts.chart_title("loss")
THROUGHPUT = next(panel.title for panel in rlview.PANELS if panel.key == "throughput")
LONG_STEPS = 50_000
GROWN_WITHIN_S = 40.0  # a 10 s follow, a 3 s tick, a fragment run and a draw, on two busy cores


def log_line(step, total):
    loss = 5 - step / total + (step % 7) / 100
    return f"Epoch:[1/1]({step}/{total}) loss:{loss:.6f} lr:0.000500000000 epoch_Time:1.0min:\n"


def record_line(step):
    return json.dumps({"global_step": step, "epoch": 1, "step": step, "tokens_per_s": 1000 + step % 13}) + "\n"


def job_with_log(store, name, steps, total, records=False):
    """A finished job with a log of `steps` steps and, with `records`, its metrics records."""
    job_id = store.create("pretrain", name, {"epochs": "1"}, ["python", "x.py"], "/tmp", {})
    store.update(job_id, status="succeeded", started_at=time.time() - 60, ended_at=time.time(), exit_code=0)
    with open(store.get(job_id).log_path, "w", encoding="utf-8") as f:
        f.write("".join(log_line(s, total) for s in range(1, steps + 1)))
    if records:
        folder = metric_stream.job_dir(store.home, job_id)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / metric_stream.METRICS_FILE).write_text("".join(record_line(s) for s in range(1, steps + 1)))
    return job_id


def grpo_job(store):
    """A finished GRPO job whose log has rewards and their std (the reward chart draws a band)."""
    job_id = store.create("grpo", "grpo", {"epochs": "1"}, ["python", "x.py"], "/tmp", {})
    store.update(job_id, status="succeeded", started_at=time.time() - 60, ended_at=time.time(), exit_code=0)
    shutil.copy(Path(__file__).parent / "data" / "logs" / "dashboard_grpo.log", store.get(job_id).log_path)
    return job_id


class Writer:
    """Appends a progress line to a log (and a record to `records`, if given) every `every_s` seconds
    while it is on (a job that trains)."""

    def __init__(self, path, step, total, every_s=0.3, records=None):
        self.path, self.step, self.total, self.every_s, self.records = path, step, total, every_s, records
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(self.every_s):
            self.step += 1
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(log_line(self.step, self.total))
            if self.records is not None:
                with open(self.records, "a", encoding="utf-8") as f:
                    f.write(record_line(self.step))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if MISSING:
        pytest.skip(f"browser test needs Chromium and Playwright: {MISSING}")
    tmp = tmp_path_factory.mktemp("charts")
    app_dir = browser.copy_app(tmp / "app")
    (tmp / "home").mkdir()
    store = JobStore(tmp / "home")
    jobs = {"long": job_with_log(store, "long", LONG_STEPS, LONG_STEPS),
            "growing": job_with_log(store, "growing", 300, 100_000, records=True),
            "grpo": grpo_job(store)}
    with browser.StreamlitServer(app_dir, home=tmp / "home", log_path=tmp / "streamlit.log") as srv:
        srv.jobs, srv.store = jobs, store
        yield srv


@pytest.fixture(scope="module")
def chromium():
    with browser.chromium() as b:
        yield b


# The loss chart's element, found by its title.
_PLOT = """(title) => [...document.querySelectorAll('.minimind-livechart.js-plotly-plot')]
                       .find(p => String(p.layout?.title?.text ?? '').includes(title))"""


def chart_state(page, title=LOSS):
    """What the live chart titled `title` holds and shows: its message number, draws, calls of its
    component (each page run is one), the x values of its first trace, its x axis range and whether the user zoomed it, and a mark set on its element."""
    return page.evaluate(f"""(title) => {{
        const plot = ({_PLOT})(title);
        if (!plot) return null;
        const chart = plot.__minimindChart, trace = plot.data[0];
        return {{seq: chart.seq, draws: chart.draws, calls: chart.generation, x: Array.from(trace.x),
                 range: plot.layout.xaxis.range,
                 autorange: plot.layout.xaxis.autorange, mark: plot.__testMark ?? null}};
    }}""", title)


def wait_for_plot(page, condition, timeout_s=30.0, title=LOSS):
    """Wait until `condition` (JavaScript over `plot`, the chart's element) holds."""
    page.wait_for_function(f"(title) => {{ const plot = ({_PLOT})(title); return !!plot && ({condition}); }}",
                           arg=title, timeout=timeout_s * 1000, polling=200)


def open_logs(page, server, job_id):
    browser.open_app(page, f"{server.url}/logs?job={job_id}")
    browser.plotly_charts(page, LOSS, timeout=60)


def zoom(page, low, high, title=LOSS):
    """Zoom the chart's x axis as a drag on it does (Plotly's relayout, which the chart reports)."""
    page.evaluate(f"""([title, low, high]) => {{
        const plot = ({_PLOT})(title);
        plot.__testMark = 'zoomed here';
        return window.Plotly.relayout(plot, {{'xaxis.range': [low, high]}});
    }}""", [title, low, high])


def test_a_growing_chart_gains_points_and_keeps_the_zoom(server, chromium):
    page = browser.new_page(chromium)
    store = server.store
    sent, pushed = [], []
    page.on("websocket", lambda ws: ws.on("framesent", lambda payload: sent.append(payload)))
    page.on("request", lambda request: "-feed-" in request.url and pushed.append(request.url))
    with browser.screenshot_on_failure(page, "charts-growing"):
        open_logs(page, server, server.jobs['growing'])
        zoom(page, 100, 200)
        browser.wait_for_rerun(page)  # the zoom reported (every point of this run shows anyway)
        before = chart_state(page)
        assert before["range"] == [100, 200] and before["mark"] == "zoomed here"
        sent.clear()
        pushed.clear()
        records = metric_stream.job_dir(store.home, server.jobs['growing']) / metric_stream.METRICS_FILE
        with Writer(store.get(server.jobs['growing']).log_path, 300, 100_000, records=records) as writer:
            wait_for_plot(page, "plot.data[0].x[plot.data[0].x.length - 1] >= 310", GROWN_WITHIN_S)
            after = chart_state(page)
            grown_to = writer.step
            # The records panel (below the fold: a chart draws once it is on screen) grew too.
            page.locator(".minimind-livechart").last.scroll_into_view_if_needed()
            wait_for_plot(page, "plot.data[0].x[plot.data[0].x.length - 1] >= 310", GROWN_WITHIN_S, title=THROUGHPUT)
        # The points were pushed (the section's feed, a static file, records panels included): no run
        # of the section's fragment asked for them (nor of the page: `calls` below).
        assert pushed and not [frame for frame in sent if b"logs.live.tick" in frame], (pushed, sent)
        assert "live feed" not in server.log_path.read_text(encoding="utf-8")
        assert after["x"][-1] > before["x"][-1] and after["x"][-1] <= grown_to
        assert after["seq"] > before["seq"] and after["draws"] > before["draws"]  # new messages, drawn
        assert after["mark"] == "zoomed here"  # the same element, not a new chart
        assert after["range"] == [100, 200] and not after["autorange"]  # the user's zoom is kept
        assert after["x"] == sorted(after["x"]) and len(set(after["x"])) == len(after["x"])
        # The points came through the page's feed: no run of the page drew the chart again.
        assert after["calls"] == before["calls"]
        summary = page.locator(".minimind-livetext").first.inner_text()  # the run's summary line follows too
        shown = re.search(r"growing.* · step ([\d,]+) / 100,000", summary)
        assert shown and int(shown.group(1).replace(",", "")) >= after["x"][-1], summary
        assert not browser.exceptions(page)


def test_zooming_a_long_run_shows_every_point_of_the_range(server, chromium):
    page = browser.new_page(chromium)
    with browser.screenshot_on_failure(page, "charts-zoom"):
        open_logs(page, server, server.jobs['long'])
        whole = chart_state(page)
        assert len(whole["x"]) <= charts.MAX_POINTS and whole["x"][0] == 1 and whole["x"][-1] == LONG_STEPS
        window = [x for x in whole["x"] if 20_000 <= x <= 21_000]
        assert len(window) < 200  # thinned: a point in tens of the window's
        zoom(page, 20_000, 21_000)
        wait_for_plot(page, "plot.data[0].x.filter(x => x >= 20000 && x <= 21000).length === 1001")
        zoomed = chart_state(page)
        assert len(zoomed["x"]) <= charts.MAX_POINTS
        assert zoomed["range"] == [20_000, 21_000]
        assert zoomed["x"][0] == 1 and zoomed["x"][-1] == LONG_STEPS  # the rest of the run, coarsely
        # Zoomed out again (a double click): the whole run, thinned.
        page.evaluate(f"(title) => window.Plotly.relayout(({_PLOT})(title), {{'xaxis.autorange': true}})", LOSS)
        wait_for_plot(page, "plot.data[0].x.filter(x => x >= 20000 && x <= 21000).length < 200")
        assert not browser.exceptions(page)


HIDE = """() => {
    Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => 'hidden'});
    Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});
    document.dispatchEvent(new Event('visibilitychange'));
}"""
SHOW = """() => {
    delete document.visibilityState;
    delete document.hidden;
    document.dispatchEvent(new Event('visibilitychange'));
}"""


def test_a_hidden_tab_sends_nothing_and_draws_nothing(server, chromium):
    """While hidden (another tab in front), a Logs tab on a growing log sends no message and fetches
    nothing; shown again, its chart catches up."""
    page = browser.new_page(chromium)
    store = server.store
    sent, fetched = [], []
    page.on("websocket", lambda ws: ws.on("framesent", lambda payload: sent.append(len(payload))))
    page.on("request", lambda request: fetched.append(request.url))
    with browser.screenshot_on_failure(page, "charts-hidden"):
        open_logs(page, server, server.jobs['growing'])
        with Writer(store.get(server.jobs['growing']).log_path, chart_state(page)["x"][-1], 100_000) as writer:
            page.wait_for_timeout(3000)
            assert fetched, "the visible tab fetched nothing: the hidden window would prove nothing"
            page.evaluate(HIDE)
            page.wait_for_timeout(500)  # a fetch begun before hiding may still end
            sent.clear()
            fetched.clear()
            hidden = chart_state(page)
            page.wait_for_timeout(8000)
            assert sent == [] and fetched == [], (sent, fetched)
            assert chart_state(page)["draws"] == hidden["draws"]
            grown_to = writer.step
            page.evaluate(SHOW)
            wait_for_plot(page, f"plot.data[0].x[plot.data[0].x.length - 1] >= {grown_to}", GROWN_WITHIN_S)
        # Its pushed feed (a static file), or, where it missed one, a run of its fragment.
        assert sent or any("-feed-" in url for url in fetched), "shown again, the tab asked for what changed"
        assert not browser.exceptions(page)


def test_points_that_arrive_after_the_tab_is_hidden_are_drawn_only_when_it_is_shown(server, chromium):
    """A feed asked for while the tab was visible and answered after it was hidden (the race of a
    busy machine): its points are taken but not drawn until the tab is shown again."""
    page = browser.new_page(chromium)
    held, holding = [], threading.Event()
    page.route("**/*-feed-*", lambda route: held.append(route) if holding.is_set() else route.continue_())
    with browser.screenshot_on_failure(page, "charts-hidden-late"):
        open_logs(page, server, server.jobs['growing'])
        with Writer(server.store.get(server.jobs['growing']).log_path, chart_state(page)["x"][-1], 100_000):
            first = chart_state(page)
            wait_for_plot(page, f"plot.__minimindChart.seq > {first['seq']}", GROWN_WITHIN_S)  # fed once
            holding.set()
            deadline = time.monotonic() + GROWN_WITHIN_S
            while not held and time.monotonic() < deadline:
                page.wait_for_timeout(200)
            assert held, "the visible tab asked for no further feed"
            before = chart_state(page)
            page.evaluate(HIDE)
            holding.clear()
            for route in held:
                route.continue_()
            page.wait_for_timeout(3000)
            hidden = chart_state(page)
            assert hidden["seq"] > before["seq"], "the late feed's points were not taken"
            assert hidden["draws"] == before["draws"] and hidden["x"] == before["x"]
            page.evaluate(SHOW)
            wait_for_plot(page, f"plot.__minimindChart.draws > {before['draws']}", 10)
        assert chart_state(page)["x"][-1] > before["x"][-1]
        assert not browser.exceptions(page)


def test_a_change_beyond_the_live_parts_draws_the_page_again(server, chromium):
    """A followed log that grows is followed through the feed (the page is not drawn again); when it
    gains an error, its box (not a live part of the section) appears without a click, the page drawn
    again."""
    store = server.store
    job_id = job_with_log(store, "failing", 300, 100_000)
    page = browser.new_page(chromium)
    summary = "() => document.querySelector('.minimind-livetext')?.innerText ?? ''"
    with browser.screenshot_on_failure(page, "charts-error"):
        open_logs(page, server, job_id)
        page.wait_for_timeout(3000)  # the server has seen the new job: no run of the page is due
        before = chart_state(page)
        with open(store.get(job_id).log_path, "a", encoding="utf-8") as f:
            f.write(log_line(301, 100_000))
        page.wait_for_function(f"() => ({summary})().includes('step 301 /')", timeout=GROWN_WITHIN_S * 1000,
                               polling=200)
        assert chart_state(page)["calls"] == before["calls"] and "last error" not in browser.main_text(page)
        with open(store.get(job_id).log_path, "a", encoding="utf-8") as f:
            f.write(log_line(302, 100_000) + 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
                    "RuntimeError: out of memory\n")
        page.wait_for_function("() => document.body.innerText.includes('failing: last error')",
                               timeout=GROWN_WITHIN_S * 1000, polling=200)
        assert not browser.exceptions(page)


def test_choosing_a_runs_log_tail_shows_it_and_draws_no_chart_anew(server, chromium):
    """Of several runs no log tail shows until its run is chosen; showing one adds its tail without
    moving the charts below it (the records chart stays the same element, drawn once)."""
    store = server.store
    other = job_with_log(store, "other", 50, 100, records=True)
    page = browser.new_page(chromium, height=3000)  # every chart on screen: each draws
    with browser.screenshot_on_failure(page, "charts-tails"):
        open_logs(page, server, f"{server.jobs['growing']},{other}")
        wait_for_plot(page, "plot.__minimindChart.draws > 0", title=THROUGHPUT)
        assert page.locator(".minimind-log-tail").count() == 0
        page.evaluate(f"(title) => {{ ({_PLOT})(title).__testMark = 'kept'; }}", THROUGHPUT)
        page.get_by_test_id("stButtonGroup").get_by_role("button", name=re.compile(r"— other$")).click()
        page.wait_for_function("() => document.querySelectorAll('.minimind-log-tail').length === 1", timeout=30_000)
        browser.wait_for_rerun(page)
        assert "Epoch:[1/1](50/100)" in page.locator(".minimind-log-tail").inner_text()
        records = chart_state(page, THROUGHPUT)
        assert records["mark"] == "kept" and records["draws"] == 1, records
        # The health thresholds' fields are built when their expander is opened, not with the page.
        fields = page.get_by_test_id("stNumberInput").filter(has_text="window")
        assert fields.count() == 0
        page.get_by_test_id("stExpander").filter(has_text="Health check thresholds").locator("summary").click()
        fields.first.wait_for(timeout=30_000)
        browser.wait_for_rerun(page)
        assert page.get_by_role("button", name="Save thresholds").count() == 1
        assert not browser.exceptions(page)


def test_the_reward_band_is_translucent_under_its_line_and_named_in_the_legend(server, chromium):
    """What the live chart's JavaScript drew (not only the figure sent): the band's fill is the run's colour at
    an alpha of at most 0.35, its traces come before the line's, and the legend shows "<run> ± std"."""
    reward = charts.chart_title("reward")
    page = browser.new_page(chromium)
    with browser.screenshot_on_failure(page, "charts-band"):
        browser.open_app(page, f"{server.url}/logs?job={server.jobs['grpo']}")
        browser.plotly_charts(page, reward, timeout=60)
        drawn = page.evaluate(f"""(title) => {{
            const plot = ({_PLOT})(title);
            const fills = [...plot.querySelectorAll('path.js-fill')].filter(p => getComputedStyle(p).fill !== 'none')
                .map(p => {{  // the alpha the browser paints with: the path's fill-opacity times its groups' opacity
                    let alpha = Number(getComputedStyle(p).fillOpacity);
                    for (let e = p.parentElement; e && e !== plot; e = e.parentElement) alpha *= Number(getComputedStyle(e).opacity);
                    return alpha;
                }});
            return {{traces: plot.data.map(t => ({{name: t.name, fill: t.fill ?? null, fillcolor: t.fillcolor ?? null,
                                                    opacity: t.opacity ?? 1}})),
                     legend: [...plot.querySelectorAll('.legendtext')].map(e => e.textContent), fills}};
        }}""", reward)
        band = next(i for i, t in enumerate(drawn["traces"]) if t["fill"] == "tonexty")
        line = next(i for i, t in enumerate(drawn["traces"]) if t["fill"] is None and "std" not in t["name"])
        assert band < line  # drawn first: the line lies over the band
        alpha = float(re.fullmatch(r"rgba\(\d+, ?\d+, ?\d+, ?([\d.]+)\)", drawn["traces"][band]["fillcolor"]).group(1))
        assert 0 < alpha <= 0.35 and drawn["traces"][band]["opacity"] == 1
        assert drawn["fills"] and all(0 < a <= 0.35 for a in drawn["fills"]), drawn["fills"]  # what the browser painted
        assert any(text.endswith("± std") for text in drawn["legend"]), drawn["legend"]
        assert not browser.exceptions(page)
