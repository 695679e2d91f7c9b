"""Every act × role × entry point (mmcore.actions): who may do it, and one audit row of one shape for each act done.

The acting user is the OS user (what a page gets in local sign-in mode; the API and the CLI are told the same
identity), whose role the roles file sets per case; what it acts on belongs to it or to another member, olga.
Where an act is offered: the page (AppTest: a control the user may not use is disabled and says why, in its help
or beside it; Streamlit drops a forged change of a disabled widget, and the act refuses on its own anyway:
the API and the direct calls show it), `mmcore.api`, `python -m mmcore` (`cli.main`), and the act itself as a
page calls it ("act": where the page's control is disabled, or runs a model).
A refused act shows or raises a message that says why, changes nothing and adds no audit row (it is kept among
the refused attempts, `audit.refusals`); an allowed act adds exactly one audit row `{"entry", "request",
"result"}`. One job store serves every case; no trainer runs (jobs are held in the queue: the scheduler is not
started) and the Models page's acts run against stand-ins for the chat worker and the export
(tests/test_page_models.py runs them for real).
"""
import contextlib
import dataclasses
import io
import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from _pages_helpers import open_page, texts
from _rescore_helpers import write_run
from _trainer_helpers import DEMO
from test_page_records import recorded_job

from mmcore import api, cli
from mmcore.access import audit, roles
from mmcore.actions import core, experiment_acts, job_acts, model_acts, queue_acts, run_acts, view_acts
from mmcore.experiments import sweeps
from mmcore.jobs import storeguard
from mmcore.jobs.jobstore import JobStore
from mmcore.logs import savedviews
from mmcore.models import modelsview
from mmcore.queue import launch, pipelines, queueconf
from mmcore.runs import health
from mmcore.train.preset_table import demo_preset
from mmcore.widgets import queue_panel

pytestmark = pytest.mark.timeout(300)

ACTOR = roles.os_user()
OTHER = "olga"  # a member
#: case -> (the actor's role, who owns what it acts on)
CASES = {"viewer": ("viewer", ACTOR), "member_own": ("member", ACTOR), "member_other": ("member", OTHER),
         "admin": ("admin", OTHER)}
#: rule -> the cases allowed
ALLOWED = {"member": {"member_own", "member_other", "admin"},  # launch, clone, the Models page's acts
           "own": {"member_own", "admin"},  # a member on its own jobs and pipelines; an admin on any
           "admin": {"admin"},  # priorities, settings, restore
           "all": set(CASES),  # keeping a view of one's own
           "own_view": {"viewer", "member_own", "admin"}}  # deleting a view: its owner or an admin
REFUSAL = re.compile(r"may not|only its owner")
RECORDED_AS = {"page": "page", "act": "page", "api": "api", "cli": "cli"}  # entry -> the record's "entry"


@dataclass
class World:
    home: Path
    store: JobStore
    tmp: Path
    recorded: int  # a job with run records: Logs shows the health thresholds' form for it
    serial: int = 0

    def next(self):
        self.serial += 1
        return self.serial


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("acts")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINIMIND_DASHBOARD_HOME", str(tmp / "home"))
        mp.delenv(roles.ROLES_ENV, raising=False)
        mp.setattr("mmcore.jobs.scheduler_lock.ensure_running", lambda store: None)  # jobs wait in the queue
        mp.setattr(model_acts, "run_export", lambda weight, out_dir, **options: (0, "exported"))
        mp.setattr(modelsview, "compare", lambda targets, prompts, settings, home=None, on_answer=None: [{}])
        store = JobStore()
        savedviews.ViewStore(store.path)  # its table
        yield World(tmp / "home", store, tmp, recorded_job(store))


# -- what the acts act on ------------------------------------------------------------------------------

def held_job(w, owner):
    """A job waiting in the queue for a GPU this machine lacks."""
    return w.store.create("pretrain", f"held-{w.next()}", demo_preset("pretrain"), ["python3", "x.py"], "/tmp", {},
                          user=owner, waiting=1, resources={"gpu_ids": [0]}, queue_reason="waiting for GPU 0")


def ended_job(w, owner, resumable=False):
    """A job that has ended; `resumable`: it saved resume state."""
    values = {**demo_preset("pretrain"), "save_weight": "acts", "save_dir": str(w.tmp / "out")}
    job_id = w.store.create("pretrain", f"ended-{w.next()}", values, ["python3", "x.py"], str(w.tmp / "trainer"), {},
                            user=owner)
    w.store.update(job_id, status="stopped", started_at=time.time() - 9, ended_at=time.time(), exit_code=143)
    if resumable:
        checkpoint = launch.resume_checkpoint(w.store.get(job_id))
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
        checkpoint.write_bytes(b"resume state")
    return job_id


def held_sweep(w, owner, failed=False):
    """A sweep of `owner` with one job waiting in the queue (`failed`: one job that failed)."""
    kept = sweeps.SweepStore(w.store.path)
    sweep_id = kept.reserve("held", sweeps.SweepSpec("pretrain"), owner)
    job_id = held_job(w, owner)
    if failed:
        w.store.update(job_id, status="failed", waiting=0, params={**demo_preset("pretrain"), "epochs": "1"})
    kept.add_jobs(sweep_id, [job_id])
    return sweep_id


def pipeline(w, owner, failed=False):
    pid = pipelines.create(w.store, f"chain-{w.next()}", pipelines.TEMPLATES["demo_chain"].stages(), user=owner)
    if failed:
        first, *rest = pipelines.get(w.store, pid).stages
        w.store.update(first.id, status="failed", waiting=0, exit_code=1)
        for job in rest:
            w.store.update(job.id, status="blocked", waiting=0)
    return pid


def view(w, owner):
    return savedviews.ViewStore(w.store.path).save(owner, f"view-{w.next()}", {"job": "1"}, shared=True)


def run_records(w, owner):
    return write_run(w.tmp / f"run-{w.next()}", steps=1)


def target(w, owner):
    weight = w.tmp / "full_sft_64.pth"
    weight.write_bytes(b"a stand-in")
    return modelsview.ChatTarget(str(weight), str(weight), None, None, "sft")


# -- the entry points: each returns None when the act was done, else the message that says why not -------

class Disabled(Exception):
    """The page offers the control disabled; the message is why (its help, or the caption beside it)."""


def why_disabled(at, widget):
    return widget.proto.help or " ".join(c for c in texts(at.caption) if REFUSAL.search(c)) or "disabled, not said why"


def offered(at, key=None, label=None):
    """The button; Disabled when the page does not let this user press it."""
    button = at.button(key=key) if key else next(b for b in at.button if b.label == label)
    if button.disabled:
        raise Disabled(why_disabled(at, button))
    return button


def press(at, key=None, label=None):
    offered(at, key, label).click().run()


def change(at, box, value):
    """Set an input's value (Disabled when it is disabled)."""
    if box.disabled:
        raise Disabled(why_disabled(at, box))
    box.set_value(value)


def has_button(at, key):
    return any(b.key == key for b in at.button)


def said(at):
    assert not at.exception, at.exception
    return " ".join(texts(at.error)) or None


def jobs_page(job_id=None, state=None):
    return open_page("pages/jobs.py", query={"job": str(job_id)} if job_id else None, state=state)


def page_ask_first(key):
    def act(w, job_id):
        at = jobs_page(job_id)
        press(at, key)
        if has_button(at, "jobs.confirm"):
            press(at, "jobs.confirm")
        return said(at)
    return act


def page_press(key, page="pages/jobs.py", query=None):
    def act(w, thing):
        at = open_page(page, query=query(w, thing) if query else {"job": str(thing)} if thing else None)
        press(at, key.format(thing))
        return said(at)
    return act


def page_priority(w, job_id):
    at = jobs_page(job_id)
    change(at, at.number_input(key=f"queue.priority.{job_id}"), 5)
    at.run()
    return said(at)


def page_launch(w, _):
    at = open_page()
    at.selectbox(key="train.type").set_value("pretrain").run()
    press(at, label="Demo preset")
    press(at, label="Launch")
    return said(at)


def page_pipeline(w, _):
    at = open_page()
    at.radio(key="queue.launch_what").set_value("pipeline").run()
    press(at, "queue.pipeline.launch")
    return said(at)


def page_queue_settings(w, _):
    at = jobs_page(state={queue_panel.SETTINGS_OPEN_KEY: True})
    offered(at, label="Save")  # (disabled with the fields: an admin's to change)
    change(at, at.number_input[0], queueconf.load(w.home).cpu_slots + 1)
    press(at, label="Save")
    return said(at)


def page_thresholds(w, _):
    at = open_page("pages/logs.py", query={"job": str(w.recorded)}, state={"logs.thresholds_open": True})
    offered(at, label="Save thresholds")  # (disabled, unlike the fields: an admin's to change)
    change(at, at.number_input(key="logs.health.zero_std_max"), round(health.load_settings(w.home).zero_std_max / 2, 3))
    press(at, label="Save thresholds")
    return said(at)


def page_rescore(w, _):
    at = open_page("pages/logs.py", query={"job": str(w.recorded)})
    press(at, "logs.rescore.go")
    return said(at)


def page_save_view(w, _):
    at = open_page("pages/logs.py")
    at.text_input(key="views.name").set_value(f"mine-{w.next()}").run()
    press(at, "views.save")
    return said(at)


def page_delete_view(w, view_id):
    at = open_page("pages/logs.py")
    at.selectbox(key="views.pick").set_value(view_id).run()
    press(at, "views.delete")
    return said(at)


def direct(call):
    """The act called as a page calls it (its record says "page")."""
    def act(w, thing):
        outcome = call(w, thing)
        return outcome.message if outcome.refused else None
    return act


def views(w):
    return savedviews.ViewStore(w.store.path)


def changed_queue_settings(w):
    current = queueconf.load(w.home)
    return dataclasses.replace(current, cpu_slots=current.cpu_slots + 1)


def changed_thresholds(w):
    current = vars(health.load_settings(w.home))
    return {**current, "zero_std_max": round(current["zero_std_max"] / 2, 3)}


def through_api(call):
    def act(w, thing):
        try:
            call(w, thing)
        except api.Refused as exc:
            return str(exc)
        return None
    return act


def through_cli(*args):
    def act(w, thing):
        argv = [a.format(thing) if isinstance(a, str) else a(w, thing) for a in args] + ["--user", ACTOR]
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = cli.main(argv)
        assert code in (0, 1), (code, err.getvalue())
        return err.getvalue() or "exit status 1" if code else None
    return act


SET_DEMO = [arg for k, v in demo_preset("pretrain").items() for arg in ("--set", f"{k}={v}")]


@dataclass(frozen=True)
class Act:
    action: str  # as the audit trail names it
    rule: str  # who may (ALLOWED)
    prepare: object  # (world, owner) -> what it acts on
    entries: dict  # entry -> (world, what) -> None or the refusal


def nothing(w, owner):
    return None


ACTS = {
    "launch": Act("launch", "member", nothing, {
        "page": page_launch,
        "api": through_api(lambda w, _: api.submit("pretrain", demo_preset("pretrain"), user=ACTOR)),
        "cli": through_cli("submit", "pretrain", *SET_DEMO)}),
    "stop": Act("stop", "own", held_job, {
        "page": page_ask_first("jobs.stop"),
        "api": through_api(lambda w, job_id: api.stop(job_id, user=ACTOR)),
        "cli": through_cli("stop", "{}")}),
    "delete": Act("delete", "own", ended_job, {
        "page": page_ask_first("jobs.delete"),
        "api": through_api(lambda w, job_id: api.delete(job_id, user=ACTOR)),
        "cli": through_cli("delete", "{}")}),
    "resume": Act("resume", "own", lambda w, owner: ended_job(w, owner, resumable=True), {
        "page": page_press("jobs.resume"),
        "api": through_api(lambda w, job_id: api.resume(job_id, user=ACTOR))}),
    "clone": Act("clone", "member", ended_job, {
        "page": page_press("jobs.clone"),
        "act": direct(lambda w, job_id: job_acts.clone_job(w.store, job_id, ACTOR))}),
    "move": Act("move", "own", held_job, {
        "page": page_press("queue.top"),
        "api": through_api(lambda w, job_id: api.move(job_id, "top", user=ACTOR)),
        "cli": through_cli("queue", "{}", "--move", "top")}),
    "priority": Act("priority", "admin", held_job, {
        "page": page_priority,
        "api": through_api(lambda w, job_id: api.set_priority(job_id, 5, user=ACTOR)),
        "cli": through_cli("queue", "{}", "--priority", "5")}),
    "queue_pipeline": Act("queue_pipeline", "member", nothing, {
        "page": page_pipeline,
        "act": direct(lambda w, _: queue_acts.queue_pipeline(w.store, "chain", pipelines.TEMPLATES["demo_chain"].stages(),
                                                             ACTOR))}),
    "retry_pipeline": Act("retry_pipeline", "own", lambda w, owner: pipeline(w, owner, failed=True), {
        "page": page_press("pipe.retry.{}", query=lambda w, pid: None),
        "act": direct(lambda w, pid: queue_acts.retry_pipeline(w.store, pid, True, ACTOR))}),
    "stop_pipeline": Act("stop_pipeline", "own", pipeline, {
        "page": page_press("pipe.stop.{}", query=lambda w, pid: None),
        "act": direct(lambda w, pid: queue_acts.stop_pipeline(w.store, pid, ACTOR))}),
    "queue_settings": Act("settings", "admin", nothing, {
        "page": page_queue_settings,
        "act": direct(lambda w, _: queue_acts.save_settings(w.store, changed_queue_settings(w), ACTOR))}),
    "thresholds": Act("settings", "admin", nothing, {
        "page": page_thresholds,
        "act": direct(lambda w, _: view_acts.save_thresholds(w.home, changed_thresholds(w), ACTOR))}),
    "save_view": Act("save_view", "all", nothing, {
        "page": page_save_view,
        "act": direct(lambda w, _: view_acts.save_view(views(w), f"mine-{w.next()}", {"job": "2"}, user=ACTOR))}),
    "delete_view": Act("delete_view", "own_view", view, {
        "page": page_delete_view,
        "act": direct(lambda w, view_id: view_acts.delete_view(views(w), view_id, ACTOR))}),
    "annotate": Act("annotate", "own", ended_job, {
        "act": direct(lambda w, job_id: experiment_acts.annotate(w.store, job_id, ACTOR, tags="checked", note="seen")),
        "api": through_api(lambda w, job_id: api.annotate(job_id, tags="checked", user=ACTOR)),
        "cli": through_cli("annotate", "{}", "--note", "seen")}),
    "sweep": Act("sweep", "member", nothing, {
        "api": through_api(lambda w, _: api.sweep("pretrain", demo_preset("pretrain"), grid={"epochs": ["1", "2"]},
                                                  user=ACTOR))}),
    "stop_sweep": Act("stop_sweep", "own", held_sweep, {
        "api": through_api(lambda w, sweep_id: api.stop_sweep(sweep_id, user=ACTOR)),
        "cli": through_cli("sweep", "pretrain", "--stop", "{}")}),
    "retry_sweep": Act("retry_sweep", "own", lambda w, owner: held_sweep(w, owner, failed=True), {
        "api": through_api(lambda w, sweep_id: api.retry_sweep(sweep_id, user=ACTOR)),
        "cli": through_cli("sweep", "pretrain", "--retry", "{}")}),
    "notify_prefs": Act("notify_prefs", "all", nothing, {
        "api": through_api(lambda w, _: api.set_notifications(["failed"], user=ACTOR)),
        "cli": through_cli("notify", "--events", "failed,succeeded")}),
    "upload": Act("upload", "member", nothing, {
        "act": direct(lambda w, _: view_acts.upload_log(w.home, b"Epoch:[1/1](1/1) loss:1.0\n", f"run{w.next()}.log",
                                                        ACTOR))}),
    "restore": Act("restore", "admin", lambda w, owner: storeguard.backup(w.store.path),
                   {"cli": through_cli("restore", lambda w, backup: str(backup))}),
    "chat": Act("chat", "member", target, {
        "act": direct(lambda w, t: model_acts.chat(ACTOR, t, w.home))}),
    "compare": Act("compare", "member", target, {
        "act": direct(lambda w, t: model_acts.compare(ACTOR, [t, t], [{"messages": []}], {}, w.home))}),
    "evaluate": Act("evaluate", "member", target, {
        "act": direct(lambda w, t: model_acts.evaluate(w.store, ACTOR, [t], [], DEMO / "rlaif.jsonl", {}))}),
    "rescore": Act("rescore", "member", run_records, {
        "page": page_rescore,
        "act": direct(lambda w, run_dir: run_acts.rescore(run_dir, "rule", user=ACTOR, home=w.home)),
        "api": through_api(lambda w, run_dir: api.rescore(run_dir, "rule", user=ACTOR)),
        "cli": through_cli("rescore", lambda w, run_dir: str(run_dir), "--reward", "rule")}),
    "export": Act("export", "member", target, {
        "act": direct(lambda w, t: model_acts.export(ACTOR, t.weight, w.tmp / "exported", w.home)),
        "cli": through_cli("export", lambda w, t: t.weight, lambda w, t: str(w.tmp / "exported"))}),
}
TABLE = [(name, case, entry) for name, act in ACTS.items() for case in CASES for entry in act.entries]


def snapshot(w):
    """Everything an act may change: the jobs, the pipelines, the saved views, the settings."""
    with contextlib.closing(sqlite3.connect(w.store.path)) as conn:
        views = conn.execute("SELECT id, owner, name, query, shared FROM saved_views ORDER BY id").fetchall()
        pipes = conn.execute("SELECT COUNT(*) FROM pipelines").fetchone()
        tagged = conn.execute("SELECT * FROM run_annotations ORDER BY job_id").fetchall() if conn.execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'run_annotations'").fetchone() else []
    jobs = [(j.id, j.status, j.user, j.priority, j.queue_pos, j.waiting) for j in w.store.list(limit=None)]
    return jobs, pipes, views, tagged, queueconf.load(w.home), health.load_settings(w.home)


@pytest.mark.parametrize("name, case, entry", TABLE, ids=["-".join(row) for row in TABLE])
def test_act(world, name, case, entry):
    act, (role, owner) = ACTS[name], CASES[case]
    (world.home / "roles.toml").write_text(f'default = "viewer"\n[users]\n"{ACTOR}" = "{role}"\n{OTHER} = "member"\n')
    thing = act.prepare(world, owner)
    before, trail = snapshot(world), audit.entries(limit=None, home=world.home)
    try:
        refusal = act.entries[entry](world, thing)
    except Disabled as exc:
        refusal = str(exc)
    added = audit.entries(limit=None, home=world.home)[:-len(trail) or None]
    if case in ALLOWED[act.rule]:
        assert refusal is None, refusal
        assert len(added) == 1, added
        [row] = added
        assert (row.user, row.action, row.detail["entry"]) == (ACTOR, act.action, RECORDED_AS[entry])
        assert sorted(row.detail) == ["entry", "request", "result"], row.detail
        assert isinstance(row.detail["request"], dict) and isinstance(row.detail["result"], dict)
    else:
        assert refusal and REFUSAL.search(refusal), refusal
        assert added == [] and snapshot(world) == before


def test_the_record_shape_is_enforced(world):
    with pytest.raises(ValueError, match="audit detail"):
        audit.record(ACTOR, "stop", 1, {"was": "running"}, home=world.home)
    with pytest.raises(ValueError, match="unknown entry"):
        core.perform(world.home, ACTOR, "stop", "browser", {}, lambda: core.did("info", "", {}))
