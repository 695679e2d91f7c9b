"""Sign-in modes and roles: who a request is, and what an anonymous visitor on the network gets."""
import pytest
from _pages_helpers import open_page, texts

from mmcore.access import auth, roles
from mmcore.access.roles import RoleConfig
from mmcore.actions import job_acts
from mmcore.jobs.jobstore import JobStore

TEAM = RoleConfig(users={"alice@example.com": "member", "bob@example.com": "member", "root": "admin",
                         "vera@example.com": "viewer"}, default="viewer")


@pytest.mark.parametrize("ip", ["192.168.1.20", "10.0.0.7", "2001:db8::1"])
def test_local_mode_serves_only_this_machine(ip):
    refused = auth.decide("local", ip, {}, None, "root", TEAM)
    assert refused.user is None and "docs/SECURITY.md" in refused.reason and not refused.can_sign_in
    assert auth.decide("local", "127.0.0.1", {}, None, "root", TEAM) == auth.Access("root", "admin")
    assert auth.decide("local", "::1", {}, None, "root", TEAM).user == "root"


def test_a_forged_header_means_nothing_outside_proxy_mode():
    forged = {"X-Forwarded-Email": "root"}
    assert auth.decide("local", "192.168.1.20", forged, None, "root", TEAM).user is None
    assert auth.decide("oidc", "192.168.1.20", forged, None, "root", TEAM).user is None


def test_proxy_mode_takes_the_identity_from_the_header_only():
    assert auth.decide("proxy", "127.0.0.1", {"x-forwarded-email": "alice@example.com"}, None, "root", TEAM) == \
        auth.Access("alice@example.com", "member")
    refused = auth.decide("proxy", "127.0.0.1", {}, None, "root", TEAM)  # even from the proxy's own machine
    assert refused.user is None and "X-Forwarded-Email" in refused.reason


def test_oidc_mode_needs_a_signed_in_user():
    refused = auth.decide("oidc", "192.168.1.20", {}, None, "root", TEAM)
    assert refused.user is None and refused.can_sign_in
    assert auth.decide("oidc", "192.168.1.20", {}, "bob@example.com", "root", TEAM).role == "member"
    assert auth.decide("oidc", "192.168.1.20", {}, "stranger@example.com", "root", TEAM).role == "viewer"


def test_readonly_opt_out_makes_visitors_anonymous_viewers():
    assert auth.decide("readonly", "192.168.1.20", {}, None, "root", TEAM) == auth.Access("anonymous", "viewer")


def test_roles():
    assert roles.refusal("vera@example.com", "launch", config=TEAM).startswith("vera@example.com is a viewer")
    assert roles.refusal("bob@example.com", "stop", owner="alice@example.com", job_id=3, config=TEAM).startswith(
        "bob@example.com may not stop job 3: it belongs to alice@example.com")
    assert roles.refusal("alice@example.com", "stop", owner="ALICE@example.com", job_id=3, config=TEAM) is None
    assert roles.refusal("root", "delete", owner="alice@example.com", job_id=3, config=TEAM) is None


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(roles.ROLES_ENV, raising=False)
    return tmp_path / "home"


def test_guarded_actions_refuse_other_members_jobs_and_audit(home):
    home.mkdir()
    (home / "roles.toml").write_text('[users]\nalice = "member"\nbob = "member"\n')
    store = JobStore()
    job_id = store.create("pretrain", "alices", {}, ["true"], "/tmp", {}, user="alice")
    store.update(job_id, status="stopped")
    assert "belongs to alice" in job_acts.delete_job(store, job_id, "bob").message
    assert "belongs to alice" in job_acts.resume_job(store, job_id, "bob", gpu_count=0).message
    assert job_acts.clone_job(store, job_id, "vera").refused  # a viewer may not clone
    assert job_acts.delete_job(store, job_id, "alice").kind == "success"
    from mmcore.access import audit
    assert [(e.user, e.action) for e in audit.entries(job_id, home=home)] == [("alice", "delete")]


def test_proxy_mode_page_without_the_header_shows_only_the_explanation(home, monkeypatch):
    monkeypatch.setenv(auth.MODE_ENV, "proxy")
    at = open_page()
    assert not at.exception
    assert any("X-Forwarded-Email" in t for t in texts(at.info))
    assert not at.text_input and not at.button  # no form, no actions, no sidebar
    assert [t for t in texts(at.title)] == ["MiniMind Train Dashboard"]


def test_oidc_uses_the_e_mail_only_when_the_provider_verified_it():
    claims = {"email": "alice@example.com", "sub": "10769150350006150715113082367", "iss": "https://accounts.example"}
    subject = "oidc:https://accounts.example#10769150350006150715113082367"
    for unverified in ({}, {"email_verified": False}, {"email_verified": "false"}, {"email_verified": None},
                       {"email_verified": 1}):
        access = auth.decide("oidc", "192.168.1.20", {}, {**claims, **unverified}, "root", TEAM)
        assert access.user == subject and access.role == "viewer"  # not Alice, not a member
        assert auth.oidc_identity({**claims, **unverified}) == subject
    for verified in (True, "true", "TRUE"):
        assert auth.decide("oidc", "192.168.1.20", {}, {**claims, "email_verified": verified}, "root", TEAM) == \
            auth.Access("alice@example.com", "member")


def test_an_oidc_subject_never_passes_for_an_os_user_or_an_address():
    # A provider account whose subject is "root" is not the OS user (admin without a roles file).
    assert auth.oidc_identity({"sub": "root", "iss": "https://idp.example"}) == "oidc:https://idp.example#root"
    assert auth.decide("oidc", "192.168.1.20", {}, {"sub": "root"}, "root", TEAM).role == "viewer"
    refused = auth.decide("oidc", "192.168.1.20", {}, {"email": "alice@example.com", "email_verified": False,
                                                       "sub": None, "iss": None}, "root", TEAM)
    assert refused.user is None and "verified e-mail" in refused.reason


def test_gate_reads_email_verified_from_st_user(monkeypatch):
    from types import SimpleNamespace

    class User(dict):
        is_logged_in = True

    monkeypatch.setenv(auth.MODE_ENV, "oidc")
    monkeypatch.setattr(roles, "load", lambda path=None: TEAM)
    for claims, who in (({"email": "bob@example.com", "sub": "42", "iss": "https://idp.example"}, "oidc:https://idp.example#42"),
                        ({"email": "bob@example.com", "email_verified": True, "sub": "42"}, "bob@example.com")):
        st = SimpleNamespace(user=User(claims), session_state={},
                             context=SimpleNamespace(headers={}, ip_address="192.168.1.20"))
        assert auth.gate(st).user == who and st.session_state[auth.USER_KEY] == who
