"""What an anonymous visitor on the network gets from a dashboard served on every interface without
sign-in configured (the default `local` mode): an explanation, and nothing else: no page, no job, no
sidebar, and no way to act (headless Chromium through the machine's non-loopback address)."""
import socket

import _browser_helpers as browser
import pytest

from mmcore.jobs.jobstore import JobStore

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

MISSING = browser.browser_missing_reason()


def lan_address():
    """This machine's address on its network (not loopback), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the outgoing interface
            address = s.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


def test_an_anonymous_visitor_on_the_network_sees_only_an_explanation(tmp_path):
    if MISSING:
        pytest.skip(f"browser test needs Chromium and Playwright: {MISSING}")
    address = lan_address()
    if address is None:
        pytest.skip("this machine has no network address besides loopback")
    from playwright.sync_api import sync_playwright

    app_dir = browser.copy_app(tmp_path / "app")
    home = tmp_path / "home"
    store = JobStore(home / "jobs.db")
    job_id = store.create("pretrain", "secret-run", {}, ["true"], "/tmp", {}, user="alice")
    store.update(job_id, status="succeeded")
    # The dashboard as someone would serve it to a team by mistake: every interface, no sign-in.
    with browser.StreamlitServer(app_dir, home=home, log_path=tmp_path / "streamlit.log", address="0.0.0.0",
                                 unset_env=("MINIMIND_AUTH",)) as server, sync_playwright() as playwright:
        # The harness's browser reaches only 127.0.0.1 and localhost; this one reaches the LAN address too.
        args = [a.replace("EXCLUDE localhost", f"EXCLUDE localhost, EXCLUDE {address}") for a in browser.CHROMIUM_ARGS]
        chromium = playwright.chromium.launch(executable_path=browser.CHROMIUM, headless=True, args=args)
        try:
            page = browser.new_page(chromium)
            for path in ("/", "/jobs", f"/jobs?job={job_id}", "/logs", "/train", "/models"):
                browser.open_app(page, f"http://{address}:{server.port}{path}")
                page.get_by_text("only answers requests from the machine it runs on").first.wait_for()
                shown = page.locator("body").inner_text()
                assert "secret-run" not in shown and "alice" not in shown
                assert page.locator('a[data-testid="stSidebarNavLink"]').count() == 0
                assert page.locator("input, textarea, [data-testid='stSidebar']").count() == 0
                assert page.get_by_role("button").filter(has_text="Launch").count() == 0
            page.screenshot(path=str(tmp_path / "network-visitor.png"))
            # The same server from this machine itself: the OS user, the whole dashboard.
            local = browser.new_page(chromium)
            browser.open_app(local, f"http://127.0.0.1:{server.port}/jobs?job={job_id}")
            local.wait_for_function("(t) => document.body.innerText.includes(t)", arg="Running as ")
            assert "secret-run" in local.locator('[data-testid="stMain"]').inner_text()
        finally:
            chromium.close()
    assert store.count() == 1
