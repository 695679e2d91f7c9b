"""Open tabs survive a restart of the dashboard server, in headless Chromium.

Tabs open on Jobs, Logs and Train while the server restarts on the same port reconnect by
themselves, all at once; without any click each sidebar must show the app's own navigation (the
page titles, not the pages/ file names) and the job counts again.
"""
import re
import time

import _browser_helpers as browser
import pytest

from mmcore.base import i18n

pytestmark = pytest.mark.browser

MISSING = browser.browser_missing_reason()
TITLES = [i18n.table("en")[f"app.nav.{name}"] for name in ("train", "jobs", "logs", "runs", "models", "data")]
PAGES = ("jobs", "logs", "train")  # the tabs open during the restart (Logs and Jobs with no job stop early)
COUNTS = re.compile(r"Jobs\s*·\s*\d+ running\s*·\s*\d+ queued")

_SIDEBAR_JS = """() => ({
    links: [...document.querySelectorAll('a[data-testid="stSidebarNavLink"]')].map(a => a.innerText.trim()),
    text: document.querySelector('[data-testid="stSidebarContent"]')?.innerText ?? '',
})"""


def sidebar(page):
    """{'links': [texts of the navigation links], 'text': the sidebar's whole text}."""
    return page.evaluate(_SIDEBAR_JS)


def shows_the_apps_sidebar(state):
    # A link's text is its icon's ligature name, then its title.
    titles = [link.split("\n")[-1].strip() for link in state["links"] if link]
    return titles == TITLES and bool(COUNTS.search(state["text"]))


def connection_state(page):
    return page.evaluate("() => document.querySelector('[data-testid=\"stApp\"]')"
                         "?.getAttribute('data-test-connection-state')")


def wait_for_connection(page, wanted, timeout):
    """Wait until the tab's connection state (Streamlit's own, on stApp) is `wanted` (a predicate)."""
    deadline = time.monotonic() + timeout
    while not wanted(state := connection_state(page)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert wanted(state), f"connection state stayed {state!r}"


def wait_for_apps_sidebar(page, timeout):
    deadline = time.monotonic() + timeout
    state = sidebar(page)
    while not shows_the_apps_sidebar(state) and time.monotonic() < deadline:
        time.sleep(0.5)
        state = sidebar(page)
    return state


@pytest.mark.skipif(bool(MISSING), reason=f"browser test needs Chromium and Playwright: {MISSING}")
def test_an_open_tab_gets_the_apps_sidebar_back_after_a_server_restart(tmp_path):
    from playwright.sync_api import sync_playwright

    app_dir = browser.copy_app(tmp_path / "app")
    home = tmp_path / "home"
    server = browser.StreamlitServer(app_dir, home=home, log_path=tmp_path / "first.log")
    with sync_playwright() as playwright:
        chromium = browser.launch_browser(playwright)
        try:
            tabs = {name: browser.new_page(chromium) for name in PAGES}
            with server, browser.screenshot_on_failure(tabs["logs"], "restart-before"):
                for name, tab in tabs.items():
                    tab.set_default_timeout(30_000)
                    browser.open_app(tab, f"{server.url}/{name}")
                    before = wait_for_apps_sidebar(tab, 30)
                    assert shows_the_apps_sidebar(before), (name, before)
            urls = {name: tab.url for name, tab in tabs.items()}  # Train, the default page, reads as /
            for tab in tabs.values():
                wait_for_connection(tab, lambda state: state != "CONNECTED", 30)  # it saw the server go
            # The tabs stay open while the server is down; it comes back on the same port.
            restarted = browser.StreamlitServer(app_dir, home=home, log_path=tmp_path / "restarted.log",
                                                port=server.port)
            with restarted:
                for name, tab in tabs.items():
                    with browser.screenshot_on_failure(tab, f"restart-after-{name}"):
                        wait_for_connection(tab, lambda state: state == "CONNECTED", 60)  # no click
                        browser.wait_for_rerun(tab, 60)
                        after = wait_for_apps_sidebar(tab, 30)
                        assert shows_the_apps_sidebar(after), (name, after, restarted.output()[-2000:])
                        assert tab.url == urls[name], tab.url  # the same page, not the default one
                        assert not browser.exceptions(tab)
                tab = tabs["jobs"]
                with browser.screenshot_on_failure(tab, "restart-link"):
                    # Still the app: a link goes to the page it names, with the app's sidebar.
                    browser.go_to(tab, TITLES[2])
                    assert shows_the_apps_sidebar(wait_for_apps_sidebar(tab, 30))
        finally:
            chromium.close()
