"""Sweeps (mmcore.experiments.sweeps, the act, the API, `python -m mmcore sweep`, the Train form and the Runs
page's sweep view): a real job store; jobs wait in the queue (the scheduler is not started), except where noted."""
import json
import os
import subprocess
import sys

import pytest
from _pages_helpers import open_page, texts, wait_for
from test_runs import steps

from mmcore import api
from mmcore.access import audit, roles
from mmcore.base.i18n import MessageError
from mmcore.base.paths import ROOT
from mmcore.experiments import sweepchart, sweeps
from mmcore.jobs.jobstore import JobStore
from mmcore.runs.metric_stream import job_dir
from mmcore.train.preset_table import demo_preset

pytestmark = pytest.mark.timeout(300)
DEMO = demo_preset("pretrain")


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(roles.ROLES_ENV, raising=False)
    monkeypatch.setattr("mmcore.jobs.scheduler_lock.ensure_running", lambda store: None)  # jobs wait in the queue
    return tmp_path / "home"


def test_grid_random_and_seeds_expand_in_order_and_reproducibly():
    spec = sweeps.SweepSpec("pretrain", base={"epochs": "1"}, grid={"learning_rate": ["1e-3", "5e-4"]},
                            random={"batch_size": ("4", "16")}, trials=3, seeds=2)
    runs = sweeps.expand(spec)
    assert len(runs) == sweeps.count(spec) == 12
    assert [r["learning_rate"] for r in runs[:6]] == ["1e-3"] * 6 and [r["seed"] for r in runs[:4]] == ["1", "2"] * 2
    assert all(4 <= int(r["batch_size"]) <= 16 and r["epochs"] == "1" for r in runs)
    assert runs == sweeps.expand(spec)  # the same spec draws the same values
    assert runs[0]["hidden_size"] == "512"  # not given: the script's default
    wide = sweeps.expand(sweeps.SweepSpec("pretrain", random={"learning_rate": ("1e-6", "1e-2")}, trials=50))
    assert sum(float(r["learning_rate"]) < 1e-4 for r in wide) > 10  # log-uniform over a wide range
    assert sweeps.expand(sweeps.SweepSpec("pretrain", grid={"epochs": ["1"]}))[0]["seed"] == ""  # upstream's seed


def test_a_bad_spec_says_every_problem():
    spec = sweeps.SweepSpec("pretrain", grid={"lr": ["1"], "epochs": ["1", ""]}, random={"batch_size": ("9", "2")},
                            seeds=0)
    with pytest.raises(MessageError) as caught:
        sweeps.expand(spec)
    text = str(caught.value)
    for part in ("no parameter 'lr'", "grid of epochs", "range of batch_size", "Trials and seeds"):
        assert part in text
    assert "at most 256" in str(MessageError(sweeps.check(sweeps.SweepSpec(
        "pretrain", grid={"epochs": [str(i) for i in range(1, 30)], "batch_size": [str(i) for i in range(1, 11)]}))))


def test_the_cli_queues_four_jobs_under_one_sweep_and_one_audit_row(home):
    """The issue's check: `sweep pretrain --grid learning_rate=0.001,0.0005 --seeds 2 --json` queues 4 jobs."""
    env = {**os.environ, "MINIMIND_DASHBOARD_HOME": str(home)}
    env.pop(roles.ROLES_ENV, None)
    sets = [a for k, v in DEMO.items() for a in ("--set", f"{k}={v}")]
    done = subprocess.run([sys.executable, "-m", "mmcore", "sweep", "pretrain", *sets, "--grid",
                           "learning_rate=0.001,0.0005", "--seeds", "2", "--json"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert len(found["jobs"]) == 4
    store = JobStore()
    jobs = [store.get(j) for j in found["jobs"]]
    assert [(j.params["learning_rate"], j.params["seed"]) for j in jobs] == [
        ("0.001", "1"), ("0.001", "2"), ("0.0005", "1"), ("0.0005", "2")]
    assert len({j.params["save_weight"] for j in jobs}) == 4  # no run writes over another's weights
    assert sweeps.SweepStore(store.path).get(found["sweep"])["jobs"] == found["jobs"]
    rows = [e for e in audit.entries(limit=None, home=home)]
    assert [(e.action, e.detail["result"]["jobs"]) for e in rows] == [("sweep", found["jobs"])]
    assert api.stop_sweep(found["sweep"], grace=5) == found["jobs"]  # (the CLI's queue may have started some)
    wait_for(lambda: all(store.get(j).finished for j in found["jobs"]), timeout=120, what="the sweep to stop")
    assert {store.get(j).status for j in found["jobs"]} == {"stopped"}


def test_a_sweep_with_a_run_that_cannot_start_queues_nothing(home):
    with pytest.raises(api.Refused, match="run 2: .*Epochs"):
        api.sweep("pretrain", DEMO, grid={"epochs": ["1", "0"]})
    assert api.list_jobs() == [] and sweeps.SweepStore(JobStore().path).list() == []
    (home / "roles.toml").write_text('default = "viewer"\n')
    with pytest.raises(api.Refused, match="may not"):
        api.sweep("pretrain", DEMO, grid={"epochs": ["1", "2"]})


@pytest.fixture
def hostile(home, tmp_path, monkeypatch):
    """Write roots in `tmp_path/roots` holding a symlink out (`out/link`) and a weight file name of the
    first sweep's first run that is a symlink out; `outside` is where nothing may be written."""
    roots, outside = tmp_path / "roots", tmp_path / "outside"
    (roots / "out").mkdir(parents=True)
    outside.mkdir()
    (roots / "out" / "link").symlink_to(outside)
    (roots / "trap").mkdir()
    (roots / "trap" / "pretrain_sw1_1_64.pth").symlink_to(outside / "w.pth")
    monkeypatch.setenv("MINIMIND_WRITE_ROOTS", str(roots))
    return {"..": "../../escape", "absolute": str(outside), "symlink": str(roots / "out" / "link"),
            "home": "~", "symlinked file": str(roots / "trap"), "outside": outside, "roots": roots}


OUTSIDE = "outside the folders a job may write to"


@pytest.mark.parametrize("case", ["..", "absolute", "symlink", "home", "symlinked file"])
def test_a_sweep_writing_outside_the_write_roots_is_refused_whole_through_the_api(hostile, case):
    ok = str(hostile["roots"] / "out")
    # One hostile run among good ones: the whole sweep is refused, with launch's message, and nothing queued.
    with pytest.raises(api.Refused, match=f"run 2: .*{OUTSIDE}"):
        api.sweep("pretrain", DEMO, grid={"save_dir": [ok, hostile[case]]})
    assert api.list_jobs() == [] and sweeps.SweepStore(JobStore().path).list() == []
    assert list(hostile["outside"].iterdir()) == []
    with pytest.raises(api.Refused, match="Saved weight name: must be a plain name"):
        api.sweep("pretrain", {**DEMO, "save_dir": ok}, grid={"save_weight": ["good", "../../../x"]})
    assert api.list_jobs() == []
    kept = [r for r in audit.refusals(limit=None, home=JobStore().home) if r.action == "sweep"]
    assert len(kept) == 2 and OUTSIDE in kept[-1].reason  # the refused attempts are kept, with why


def test_a_sweep_writing_outside_the_write_roots_is_refused_whole_through_the_cli(hostile, home):
    env = {**os.environ, "MINIMIND_DASHBOARD_HOME": str(home)}
    env.pop(roles.ROLES_ENV, None)
    sets = [a for k, v in DEMO.items() for a in ("--set", f"{k}={v}")]
    for bad in (hostile[".."], hostile["symlink"]):
        done = subprocess.run([sys.executable, "-m", "mmcore", "sweep", "pretrain", *sets, "--grid",
                               f"save_dir={hostile['roots'] / 'out'},{bad}"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode != 0 and OUTSIDE in done.stdout + done.stderr, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
    assert api.list_jobs() == [] and sweeps.SweepStore(JobStore().path).list() == []
    assert list(hostile["outside"].iterdir()) == []


def test_the_train_form_shows_the_run_count_before_queueing(home):
    at = open_page(state={"sweep.open": True})
    at.selectbox(key="train.type").set_value("pretrain").run()
    next(b for b in at.button if b.label == "Demo preset").click().run()
    at.multiselect(key=sweeps_key()).set_value(["learning_rate", "batch_size"]).run()
    at.text_input(key="sweep.values.learning_rate").set_value("1e-3, 5e-4, 2e-4").run()
    at.text_input(key="sweep.values.batch_size").set_value("8,16").run()
    at.number_input(key="sweep.seeds").set_value(2).run()
    assert any("12 runs" in m for m in texts(at.markdown)), texts(at.markdown)
    assert api.list_jobs() == []  # nothing queued yet
    at.button(key="sweep.launch").click().run()
    assert not at.exception, at.exception
    assert len(api.list_jobs()) == 12 and any("12 runs queued" in s for s in texts(at.success))


def test_the_sweep_forms_priority_reaches_every_queued_run_and_is_an_admins(home):
    """An admin's priority in the form is every queued run's; a member sees the field disabled and queues at 0."""
    def queue_from_the_form(priority=None):
        at = open_page(state={"sweep.open": True})
        at.selectbox(key="train.type").set_value("pretrain").run()
        next(b for b in at.button if b.label == "Demo preset").click().run()
        at.multiselect(key=sweeps_key()).set_value(["learning_rate"]).run()
        at.text_input(key="sweep.values.learning_rate").set_value("1e-3, 5e-4, 2e-4").run()
        field = at.number_input(key="sweep.priority")
        if priority is not None:
            field.set_value(priority).run()
        at.button(key="sweep.launch").click().run()
        assert not at.exception, at.exception
        return field.disabled, sweeps.SweepStore(JobStore().path).list()[0]["jobs"]

    home.mkdir(parents=True, exist_ok=True)
    store = JobStore()
    disabled, jobs = queue_from_the_form(priority=7)
    assert not disabled and len(jobs) == 3
    assert [store.get(j).priority for j in jobs] == [7, 7, 7]
    assert [e.detail["request"]["priority"] for e in audit.entries(limit=None, home=home)][:1] == [7]
    (home / "roles.toml").write_text(f'[users]\n"{roles.os_user()}" = "member"\n')
    disabled, jobs = queue_from_the_form()
    assert disabled and len(jobs) == 3 and {store.get(j).priority for j in jobs} == {0}


def sweeps_key():
    from mmcore.widgets.runviews import sweep_panel
    return sweep_panel.PICK_KEY


def test_the_sweep_view_draws_one_line_per_run_and_names_the_best(home):
    found = api.sweep("pretrain", DEMO, grid={"learning_rate": ["1e-3", "5e-4", "2e-4"]})
    store = JobStore()
    for job_id, loss in zip(found["jobs"], (2.0, 1.5, 3.0)):
        store.update(job_id, status="succeeded", waiting=0, started_at=1.0, ended_at=2.0)
        folder = job_dir(store.home, job_id)
        folder.mkdir(parents=True)
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps(4.0, loss)))
    runs = sweeps.sweep_runs(store, found["sweep"])
    figure = sweepchart.parcoords(runs, "final_loss")
    [trace] = figure.data
    assert [d.label for d in trace.dimensions] == ["learning_rate", "final_loss"]
    assert list(trace.dimensions[-1]["values"]) == [2.0, 1.5, 3.0]  # one line per run
    at = open_page("pages/runs.py")
    assert not at.exception, at.exception
    [chart] = at.get("plotly_chart")
    spec = json.loads(chart.proto.spec)
    assert spec["data"][0]["type"] == "parcoords" and len(spec["data"][0]["dimensions"][0]["values"]) == 3
    assert any(f"job {found['jobs'][1]}" in s for s in texts(at.success))


def test_retry_failed_queues_the_ended_runs_again_once_and_priority_is_an_admins(home):
    (home).mkdir(parents=True, exist_ok=True)
    (home / "roles.toml").write_text(f'[users]\n"{roles.os_user()}" = "admin"\nbob = "member"\n')
    found = api.sweep("pretrain", DEMO, grid={"learning_rate": ["1e-3", "5e-4", "2e-4"]}, priority=3)
    store = JobStore()
    assert {store.get(j).priority for j in found["jobs"]} == {3}
    with pytest.raises(api.Refused, match="may not"):
        api.sweep("pretrain", DEMO, grid={"epochs": ["1", "2"]}, priority=5, user="bob")
    with pytest.raises(api.Refused, match="from -1000 to 1000"):
        api.sweep("pretrain", DEMO, grid={"epochs": ["1", "2"]}, priority=5000)
    assert len(api.list_jobs()) == 3 and len(sweeps.SweepStore(store.path).list()) == 1  # nothing queued
    with pytest.raises(api.Refused, match="No run of sweep"):
        api.retry_sweep(found["sweep"])
    first, second, third = found["jobs"]
    store.update(first, status="failed", waiting=0)
    store.update(second, status="succeeded", waiting=0)
    new = api.retry_sweep(found["sweep"])
    [again] = new
    assert store.get(again).params["learning_rate"] == "1e-3" and store.get(again).name.endswith("-retry")
    assert store.get(again).priority == 3  # the retry keeps the sweep's priority
    assert sweeps.SweepStore(store.path).get(found["sweep"])["jobs"] == [first, second, third, again]
    with pytest.raises(api.Refused, match="No run of sweep"):
        api.retry_sweep(found["sweep"])  # retried once already
    with pytest.raises(api.Refused, match="may not"):
        api.retry_sweep(found["sweep"], user="bob")
    assert [e.action for e in audit.entries(limit=None, home=home)][:1] == ["retry_sweep"]


def test_the_seed_option_changes_the_run_and_repeats_it(tmp_path):
    """--seed (a sweep's seeds): the same seed trains the same, another seed otherwise; no --seed is upstream's."""
    data = tmp_path / "tiny.jsonl"
    data.write_text("".join((ROOT / "dataset" / "demo" / "pretrain.jsonl").read_text().splitlines(True)[:8]))

    def first_loss(*seed):
        done = subprocess.run([sys.executable, "train_pretrain.py", "--device", "cpu", "--dtype", "float32", "--epochs",
                               "1", "--hidden_size", "64", "--num_hidden_layers", "2", "--max_seq_len", "32",
                               "--batch_size", "4", "--num_workers", "0", "--log_interval", "1", "--data_path",
                               str(data), "--save_dir", str(tmp_path / "out"), "--save_weight", "seeded", "--run_dir",
                               str(tmp_path / f"rd{len(list(tmp_path.iterdir()))}"), *seed],
                              cwd=ROOT / "trainer", env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                              text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-2000:]
        return next(line.split("loss:")[1].split()[0] for line in done.stdout.splitlines() if "loss:" in line)

    upstream = first_loss()
    assert first_loss("--seed", "42") == upstream  # 42 is upstream's fixed seed
    assert first_loss("--seed", "3") == first_loss("--seed", "3") != upstream
