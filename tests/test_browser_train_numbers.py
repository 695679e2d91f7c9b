"""The Train form's number fields in headless Chromium: what a field shows is what the command gets. A
negative learning rate typed in the browser reaches the server (no browser-side bounds that would keep it
in the field unsent), the field's message names the rule, the preview is withdrawn, and Launch is refused
with that message: no job starts with the last in-range value."""
import re

import _browser_helpers as browser
import pytest

from mmcore.jobs.jobstore import JobStore

pytestmark = pytest.mark.browser

MISSING = browser.browser_missing_reason()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if MISSING:
        pytest.skip(f"browser test needs Chromium and Playwright: {MISSING}")
    tmp = tmp_path_factory.mktemp("train-numbers")
    app_dir = browser.copy_app(tmp / "app")
    (tmp / "home").mkdir()
    with browser.StreamlitServer(app_dir, home=tmp / "home", log_path=tmp / "streamlit.log") as srv:
        yield srv


def test_a_negative_learning_rate_is_shown_refused_and_never_replaced(server):
    with browser.app_page(server.url) as page, browser.screenshot_on_failure(page, "train-negative-lr"):
        main = page.locator('[data-testid="stMain"]')
        assert "--learning_rate" in main.locator('[data-testid="stCode"]').first.inner_text()
        browser.fill(page, "Learning rate", "-0.001")
        assert browser.input_value(main, "Learning rate") == "-0.001"  # kept as typed, and sent
        page.get_by_text("Learning rate must be greater than 0").first.wait_for(timeout=30_000)
        assert not any("--learning_rate" in c for c in main.locator('[data-testid="stCode"]').all_inner_texts())
        page.get_by_role("button", name="Launch").click()
        browser.wait_for_rerun(page, 60)
        refused = page.get_by_text(re.compile(r"Launch refused")).first
        refused.wait_for(timeout=30_000)
        assert "Learning rate: must be greater than 0" in refused.inner_text()
        assert JobStore(server.home).count() == 0
        assert not browser.exceptions(page)
