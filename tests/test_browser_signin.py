"""Sign-in end to end in headless Chromium: a real OpenID Connect flow (st.login) against a local test
provider (oidc-provider-mock), three people, their roles.

Alice (member) signs in and launches a Demo-preset job from Train; Bob (member) signs in in another
browser, sees Alice's job with her as its owner and cannot stop or delete it; Vera (viewer) cannot
launch; Alice stops her own job after confirming; the job's history shows who did what. A visitor
who has not signed in sees the sign-in page only.
"""
import os
import re
import urllib.parse
import urllib.request

import _browser_helpers as browser
import pytest
from _runner_helpers import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

MISSING = browser.browser_missing_reason()
ROLES = '[users]\n"alice@example.com" = "member"\n"bob@example.com" = "member"\n"vera@example.com" = "viewer"\n'


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if MISSING:
        pytest.skip(f"browser test needs Chromium and Playwright: {MISSING}")
    oidc_provider_mock = pytest.importorskip("oidc_provider_mock")
    pytest.importorskip("authlib")
    from playwright.sync_api import sync_playwright

    tmp = tmp_path_factory.mktemp("signin")
    app_dir = browser.copy_app(tmp / "app")
    home = tmp / "home"
    home.mkdir()
    (home / "roles.toml").write_text(ROLES)
    port = browser.free_port()
    with oidc_provider_mock.run_server_in_thread() as provider:
        issuer = f"http://localhost:{provider.server_port}"
        for email in ("alice@example.com", "bob@example.com", "vera@example.com"):
            request = urllib.request.Request(f"{issuer}/users/{urllib.parse.quote(email)}", method="PUT",
                                             data=f'{{"email": "{email}", "email_verified": true}}'.encode(),
                                             headers={"Content-Type": "application/json"})
            assert urllib.request.urlopen(request).status == 204
        (app_dir / ".streamlit" / "secrets.toml").write_text(
            "[auth]\n"
            f'redirect_uri = "http://localhost:{port}/oauth2callback"\n'
            'cookie_secret = "a-test-cookie-secret-that-is-long-enough"\n'
            'client_id = "minimind-dashboard"\nclient_secret = "test-secret"\n'
            f'server_metadata_url = "{issuer}/.well-known/openid-configuration"\n')
        os.environ["MINIMIND_AUTH"] = "oidc"
        try:
            server = browser.StreamlitServer(app_dir, home=home, log_path=tmp / "streamlit.log", port=port)
            with server, sync_playwright() as playwright:
                chromium = browser.launch_browser(playwright)
                try:
                    yield f"http://localhost:{port}", chromium, home
                finally:
                    chromium.close()
                    from mmcore.jobs import runner
                    from mmcore.jobs.jobrow import ACTIVE_STATUSES
                    from mmcore.jobs.jobstore import JobStore
                    store = JobStore(home / "jobs.db")
                    for job in store.list(status=list(ACTIVE_STATUSES), limit=None):
                        runner.stop(store, job.id, grace=5, wait=True)
        finally:
            os.environ.pop("MINIMIND_AUTH", None)


def sign_in(chromium, url, email):
    page = browser.new_page(chromium)
    page.set_default_timeout(60_000)
    browser.open_app(page, url)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_selector('input[name="sub"]')  # the provider's authorization form
    page.fill('input[name="sub"]', email)
    page.get_by_role("button", name="Authorize").click()
    page.wait_for_selector('[data-testid="stApp"]')
    page.wait_for_function("(text) => document.body.innerText.includes(text)", arg=f"Running as {email}")
    browser.wait_for_rerun(page, 60)
    return page


def sidebar_text(page):
    return page.locator('[data-testid="stSidebar"]').inner_text()


def test_signed_in_people_act_by_their_roles(site):
    url, chromium, home = site

    # An anonymous visitor: the sign-in page and nothing else.
    anonymous = browser.new_page(chromium)
    browser.open_app(anonymous, url + "/jobs")
    anonymous.get_by_role("button", name="Sign in").wait_for()
    assert anonymous.locator('a[data-testid="stSidebarNavLink"]').count() == 0
    assert "Jobs" not in anonymous.locator('[data-testid="stMain"]').inner_text()

    alice = sign_in(chromium, url, "alice@example.com")
    assert "alice@example.com (member)" in sidebar_text(alice)
    alice.get_by_role("button", name="Demo preset").click()
    browser.wait_for_rerun(alice, 60)
    alice.get_by_role("button", name="Launch").click()
    launched = alice.get_by_text(re.compile(r"(?:Queued as|Started) job \d+[.:]")).first
    launched.wait_for(timeout=60_000)
    job_id = int(re.search(r"(?:Queued as|Started) job (\d+)[.:]", launched.inner_text()).group(1))

    bob = sign_in(chromium, url, "bob@example.com")
    bob.goto(f"{url}/jobs?job={job_id}")
    browser.wait_for_rerun(bob, 60)
    assert "alice@example.com" in bob.locator('.minimind-table').first.inner_text() or \
        "alice@example.com" in bob.locator('[data-testid="stMain"]').inner_text()
    assert bob.get_by_role("button", name="Stop").is_disabled()
    assert bob.get_by_role("button", name="Delete").is_disabled()

    vera = sign_in(chromium, url, "vera@example.com")
    assert "vera@example.com (viewer)" in sidebar_text(vera)
    vera.get_by_role("button", name="Demo preset").click()
    browser.wait_for_rerun(vera, 60)
    vera.get_by_role("button", name="Launch").click()
    vera.get_by_text("vera@example.com is a viewer and may not launch jobs").first.wait_for()

    alice.goto(f"{url}/jobs?job={job_id}")
    browser.wait_for_rerun(alice, 60)
    alice.get_by_role("button", name="Stop").click()
    browser.wait_for_rerun(alice, 60)
    alice.get_by_role("button", name=re.compile("^Yes, stop")).click()
    browser.wait_for_rerun(alice, 60)

    from mmcore.access import audit
    from mmcore.jobs.jobstore import JobStore
    store = JobStore(home / "jobs.db")
    assert store.get(job_id).user == "alice@example.com"
    trail = lambda: [(e.user, e.action) for e in audit.entries(job_id, home=home)]  # noqa: E731
    wait_for(lambda: len(trail()) == 2, timeout=60, what="Alice's stop in the audit trail")
    assert trail() == [("alice@example.com", "stop"), ("alice@example.com", "launch")]
    alice.reload()
    browser.wait_for_rerun(alice, 60)
    alice.get_by_text("History (2)").first.wait_for()  # the job's audit trail, on its Jobs page
