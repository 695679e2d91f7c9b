"""The Runs page and the sweep form in headless Chromium: the runs table filters and sorts; the diff shows only
the parameters that differ; the Train page's sweep form shows the run count before anything is queued; the
sweep view's parallel-coordinates chart draws one line per run. No page shows an exception."""
import json

import _browser_helpers as browser
import pytest

pytestmark = pytest.mark.browser

MISSING = browser.browser_missing_reason()
RUNS = (("alpha", "1e-3", 2.0), ("beta", "2e-3", 1.0), ("gamma", "5e-4", 3.0))


def filled_home(home):
    """A job store with three finished runs of one sweep, each with a metrics stream."""
    from mmcore.experiments import sweeps
    from mmcore.jobs.jobstore import JobStore
    from mmcore.runs.metric_stream import job_dir
    from mmcore.train.preset_table import demo_preset

    store = JobStore(home / "jobs.db")
    ids = []
    for name, lr, loss in RUNS:
        job_id = store.create("pretrain", name, {**demo_preset("pretrain"), "learning_rate": lr}, ["python3", "x.py"],
                              "/tmp", {})
        store.update(job_id, status="succeeded", started_at=100.0, ended_at=160.0, exit_code=0)
        folder = job_dir(home, job_id)
        folder.mkdir(parents=True)
        (folder / "metrics.jsonl").write_text("".join(json.dumps({"global_step": s, "loss": v, "tokens": 64 * s}) + "\n"
                                                      for s, v in ((1, 4.0), (2, loss))))
        ids.append(job_id)
    kept = sweeps.SweepStore(store.path)
    kept.add_jobs(kept.reserve("lr", sweeps.SweepSpec("pretrain", grid={"learning_rate": [r[1] for r in RUNS]}),
                               "someone"), ids)
    return ids


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    if MISSING:
        pytest.skip(f"browser test needs Chromium and Playwright: {MISSING}")
    tmp = tmp_path_factory.mktemp("browser-runs")
    app_dir = browser.copy_app(tmp / "app")
    (tmp / "home").mkdir()
    ids = filled_home(tmp / "home")
    server = browser.StreamlitServer(app_dir, home=tmp / "home", log_path=tmp / "streamlit.log")
    with server:
        with browser.app_page(server.url) as page:
            yield server, page, ids


def pick(page, label, text):
    """Choose the option holding `text` in the multiselect labelled `label`."""
    box = page.locator('[data-testid="stMultiSelect"]').filter(has=page.get_by_text(label, exact=True)).first
    field = box.locator("input").first
    field.click()
    field.fill(text)
    page.keyboard.press("Enter")
    page.keyboard.press("Escape")
    browser.wait_for_rerun(page)


def open_tab(page, title):
    page.get_by_role("tab", name=title).click()
    browser.wait_for_rerun(page)


def table_ids(page, expected, timeout=30.0):
    """The Job column of the first dataframe, top to bottom, once it shows `expected` (the grid mirrors its
    canvas into its hidden table a few frames after a rerun) or `timeout` has passed."""
    import time
    deadline = time.monotonic() + timeout
    while True:
        rows = browser.dataframe_cells(page, 0) or []
        header = rows[0] if rows else []
        col = header.index("Job") if "Job" in header else 1
        shown = [row[col] for row in rows[1:] if len(row) > col]
        if shown == expected or time.monotonic() > deadline:
            return shown
        time.sleep(0.2)


def test_runs_table_filters_and_sorts_and_the_diff_shows_only_differences(dashboard):
    server, page, (a, b, c) = dashboard
    with browser.screenshot_on_failure(page, "runs-table"):
        browser.open_app(page, server.url)
        browser.go_to(page, "Runs")
        browser.wait_for_dataframe_cell(page, "gamma")
        assert table_ids(page, [str(c), str(b), str(a)]) == [str(c), str(b), str(a)]
        browser.choose(page, "Sort by", "Final loss")
        page.get_by_text("Descending", exact=True).click()
        browser.wait_for_rerun(page)
        assert table_ids(page, [str(b), str(a), str(c)]) == [str(b), str(a), str(c)]
        browser.choose(page, "Filter column", "Final loss")
        browser.fill(page, "Filter", ">1.5")
        assert table_ids(page, [str(a), str(c)]) == [str(a), str(c)]
        browser.fill(page, "Search", "gam")
        assert table_ids(page, [str(c)]) == [str(c)]
        assert "1 of 3 runs" in browser.main_text(page)
        assert not browser.exceptions(page)

        open_tab(page, "Diff")
        pick(page, "Runs to compare", "alpha")
        pick(page, "Runs to compare", "beta")
        browser.wait_for_dataframe_cell(page, "learning_rate")
        text = browser.main_text(page)
        assert "Parameters" in text and "Data and code" in text
        frames = page.locator('[data-testid="stDataFrame"]')
        params = next(browser.dataframe_cells(page, i) for i in range(frames.count())
                      if any("learning_rate" in " ".join(r) for r in (browser.dataframe_cells(page, i) or [])))
        names = [row[0] for row in params[1:]]
        assert names == ["learning_rate"], params  # only what differs
        assert not browser.exceptions(page)


def test_sweep_form_counts_runs_and_the_sweep_view_draws_one_line_per_run(dashboard):
    server, page, ids = dashboard
    with browser.screenshot_on_failure(page, "runs-sweep"):
        browser.open_app(page, server.url)
        browser.go_to(page, "Runs")
        open_tab(page, "Sweeps")
        page.wait_for_function("() => document.querySelector('[data-testid=\"stPlotlyChart\"] .js-plotly-plot')"
                               "?.data?.[0]?.type === 'parcoords'", timeout=60_000)
        lines = page.evaluate("() => document.querySelector('[data-testid=\"stPlotlyChart\"] .js-plotly-plot')"
                              ".data[0].dimensions.map(d => d.values.length)")
        assert lines and set(lines) == {len(ids)}  # every axis holds one value per run: one line each
        assert page.locator('[data-testid="stPlotlyChart"] .parcoords-line-layers, '
                            '[data-testid="stPlotlyChart"] canvas').count() > 0
        assert f"Best run: job {ids[1]}" in browser.main_text(page)

        browser.go_to(page, "Train")
        page.get_by_test_id("stExpander").filter(has_text="A sweep").locator("summary").click()
        browser.wait_for_rerun(page)
        pick(page, "Parameters to vary", "Learning rate")
        browser.fill(page, "Learning rate: values (comma-separated) or a range low:high", "1e-3, 5e-4, 2e-4")
        browser.fill(page, "Seeds", "2")
        page.get_by_text("6 runs", exact=False).first.wait_for(timeout=30_000)
        assert "6 runs" in browser.main_text(page)
        assert not browser.exceptions(page)
