"""Job notes kept as messages (mmcore.jobs.jobnote): worded as before in English, in Chinese for a Chinese
viewer (the Jobs page), in English by the API; notes stored as text by older versions show as they are."""
import time

import pytest
from _pages_helpers import open_page, texts

from mmcore import api
from mmcore.base import i18n
from mmcore.base.i18n import message
from mmcore.jobs import jobnote
from mmcore.jobs.jobstore import JobStore
from mmcore.train import preset_table

# Every note the dashboard writes, with its English wording (as it was stored before notes were messages).
NOTES = [
    (jobnote.stored("note.cancelled_queued"), "cancelled while queued"),
    (jobnote.stored("note.supervisor_never_started"), "supervisor never started"),
    (jobnote.stored("note.supervisor_pid_reused", pid=41), "supervisor (pid 41) is gone; its pid now belongs to another process"),
    (jobnote.stored("note.supervisor_exited", pid=41), "supervisor (pid 41) exited without recording how the job ended"),
    (jobnote.stored("note.cannot_start_supervisor", error="[Errno 12] ENOMEM"), "cannot start the supervisor: [Errno 12] ENOMEM"),
    (jobnote.stored("note.stopped_before_start"), "stopped before it started"),
    (jobnote.stored("note.cannot_open_log", path="/x/1.log", error="[Errno 13] EACCES"),
     "cannot open log file /x/1.log: [Errno 13] EACCES"),
    (jobnote.stored("note.supervisor_error", error="RuntimeError('x')"), "supervisor error: RuntimeError('x')"),
    (jobnote.stored("note.stopped_before_trainer"), "stopped before the trainer started"),
    (jobnote.stored("note.cannot_start_trainer", error="[Errno 2] ENOENT"), "cannot start the trainer: [Errno 2] ENOENT"),
    (jobnote.stored("note.backend_failed", backend="slurm", error="sbatch: EPERM"), "could not start on slurm: sbatch: EPERM"),
    (jobnote.stored("note.held_stage", n=2, id=5, status=message("status.failed")),
     "held: stage 2 before it (job 5) is failed"),
    (jobnote.stored("note.held", id=5, status=message("status.stopped")), "held: the job before it (job 5) is stopped"),
    (jobnote.stored("note.slurm_unknown", id="77"), "Slurm no longer knows job 77"),
    (jobnote.stored("note.slurm_ended", id="77", state="CANCELLED"), "Slurm job 77: CANCELLED"),
    (jobnote.stored("note.no_space"),
     "no space left on device: the disk filled up while the job ran; free some space, then resume it"),
    (jobnote.stored("note.restored_ended", status=message("status.succeeded")),
     "restored from a backup taken before it ended; its log says: succeeded"),
    (jobnote.stored("note.files_taken", files="/x/out/a_64.pth (bob, job 3)"),
     "not started: while it waited, another user's job wrote its files (/x/out/a_64.pth (bob, job 3)); "
     "choose another save_weight, or an admin may launch it again"),
    (jobnote.stored("note.guard_stopped", reason=message("guard.fired.loss_above", limit=0.01, n=2, value=0.5, step=7)),
     "stopped by a guard: loss_above: the loss stayed above 0.01 for 2 logged steps (0.5 at step 7)"),
]
KEPT = {"pid", "Slurm", "CANCELLED", "Errno", "ENOMEM", "EACCES", "ENOENT", "EPERM", "RuntimeError", "x", "slurm",
        "sbatch", "save_weight", "bob", "job", "out", "a_64.pth"}


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    monkeypatch.setattr("mmcore.jobs.scheduler_lock.ensure_running", lambda store: None)
    return tmp_path / "home"


def test_every_note_in_english_as_before_and_in_chinese():
    assert {jobnote._parse(text)["key"] for text, _ in NOTES} == {k for k in i18n.table("en") if k.startswith("note.")}
    for text, english in NOTES:
        assert jobnote.english(text) == english
        with i18n.language("zh"):
            worded = jobnote.note_text(text)
            assert jobnote.english(text) == english
        words = [w.strip("[]():;,'/.") for w in worded.replace("（", " ").replace("）", " ").split()]
        assert not [w for w in words if w.isascii() and w.isalpha() and w not in KEPT], (english, worded)
    assert not i18n.missing


def test_notes_stored_as_text_show_as_they_are():
    for text in ("held: stage 2 before it (job 5) is failed", "a note", "{not json", '{"params": {}}'):
        with i18n.language("zh"):
            assert jobnote.note_text(text) == text
        assert jobnote.english(text) == text
    assert jobnote.note_text(None) == "" and jobnote.english(None) is None


def test_a_cancelled_jobs_note_on_jobs_in_chinese_and_through_the_api():
    store = JobStore()
    job_id = store.create("pretrain", "w", preset_table.demo_preset("pretrain"), ["python3", "x.py"], "/tmp", {},
                          user="bob", waiting=1, resources={})
    assert store.cancel_waiting(job_id)
    old = store.create("pretrain", "old", preset_table.demo_preset("pretrain"), ["python3", "x.py"], "/tmp", {}, user="bob")
    store.update(old, status="stopped", ended_at=time.time(), note="cancelled while queued")  # an older row
    with i18n.language("zh"):
        assert api.get(job_id)["note"] == "cancelled while queued" == api.get(old)["note"]
        shown = texts(open_page("pages/jobs.py", query={"job": str(job_id)}, state={i18n.STATE_KEY: "zh"}).caption)
        assert "排队时已取消" in shown, shown
        shown = texts(open_page("pages/jobs.py", query={"job": str(old)}, state={i18n.STATE_KEY: "zh"}).caption)
        assert "cancelled while queued" in shown, shown
