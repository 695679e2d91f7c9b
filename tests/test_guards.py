"""Guards (mmcore.runs.guards): what fires each one, and a real job that a guard stops through its supervisor."""
import json
import os
import subprocess
import sys

import pytest
from _runner_helpers import wait_for

from mmcore import api
from mmcore.access import audit, roles
from mmcore.base.i18n import MessageError
from mmcore.base.paths import ROOT
from mmcore.jobs.jobstore import JobStore
from mmcore.queue import launch
from mmcore.runs import guards
from mmcore.train.preset_table import demo_preset


def watch(**values):
    return guards.GuardWatch("/nonexistent/metrics.jsonl", guards.parse(values))


def losses(*values):
    return [{"global_step": i + 1, "loss": v} for i, v in enumerate(values)]


def test_a_non_finite_loss_stops_a_run_by_default_and_not_when_turned_off():
    assert "nonfinite" in str(watch().feed(losses(3.0, float("nan"))))
    assert "nonfinite" in str(watch().feed(losses(float("inf"))))
    assert watch(nonfinite="0").feed(losses(3.0, float("nan"), 2.0)) is None


def test_loss_above_needs_patience_steps_in_a_row():
    assert watch(loss_above="1.0", patience="3").feed(losses(2.0, 2.0, 0.5, 2.0, 2.0)) is None  # the dip resets it
    fired = watch(loss_above="1.0", patience="3").feed(losses(2.0, 2.0, 0.5, 2.0, 2.0, 2.0))
    assert str(fired) == "loss_above: the loss stayed above 1.0 for 3 logged steps (2.0 at step 6)"


def test_reward_below_with_patience():
    records = [{"global_step": i, "reward": r} for i, r in enumerate((0.1, 0.5, 0.05, 0.6, 0.1, 0.0), 1)]
    assert watch(reward_below="0.2", patience="2").feed(records[:5]) is None
    assert "reward_below" in str(watch(reward_below="0.2", patience="2").feed(records))


def test_eval_patience_follows_the_held_out_metric_each_way():
    evals = [{"global_step": s, "eval/loss": v} for s, v in ((10, 3.0), (20, 2.5), (30, 2.6), (40, 2.5))]
    assert watch(eval_patience="3").feed(evals) is None  # 2.6 and 2.5 do not beat 2.5: two evaluations
    fired = watch(eval_patience="2").feed(evals)
    assert str(fired) == "eval_patience: eval/loss did not improve for 2 evaluations (best 2.5; step 40)"
    rewards = [{"global_step": s, "eval/reward/mean": v} for s, v in ((10, 0.1), (20, 0.3), (30, 0.2))]
    assert "eval/reward/mean" in str(watch(eval_patience="1").feed(rewards))
    assert watch(eval_patience="1").feed(rewards[:2]) is None


def test_bad_guards_say_what_is_wrong():
    with pytest.raises(MessageError) as caught:
        guards.parse({"loss_abve": "1", "patience": "0", "loss_above": "high", "nonfinite": "maybe"})
    text = str(caught.value)
    for part in ("'loss_abve' is not a guard", "patience takes a whole number", "loss_above takes a number",
                 "nonfinite is on (1) or off (0)"):
        assert part in text


def test_the_watch_reads_only_whole_appended_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    w = guards.GuardWatch(path, guards.parse({"loss_above": "1", "patience": "2"}))
    assert w.check() is None  # no stream yet
    with open(path, "w") as f:
        f.write(json.dumps({"global_step": 1, "loss": 5.0}) + "\n" + '{"global_step": 2, "lo')
    assert w.check() is None
    with open(path, "a") as f:
        f.write('ss": 4.0}\n')
    assert "loss_above" in str(w.check())


def test_guards_are_kept_per_job_and_default_to_the_non_finite_one(tmp_path):
    store = JobStore(tmp_path / "jobs.db")
    guards.save(store.path, 7, guards.parse({"reward_below": "0.1", "patience": "5"}))
    assert guards.load(store.path, 7) == guards.Guards(reward_below=0.1, patience=5)
    assert guards.load(store.path, 8) == guards.Guards(nonfinite=True)


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(roles.ROLES_ENV, raising=False)
    return tmp_path / "home"


def test_a_bad_guard_refuses_the_launch_and_starts_nothing(home):
    with pytest.raises(api.Refused, match="loss_above takes a number"):
        api.submit("pretrain", demo_preset("pretrain"), guards={"loss_above": "high"})
    assert api.list_jobs() == []


@pytest.mark.timeout(600)
def test_a_job_launched_with_loss_above_ends_stopped_with_the_guard_in_its_note(home):
    """The issue's check: `submit --guard loss_above=0.01 --guard patience=2` ends "stopped", the guard named in
    its note, its resume state saved."""
    out = home / "records" / "out"
    values = {**demo_preset("pretrain"), "epochs": "1", "batch_size": "4", "max_seq_len": "64", "log_interval": "1",
              "save_interval": "1000", "save_dir": str(out), "save_weight": "guarded"}
    env = {**os.environ, "MINIMIND_DASHBOARD_HOME": str(home)}
    env.pop(roles.ROLES_ENV, None)
    done = subprocess.run([sys.executable, "-m", "mmcore", "submit", "pretrain",
                           *[a for k, v in values.items() for a in ("--set", f"{k}={v}")],
                           "--guard", "loss_above=0.01", "--guard", "patience=2"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout.strip())
    store = JobStore()
    wait_for(lambda: store.get(job_id).finished, timeout=500, interval=1, what="the guarded job to end")
    job = api.get(job_id)
    assert job["status"] == "stopped", job
    assert job["note"].startswith("stopped by a guard: loss_above: the loss stayed above 0.01 for 2 logged steps")
    assert launch.resume_checkpoint(store.get(job_id)).is_file()  # stopped as a stop request stops: state saved
    log = open(job["log_path"], encoding="utf-8").read()
    assert "# guard: loss_above" in log
    [launched] = [e for e in audit.entries(job_id, home=home) if e.action == "launch"]
    assert launched.detail["result"]["guards"]["loss_above"] == 0.01
    # The guard's stop has its own entry in the audit trail: who (the guard), which guard, why.
    [stop] = [e for e in audit.entries(job_id, home=home) if e.action == "guard_stop"]
    assert (stop.user, stop.job_id, stop.detail["entry"]) == (guards.AUDIT_ACTOR, job_id, "system")
    assert stop.detail["request"] == {"guard": "loss_above"}
    assert stop.detail["result"]["reason"].startswith("loss_above: the loss stayed above 0.01 for 2 logged steps")
    history = subprocess.run([sys.executable, "-m", "mmcore", "history", str(job_id)], cwd=ROOT, env=env,
                             capture_output=True, text=True)
    assert history.returncode == 0, history.stderr
    assert "guard_stop" in history.stdout and guards.AUDIT_ACTOR in history.stdout, history.stdout


def test_the_train_form_launches_with_its_guards_and_refuses_bad_ones(home, monkeypatch):
    from _pages_helpers import open_page, texts
    monkeypatch.setattr("mmcore.jobs.scheduler_lock.ensure_running", lambda store: None)  # jobs wait in the queue
    at = open_page()
    at.selectbox(key="train.type").set_value("pretrain").run()
    next(b for b in at.button if b.label == "Demo preset").click().run()
    at.text_input(key="guards.loss_above").set_value("high").run()
    next(b for b in at.button if b.label == "Launch").click().run()
    assert any("loss_above takes a number" in e for e in texts(at.error)), texts(at.error)
    assert api.list_jobs() == []
    at.text_input(key="guards.loss_above").set_value("9.5").run()
    at.text_input(key="guards.patience").set_value("3").run()
    next(b for b in at.button if b.label == "Launch").click().run()
    [job] = api.list_jobs()
    assert guards.load(JobStore().path, job["id"]) == guards.Guards(loss_above=9.5, patience=3)


def test_a_launchs_guards_exist_the_moment_its_job_does(home, monkeypatch):
    """The scheduler may start a job as soon as its row exists: its guards are written with the row, so the
    scheduler (woken by the insert) already finds them."""
    store = JobStore()
    seen = {}

    def scheduler_woken(woken_store):  # what a scheduler started by the insert would read, then and there
        for job in woken_store.list(limit=None):
            seen[job.id] = guards.load(woken_store.path, job.id)
    monkeypatch.setattr("mmcore.jobs.scheduler_lock.ensure_running", scheduler_woken)
    job_id = api.submit("pretrain", demo_preset("pretrain"), guards={"loss_above": "4.5", "patience": "3"})
    assert seen == {job_id: guards.Guards(loss_above=4.5, patience=3)}


def test_guards_that_cannot_be_kept_leave_no_job(home, monkeypatch):
    """The job's row and its guards are one transaction: when the guards' insert fails, no job is left behind."""
    import sqlite3
    from contextlib import closing

    monkeypatch.setattr("mmcore.jobs.scheduler_lock.ensure_running", lambda store: None)
    store = JobStore()
    with closing(sqlite3.connect(store.path)) as conn, conn:
        conn.execute(guards.SCHEMA)
        conn.execute("CREATE TRIGGER no_guards BEFORE INSERT ON run_guards BEGIN SELECT RAISE(ABORT, 'guards refused');"
                     " END")
    with pytest.raises(api.Refused, match="guards refused"):
        api.submit("pretrain", demo_preset("pretrain"), guards={"loss_above": "4.5"})
    assert api.list_jobs() == [] and store.list(limit=None) == []
    api.submit("pretrain", demo_preset("pretrain"))  # without guards of its own: nothing to insert, it launches
    assert len(store.list(limit=None)) == 1
