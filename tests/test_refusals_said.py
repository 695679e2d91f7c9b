"""Refusals say what was refused, whichever door: a broken roles file closes the CLI's reads too, a priority
change and a data upload are named as such, and a refused log upload is asked once, not at every rerun."""
import io

from _runner_helpers import home_with_roles

from mmcore import cli
from mmcore.access import audit
from mmcore.actions import data_acts, queue_acts
from mmcore.jobs.jobstore import JobStore


def test_a_broken_roles_file_refuses_the_clis_reads_with_its_reason(tmp_path, monkeypatch, capsys):
    home = home_with_roles(tmp_path, monkeypatch, bob="member")
    assert cli.main(["list"]) == 0
    (home / "roles.toml").write_text("[users\nbob = 'member'\n")
    for command in (["list"], ["history"], ["status", "1"], ["queue"]):
        assert cli.main(command) == 1, command
        err = capsys.readouterr().err
        assert "The roles file cannot be used" in err and "roles.toml" in err


def test_a_priority_change_and_a_data_upload_are_refused_in_their_own_words(tmp_path, monkeypatch):
    home = home_with_roles(tmp_path, monkeypatch, bob="member", vic="viewer")
    store = JobStore(home / "jobs.db")
    job = store.create("pretrain", "wait", {}, ["true"], str(tmp_path), {}, user="bob", waiting=1)
    priority = queue_acts.set_priority(store, job, 5, user="bob")
    assert priority.refused and "bob is a member and may not change a job's priority" in priority.message
    assert "settings" not in priority.message
    assert queue_acts.refusal("bob", "priority") and queue_acts.refusal("bob", "settings")
    upload = data_acts.upload_data(home, b'{"text": "a"}\n', "a.jsonl", "vic")
    assert upload.refused and "vic is a viewer and may not upload data files" in upload.message
    assert data_acts.upload_refusal("vic") == upload.reasons[0] and data_acts.upload_refusal("bob") is None


class Upload(io.BytesIO):
    """What Streamlit's uploader hands a page: a binary file with a name and an id."""

    def __init__(self, data, name, file_id):
        super().__init__(data)
        self.name, self.file_id = name, file_id


def test_a_refused_log_upload_is_asked_once_not_at_every_rerun(tmp_path, monkeypatch):
    import streamlit as st

    from mmcore.widgets import logs_panels

    home = home_with_roles(tmp_path, monkeypatch, vic="viewer")
    store = JobStore(home / "jobs.db")
    upload = Upload(b"Epoch:[1/1](1/1) loss:1.0\n", "run.log", "id-1")
    errors = []
    monkeypatch.setattr(st, "error", lambda text, *a, **k: errors.append(str(text)))
    for _ in range(3):  # three reruns of the page with the same file in the uploader
        assert logs_panels.kept_uploads(store, [upload], user="vic") == []
    assert len(audit.refusals(home=home)) == 1
    assert len(errors) == 3 and all("may not upload logs" in e for e in errors)  # still shown each time
    logs_panels.kept_uploads(store, [], user="vic")  # taken out of the uploader: forgotten
    assert st.session_state[logs_panels.REFUSED_UPLOADS_KEY] == {}


def test_a_pipeline_stage_has_its_own_history(tmp_path):
    """The acts on a pipeline that named a stage (queued it, stopped it) are in that stage's history too."""
    home = tmp_path / "home"
    home.mkdir()

    def act(action, job_id, result, request=None):
        audit.record("bob", action, job_id, {"entry": "page", "request": request or {"pipeline": 1},
                                             "result": result}, home=home)
    act("queue_pipeline", None, {"pipeline": 1, "jobs": [11, 12, 13]})
    act("stop_pipeline", None, {"stopped": [12]})
    act("retry_pipeline", 14, {"job": 14})
    act("stop", 12, {"stopped": True}, {"job": 12})
    act("queue_pipeline", None, {"pipeline": 2, "jobs": [112]})  # another pipeline: 112 is not 12
    assert [e.action for e in audit.entries(12, home=home)] == ["stop", "stop_pipeline", "queue_pipeline"]
    assert [e.action for e in audit.entries(11, home=home)] == ["queue_pipeline"]
    assert [e.action for e in audit.entries(14, home=home)] == ["retry_pipeline"]
    assert len(audit.entries(home=home)) == 5  # each act is still one row
