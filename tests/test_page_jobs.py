"""The Jobs page (AppTest): list, stop, delete with confirmation, clone to Train, resume, bad ?job=."""
import html
import os
import re
import time

import pytest
from _pages_helpers import open_page, sleeper_argv, texts, wait_for
from _tables import page_tables

from mmcore.actions import job_acts
from mmcore.jobs import runner
from mmcore.jobs.jobstore import JobStore
from mmcore.queue import launch
from mmcore.widgets import train_form


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def store():
    """The page's store; every job still active at the end is stopped."""
    store = JobStore()
    yield store
    for job in store.list(status=["queued", "running"], limit=None):
        runner.stop(store, job.id, grace=1, wait=True)


def sleeping_job(store, tmp_path, name="sleepy"):
    """A running job whose command is a sleeping Python process, launched through the runner."""
    job_id = store.create("grpo", name, {"beta": "0.3", "device": "cpu"}, sleeper_argv(), str(tmp_path), {})
    runner.launch(store, job_id)
    wait_for(lambda: store.get(job_id).status == "running", what="the job to run")
    return job_id


def finished_job(store, train_type, params, name="done", status="succeeded", log=""):
    """A job row that has ended (no process), with a log file."""
    job_id = store.create(train_type, name, params, ["python", "x.py"], "/tmp", {})
    now = time.time()
    store.update(job_id, status=status, started_at=now - 60, ended_at=now, exit_code=0)
    job = store.get(job_id)
    with open(job.log_path, "w", encoding="utf-8") as f:
        f.write(log)
    return job_id


def button(at, label):
    found = [b for b in at.button if b.label == label]
    assert found, f"no button {label!r} among {[b.label for b in at.button]}"
    return found[0]


def log_tail(at):
    """The text of the selected job's log tail (an HTML box that opens at its end)."""
    import json
    # A live tail component (mmcore.live.livepage.log_tail): its first message draws the box.
    boxes = [json.loads(e.proto.json)["html"] for e in at.get("bidi_component")
             if e.proto.component_name == "minimind_live_tail"]
    assert len(boxes) == 1, boxes
    return boxes[0]


def command(at):
    """The selected job's command as shown (a plain box: no code block's highlighter to load)."""
    boxes = [h.proto.body for h in at.get("html") if "minimind-command" in h.proto.body]
    assert len(boxes) >= 1, boxes
    return html.unescape(re.sub(r"<[^>]+>", "", boxes[0]))


def job_selector(at):
    """The job selector (its key changes with its options and selection)."""
    found = [box for box in at.selectbox if (box.key or "").startswith("jobs.pick.")]
    assert len(found) == 1, [box.key for box in at.selectbox]
    return found[0]


def table(at):
    """The jobs table as drawn (plain HTML), as a DataFrame of its cells' text (ids as numbers)."""
    import pandas as pd
    tables = [t for t in page_tables(at) if "status" in t["headers"]]
    assert len(tables) == 1, tables
    frame = pd.DataFrame(tables[0]["rows"])
    if len(frame):
        frame["id"] = frame["id"].astype(int)
    return frame


def test_no_jobs_message():
    at = open_page("pages/jobs.py")
    assert not at.exception
    assert at.title[0].value == "Jobs"
    assert any("No jobs yet" in t for t in texts(at.info))


def test_lists_and_stops_a_running_job(store, tmp_path):
    job_id = sleeping_job(store, tmp_path)
    log_path = store.get(job_id).log_path
    wait_for(lambda: "sleeping" in open(log_path, encoding="utf-8").read(), what="the job's output")
    at = open_page("pages/jobs.py")
    assert not at.exception
    rows = table(at)
    assert list(rows["id"]) == [job_id]
    assert rows["type"][0] == "GRPO" and rows["name"][0] == "sleepy" and "running" in rows["status"][0]
    assert job_selector(at).value == job_id
    assert "sleeping" in log_tail(at)  # the live log tail
    assert "--beta" not in command(at) and "sleeping" in command(at)  # the command shown is the job's own argv
    assert not at.code
    button(at, "Stop").click().run()  # asks first, naming the job and its owner
    job = store.get(job_id)
    assert job.status == "running"
    assert any(f"Stop job {job_id} (sleepy), submitted by {job.user}@{job.host}?" in w for w in texts(at.warning))
    button(at, "Cancel").click().run()
    assert store.get(job_id).status == "running" and not [b for b in at.button if b.label == "Yes, stop"]
    button(at, "Stop").click().run()
    button(at, "Yes, stop").click().run()
    assert any("Stopping job" in t for t in texts(at.info))
    wait_for(lambda: store.get(job_id).status == "stopped", what="the job to stop")
    at.run()
    assert "stopped" in table(at)["status"][0]


def test_filters(store):
    finished_job(store, "grpo", {}, name="g", status="failed")
    finished_job(store, "sft", {}, name="s", status="succeeded")
    at = open_page("pages/jobs.py")
    assert len(table(at)) == 2
    at.multiselect(key="jobs.status_filter").set_value(["failed"]).run()
    assert list(table(at)["name"]) == ["g"]
    at.multiselect(key="jobs.status_filter").set_value([]).run()
    at.multiselect(key="jobs.type_filter").set_value(["sft"]).run()
    assert list(table(at)["name"]) == ["s"]
    at.multiselect(key="jobs.type_filter").set_value(["dpo"]).run()
    assert any("No job matches" in t for t in texts(at.info))


def test_delete_is_refused_while_running_and_confirmed_after(store, tmp_path):
    job_id = sleeping_job(store, tmp_path)
    at = open_page("pages/jobs.py")
    button(at, "Delete").click().run()
    assert any("stop it before deleting it" in e for e in texts(at.error))
    assert store.get(job_id) is not None
    assert not [b for b in at.button if b.label == "Yes, delete"]

    runner.stop(store, job_id, grace=1, wait=True)
    log_path = store.get(job_id).log_path
    at.run()
    button(at, "Delete").click().run()
    owner = f"{store.get(job_id).user}@{store.get(job_id).host}"
    assert any(f"Delete job {job_id} (sleepy), submitted by {owner}, and its log? This cannot be undone" in w
               for w in texts(at.warning))
    button(at, "Cancel").click().run()
    assert store.get(job_id) is not None
    button(at, "Delete").click().run()
    button(at, "Yes, delete").click().run()
    assert not at.exception
    assert any(f"Deleted job {job_id}" in s for s in texts(at.success))
    assert store.get(job_id) is None
    assert not os.path.exists(log_path)


def test_a_queued_job_is_deleted_in_one_confirmed_step(store, monkeypatch):
    monkeypatch.setattr("mmcore.jobs.scheduler_lock.ensure_running", lambda store: None)  # it stays queued
    job_id = store.create("grpo", "waiting", {"device": "cpu"}, ["python", "x.py"], "/tmp", {}, waiting=1)
    at = open_page("pages/jobs.py", query={"job": str(job_id)})
    button(at, "Delete").click().run()
    assert not any("stop it before deleting it" in e for e in texts(at.error))
    assert any(f"Delete job {job_id}" in w and "still queued" in w for w in texts(at.warning))
    button(at, "Yes, delete").click().run()
    assert not at.exception
    assert any(f"Deleted job {job_id}" in s for s in texts(at.success))
    assert store.get(job_id) is None


def test_clone_to_train_opens_train_prefilled(store):
    params = train_form.command_values("dpo", {**train_form.initial_form("dpo"), "beta": "0.25", "epochs": "3"})
    finished_job(store, "dpo", params, name="dpo-a")
    at = open_page("pages/jobs.py")
    button(at, "Clone to Train").click().run()
    assert not at.exception
    assert at.title[0].value == "Train"
    assert at.selectbox(key="train.type").value == "dpo"
    assert at.number_input(key="train.dpo.beta").value == 0.25
    assert at.number_input(key="train.dpo.epochs").value == 3
    assert at.text_input(key="train.dpo.job_name").value == "dpo-a-copy"
    assert "--beta 0.25" in at.code[0].value
    assert any("Filled from job" in t for t in texts(at.info))


def test_resume_creates_a_new_job_with_from_resume(store, tmp_path):
    form = train_form.preset_form("pretrain")
    form["save_dir"] = str(tmp_path / "out")
    job_id = finished_job(store, "pretrain", train_form.command_values("pretrain", form), name="tiny", status="stopped")
    store.update(job_id, cwd=str(tmp_path / "trainer"))
    at = open_page("pages/jobs.py")
    # It stopped before saving resume state: Resume is not offered, and says why.
    assert button(at, "Resume").disabled and "saved no resume state" in button(at, "Resume").help
    outcome = job_acts.resume_job(store, job_id, gpu_count=0)
    assert outcome.kind == "error" and "saved no resume state" in outcome.message
    assert store.count() == 1  # nothing started
    checkpoint = launch.resume_checkpoint(store.get(job_id))
    assert checkpoint.resolve() == (tmp_path / "checkpoints" / "pretrain_64_resume.pth").resolve()
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"resume state")
    at.run()
    button(at, "Resume").click().run()
    assert not at.exception, at.exception
    new = store.list(limit=1)[0]
    # The new job only queued: the message says so (never "Started"), and the page selects it (below)
    assert f"Queued job {new.id}, resuming job {job_id} from its last checkpoint." in texts(at.success), \
        (texts(at.success), texts(at.error))
    assert new.id != job_id and new.name == "tiny-resume"
    assert new.argv[new.argv.index("--from_resume") + 1] == "1"
    assert new.params["from_resume"] == "1"
    assert new.params["save_dir"] == str(tmp_path / "out")
    assert new.backend == "local" and new.status == "queued"  # in the queue, which starts it
    wait_for(lambda: store.get(new.id).supervisor_pid is not None, 30, what="the queue to start it")
    assert job_selector(at).value == new.id


def test_resume_is_refused_while_running(store, tmp_path):
    sleeping_job(store, tmp_path)
    at = open_page("pages/jobs.py")
    assert button(at, "Resume").disabled
    assert not button(at, "Stop").disabled


def test_query_param_selects_a_job_and_unknown_ids_get_a_message(store):
    first = finished_job(store, "sft", {}, name="first")
    second = finished_job(store, "sft", {}, name="second")
    at = open_page("pages/jobs.py", query={"job": str(first)})
    assert job_selector(at).value == first
    # Choosing another job puts it in the URL; a link to another job (Train's "Watch it on Jobs")
    # selects that one even when the session had chosen before.
    job_selector(at).set_value(second).run()
    assert at.query_params["job"] in (str(second), [str(second)])
    at.query_params["job"] = str(first)
    at.run()
    assert job_selector(at).value == first

    at = open_page("pages/jobs.py", query={"job": "999"})
    assert not at.exception
    assert any("no job with id 999" in e for e in texts(at.error))
    at = open_page("pages/jobs.py", query={"job": "abc"})
    assert any("not a job id" in e for e in texts(at.error))


def test_missing_log_file_is_a_message(store):
    job_id = finished_job(store, "sft", {}, name="nolog")
    os.unlink(store.get(job_id).log_path)
    at = open_page("pages/jobs.py")
    assert not at.exception
    assert any("is missing" in t for t in texts(at.info))


def test_logs_link_carries_the_job_id(store):
    job_id = finished_job(store, "sft", {}, name="x")
    at = open_page("pages/jobs.py")
    logs = [link.proto for link in at.get("page_link") if link.proto.label == "Charts on Logs"]
    assert len(logs) == 1
    assert logs[0].query_string == f"job={job_id}"
    assert logs[0].page.endswith("logs")


def test_history_and_audit_trail_tables_are_built_when_opened(store):
    """A fresh page draws the jobs table and the job's parameters; the history and the audit trail
    (collapsed) get their tables when opened, and keep them while open."""
    from mmcore.access import audit
    job_id = finished_job(store, "sft", {"epochs": "2"}, name="audited")
    audit.record("alice", "stop", job_id, {"entry": "page", "request": {"job": job_id}, "result": {"why": "test"}},
                 home=store.home)
    audit.record("bob", "settings", None, {"entry": "api", "request": {"queue": {}}, "result": {}}, home=store.home)
    at = open_page("pages/jobs.py")
    assert not at.exception, at.exception
    labels = [e.label for e in at.expander]
    assert "History (1)" in labels and "Audit trail (admins)" in labels
    assert len(at.dataframe) == 0  # the jobs and the selected job's parameters are plain tables: no grid to load
    assert list(table(at)["name"]) == ["audited"]
    params = page_tables(at)[1]
    assert params["headers"] == {"parameter": "Parameter", "value": "Value"}
    assert {"parameter": "epochs", "value": "2"} in params["rows"]

    at.session_state["jobs.history_open"] = True  # the reader opens the job's history
    at.run()
    assert not at.exception, at.exception
    assert len(at.dataframe) == 1
    history = at.dataframe[0].value
    assert list(history["who"]) == ["alice"] and list(history["action"]) == ["stop"]

    at.session_state["jobs.audit_open"] = True  # and the audit trail
    at.run()
    assert len(at.dataframe) == 2
    assert list(at.dataframe[1].value["who"]) == ["bob", "alice"]
    audit.record("carol", "resume", job_id, {"entry": "cli", "request": {}, "result": {}}, home=store.home)
    at.run()  # a rerun (the page follows the store) with a new entry keeps both open
    assert not at.exception, at.exception
    assert "History (2)" in [e.label for e in at.expander] and len(at.dataframe) == 2
    assert list(at.dataframe[0].value["who"]) == ["carol", "alice"]


def live_table(at):
    """The live table component's data (mmcore/live/livetable.py) of this run."""
    import json
    found = [e for e in at.get("bidi_component") if e.proto.component_name == "minimind_live_table"]
    assert len(found) == 1, [e.proto.component_name for e in at.get("bidi_component")]
    return json.loads(found[0].proto.json)


def test_the_table_is_a_live_table_sent_whole_at_each_full_run(store, tmp_path, monkeypatch):
    """Where the server publishes static files (AppTest has none: they are made up here), the table is
    the live component, not HTML blocks. A full page run sends it whole (the page may have been opened
    again: a new element); the fragment's own runs, which AppTest cannot make, send its changed cells
    (tests/test_browser_jobs_live.py)."""
    from mmcore.jobs import htmltable, jobtable
    from mmcore.live import livepage
    monkeypatch.setattr(livepage, "published",
                        lambda files: {key: f"app/static/{name}" for key, (_, name) in files.items()})
    finished_job(store, "sft", {}, name="done <i>", log="Epoch:[1/1](1/1) loss:2.0 lr:0.0001 epoch_Time:0.0min:\n")
    running = sleeping_job(store, tmp_path)
    at = open_page("pages/jobs.py")
    assert not at.exception, at.exception
    blocks = [h for h in at.get("html") if 'class="minimind-table minimind-table-rows"' in h.proto.body]
    assert not blocks  # not drawn as HTML blocks
    draw = live_table(at)
    assert draw["op"] == "draw" and draw["module"].startswith("app/static/livetable-")
    assert f'data-row="{running}"' in draw["html"] and "done &lt;i&gt;" in draw["html"]
    # every column, the trend and health too, but the submitter's: both jobs have the same one
    assert [len(row) for row in htmltable.apply_message(None, draw)["rows"]] == [len(jobtable.COLUMNS) + 1] * 2
    at.run()
    again = live_table(at)
    assert again["op"] == "draw" and again["epoch"] != draw["epoch"]


def test_the_latest_loss_columns_tooltip_explains_reasoning_distills_weighted_loss(store):
    finished_job(store, "distill_reason", train_form.preset_form("distill_reason"), name="reason")
    at = open_page("pages/jobs.py")
    assert not at.exception, at.exception
    bodies = [h.proto.body for h in at.get("html") if 'data-column="metric"' in h.proto.body]
    headers = [re.search(r'<th data-column="metric" title="([^"]*)"', body) for body in bodies]
    (help_text,) = [html.unescape(found.group(1)) for found in headers if found]
    assert help_text.startswith("The latest loss in the job's log") and "four reply tags 10×" in help_text


def test_the_table_has_a_tags_column_read_without_writing_to_the_store(store):
    """Tags are shown where a run is named; drawing the table reads them read-only: a store where nothing was
    tagged yet has no tags table made by opening the page, and the column appears only once a run has tags."""
    import sqlite3
    from contextlib import closing

    from mmcore.actions import experiment_acts

    def tables():
        with closing(sqlite3.connect(store.path)) as conn:
            return {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    plain = finished_job(store, "sft", {}, name="runs-b")
    tagged_job = finished_job(store, "sft", {}, name="runs-a")
    at = open_page("pages/jobs.py")
    assert not at.exception, at.exception
    assert "tags" not in table(at).columns and "run_annotations" not in tables()
    assert experiment_acts.annotate(store, tagged_job, tags="lr,baseline").kind == "success"
    at.run()
    shown = table(at).set_index("id")
    assert (shown.loc[tagged_job, "tags"], shown.loc[plain, "tags"]) == ("baseline, lr", "")
    assert [h for h in page_tables(at) if "status" in h["headers"]][0]["headers"]["tags"] == "Tags"
