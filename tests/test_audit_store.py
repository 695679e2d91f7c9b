"""No act without its audit record, and refused attempts on the record: an audit trail that cannot be written
refuses every act with one clear message (the CLI exits 2, no traceback, pages show the message); only an
admin's explicit `audit repair` keeps the damaged file aside and starts a new trail; a viewer's refused stop
is in the admins' trail."""
import os

import pytest
from _pages_helpers import open_page, texts
from _runner_helpers import home_with_roles

from mmcore import api, cli
from mmcore.access import audit, roles
from mmcore.jobs.jobstore import JobStore
from mmcore.train.preset_table import demo_preset

ME = roles.os_user()  # who the pages act as (local sign-in): an admin here
SET_DEMO = [f"--set={k}={v}" for k, v in demo_preset("pretrain").items()]


@pytest.fixture
def team(tmp_path, monkeypatch):
    home = home_with_roles(tmp_path, monkeypatch, bob="member", vic="viewer", **{ME: "admin"})
    monkeypatch.setattr("mmcore.jobs.scheduler_lock.ensure_running", lambda store: None)  # jobs wait in the queue
    store = JobStore()
    job = store.create("pretrain", "bob's", demo_preset("pretrain"), ["true"], "/tmp", {}, user="bob", waiting=1)
    return home, store, job


def noise(home):
    """audit.db replaced by 8 KiB of random bytes."""
    (home / audit.DB_NAME).write_bytes(os.urandom(8192))


def test_a_damaged_trail_refuses_every_act_with_one_clear_message(team, capsys):
    home, store, job = team
    api.history()  # a working trail first
    noise(home)
    with pytest.raises(api.AuditUnavailable, match="audit trail .* cannot be written"):
        api.submit("pretrain", demo_preset("pretrain"), user="bob")
    with pytest.raises(api.AuditUnavailable):
        api.stop(job, user="bob")
    assert store.count() == 1 and store.get(job).status == "queued"  # nothing was queued, nothing stopped
    for argv in (["submit", "pretrain", *SET_DEMO, "--user", "bob"], ["history"], ["history", "--refused"]):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "audit repair" in err and "Traceback" not in err
    assert store.count() == 1
    # Pages: the message instead of the table or the act, never a traceback.
    at = open_page("pages/jobs.py", query={"job": str(job)},
                   state={"jobs.history_open": True, "jobs.audit_open": True})
    assert not at.exception
    assert any("cannot be written" in e for e in texts(at.error)), texts(at.error)


def test_only_an_admins_explicit_repair_starts_a_new_trail(team, capsys):
    home, store, job = team
    noise(home)
    damaged = (home / audit.DB_NAME).read_bytes()
    assert cli.main(["audit", "repair", "--user", "bob"]) == 1  # a member may not
    assert (home / audit.DB_NAME).read_bytes() == damaged
    assert cli.main(["audit", "repair", "--user", ME]) == 0
    assert "kept aside" in capsys.readouterr().out
    [aside] = home.glob("audit.db.damaged-*")
    assert aside.read_bytes() == damaged
    assert [(e.user, e.action) for e in audit.entries(home=home)] == [(ME, "audit_repair")]
    assert cli.main(["audit", "repair", "--user", ME]) == 1  # intact now: nothing to do
    api.stop(job, user="bob")  # acts work again, on the record
    assert audit.entries(home=home)[0].action == "stop"


def test_a_viewers_refused_stop_is_in_the_admins_trail(team, capsys):
    home, store, job = team
    with pytest.raises(api.Refused, match="viewer"):
        api.stop(job, user="vic")
    [refusal] = api.refusals()
    assert (refusal["user"], refusal["action"], refusal["job_id"], refusal["entry"]) == ("vic", "stop", job, "api")
    assert "viewer" in refusal["reason"]
    assert audit.entries(home=home) == []  # the trail of acts holds acts only
    assert cli.main(["history", "--refused"]) == 0
    assert "vic" in capsys.readouterr().out
    at = open_page("pages/jobs.py", state={"jobs.audit_open": True})
    assert not at.exception
    shown = [str(df.value) for df in at.dataframe]
    assert any("vic" in table and "viewer" in table for table in shown), shown
