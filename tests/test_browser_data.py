"""The Data page in headless Chromium: a demo file's health, mask view and histogram once the background
scan is done; a crafted DPO file with bad rows (a broken line in the middle, a row of the wrong format),
an answer cut by max_seq_len and a pair with equal sides shows each problem with its line number and both
sides of a pair token by token; "Train on this file" fills the Train form. No page shows an exception."""
import json
import os
import signal

import _browser_helpers as browser
import pytest

pytestmark = pytest.mark.browser

MISSING = browser.browser_missing_reason()


def turn(question, answer):
    return [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]


CRAFTED = [
    {"chosen": turn("2+2?", "4"), "rejected": turn("2+2?", "5")},
    '{"chosen": [ broken',  # line 2: not JSON
    {"chosen": turn("3+3?", "6"), "rejected": turn("3+3?", "6")},  # line 3: equal sides
    {"chosen": turn("tell a story", "once upon a time " * 200), "rejected": turn("tell a story", "no")},  # line 4: cut
    {"conversations": turn("sft row", "in a dpo file")},  # line 5: wrong format
]


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    if MISSING:
        pytest.skip(f"browser test needs Chromium and Playwright: {MISSING}")
    tmp = tmp_path_factory.mktemp("browser-data")
    app_dir = browser.copy_app(tmp / "app")
    with open(app_dir / "dataset" / "crafted_dpo.jsonl", "w", encoding="utf-8") as f:
        for row in CRAFTED:
            f.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    server = browser.StreamlitServer(app_dir, home=tmp / "home", log_path=tmp / "streamlit.log")
    with server:
        try:
            with browser.app_page(server.url) as page:
                yield server, page
        finally:
            stop_data_worker(tmp / "home")


def stop_data_worker(home):
    """The data worker runs in a session of its own, outside the server's group."""
    from mmcore.data import row_client

    if row_client.running(home):
        os.kill(row_client.status(home)["pid"], signal.SIGTERM)


def assert_no_exception(page, where):
    shown = browser.exceptions(page)
    assert not shown, f"{where} shows an exception:\n" + "\n---\n".join(shown)


def wait_for_text(page, text, timeout=120.0):
    page.wait_for_function("(text) => document.querySelector('[data-testid=\"stMain\"]')?.innerText.includes(text)",
                           arg=text, timeout=timeout * 1000, polling=250)
    browser.wait_for_rerun(page)


def open_tab(page, title):
    page.get_by_role("tab", name=title).click()
    browser.wait_for_rerun(page)


def mask_counts(page):
    """{"trained": n, "context": n, "cut": n} of the token spans drawn, per sequence shown."""
    return page.evaluate("""() => [...document.querySelectorAll('.mm-seq')].map(seq => {
        const n = {trained: 0, context: 0, cut: 0};
        seq.querySelectorAll('[data-mask]').forEach(s => n[s.dataset.mask]++);
        return n; })""")


def test_data_page_demo_and_crafted_file_then_train(dashboard):
    _, page = dashboard
    with browser.screenshot_on_failure(page, "data"):
        browser.go_to(page, "Data")
        browser.choose(page, "Data file", "dataset/demo/sft.jsonl")
        wait_for_text(page, "sft format · 3000 rows")  # health, from the background scan
        assert_no_exception(page, "data: demo sft")
        open_tab(page, "Rows as the trainer sees them")
        page.wait_for_selector('.mm-seq [data-mask="trained"]', timeout=120_000)
        (counts,) = mask_counts(page)
        assert counts["trained"] > 0 and counts["context"] > 0
        open_tab(page, "Size and cost")
        wait_for_text(page, "Rows truncated")
        charts = browser.plotly_charts(page, "Token lengths")
        assert [name for name, n in charts["Token lengths"]] == ["whole row", "context / prompt", "trained answer"]
        browser.screenshot(page, "data-demo-sft")

        # -- a crafted DPO file: problems with their line numbers, both sides, a cut answer ----------------
        browser.choose(page, "Data file", "dataset/crafted_dpo.jsonl")
        open_tab(page, "Format and health")
        wait_for_text(page, "dpo format · 3 rows in 5 lines")
        browser.wait_for_dataframe_cell(page, "invalid JSON")
        cells = browser.dataframe_cells(page)
        assert [row[0] for row in cells[1:]] == ["2", "5"], cells  # lines of the bad rows
        browser.choose(page, "Problem list", "DPO pairs (1)")
        browser.wait_for_dataframe_cell(page, "identical")
        assert browser.dataframe_cells(page)[1][0] == "3"
        browser.fill(page, "max_seq_len", "64")
        open_tab(page, "Size and cost")
        wait_for_text(page, "Rows truncated")
        assert "Rows with no answer left" in browser.main_text(page)
        open_tab(page, "Rows as the trainer sees them")
        browser.fill(page, "Go to line", "4")
        page.wait_for_function("() => document.querySelectorAll('.mm-seq').length === 2", timeout=60_000)
        chosen, rejected = mask_counts(page)
        assert chosen["cut"] > 0 and chosen["trained"] > 0 and rejected["cut"] == 0
        assert_no_exception(page, "data: crafted dpo")
        browser.screenshot(page, "data-crafted-dpo")

        # -- Train on this file ---------------------------------------------------------------------------
        page.locator('[data-testid="stRadio"] label').filter(has_text="99th percentile").click()
        browser.wait_for_rerun(page)
        page.get_by_role("link", name="Train on this file").click()
        page.wait_for_function("() => location.pathname === '/' || location.pathname.endsWith('/train')",
                               timeout=30_000)
        wait_for_text(page, "Filled in from the Data page")
        assert browser.input_value(page, "Data file") == "../dataset/crafted_dpo.jsonl"
        assert int(browser.input_value(page, "Max sequence length")) >= 200  # the long pair's 99th percentile
        assert browser.input_value(page, "Training type") == "RL - DPO"
        assert_no_exception(page, "train from data")
        browser.screenshot(page, "data-train-filled")
