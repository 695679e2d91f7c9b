"""The runs table, the diff of runs, and runs' tags and notes (mmcore.experiments, mmcore.api, python -m mmcore):
a real job store with metrics streams as the trainers write them; the last test trains two tiny real jobs."""
import hashlib
import json
import math
import os
import sqlite3
import subprocess
import sys

import pytest
from _runner_helpers import wait_for

from mmcore import api
from mmcore.access import audit, roles
from mmcore.actions import experiment_acts
from mmcore.base.i18n import MessageError
from mmcore.base.paths import ROOT
from mmcore.experiments import runtable
from mmcore.jobs.jobstore import JobStore
from mmcore.runs import codeversion, runresults
from mmcore.runs.metric_stream import job_dir
from mmcore.train.preset_table import demo_preset

ME = roles.os_user()


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(roles.ROLES_ENV, raising=False)
    return tmp_path / "home"


def ended(store, name, records=(), status="succeeded", user=None, **values):
    """A finished pretrain job with the demo preset (over `values`) and a metrics stream of `records`."""
    job_id = store.create("pretrain", name, {**demo_preset("pretrain"), **values}, ["python3", "x.py"],
                          str(ROOT / "trainer"), {}, user=user)
    store.update(job_id, status=status, started_at=100.0, ended_at=160.0, exit_code=0)
    if records:
        folder = job_dir(store.home, job_id)
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "metrics.jsonl", "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
            f.write('{"global_step": 99, "loss": 0.0')  # a line cut short by a kill: not a record
    return job_id


def steps(*losses, **extra):
    return [{"global_step": i + 1, "tokens": 128 * (i + 1), "elapsed_s": 2.0 * (i + 1), "loss": loss, **extra}
            for i, loss in enumerate(losses)]


def test_results_final_and_best_loss_eval_metrics_tokens_and_wall_time(home):
    store = JobStore()
    job_id = ended(store, "a", steps(3.0, 1.5, 2.0) + [{"global_step": 3, "eval/loss": 2.5}])
    [run] = api.runs()
    assert run["id"] == job_id and run["owner"] == ME and run["status"] == "succeeded"
    assert run["params"]["learning_rate"] == "0.002"  # "2e-3" as the form writes it, normalised
    assert run["params"]["from_weight"] == "none"  # a parameter the job did not set: the script's default
    assert run["results"] == {"final_loss": 2.0, "best_loss": 1.5, "final_reward": None, "tokens": 384,
                              "wall_time_s": 60.0, "steps": 3, "eval/loss": 2.5}


def test_a_non_finite_loss_is_the_final_loss_but_never_the_best():
    summary = runresults.summarize_lines([json.dumps(r) for r in steps(2.0, 1.0, float("nan"))])
    assert math.isnan(summary["final_loss"]) and summary["best_loss"] == 1.0


def test_without_a_stream_the_rows_progress_gives_the_final_loss(home):
    store = JobStore()
    job_id = ended(store, "old")
    store.update(job_id, final_progress={"loss": 4.25, "step": 7})
    [run] = api.runs()
    assert run["results"]["final_loss"] == 4.25 and run["results"]["steps"] == 7


def test_the_table_shows_only_parameters_that_differ_and_every_one_on_request(home):
    store = JobStore()
    ended(store, "a", steps(2.0), learning_rate="1e-3")
    ended(store, "b", steps(1.0), learning_rate="0.001", batch_size="8")
    ended(store, "c", steps(3.0), learning_rate="5e-4")
    runs = api.runs()
    df = runtable.frame(runs)
    params = [c for c in df.columns if c.startswith(runtable.PARAM_PREFIX)]
    assert params == ["p:batch_size", "p:learning_rate"]
    assert list(df["p:learning_rate"]) == ["0.0005", "0.001", "0.001"]
    every = runtable.frame(runs, all_params=True)
    assert "p:hidden_size" in every.columns and "p:data_path" in every.columns


def test_search_filter_and_sort(home):
    store = JobStore()
    a = ended(store, "alpha", steps(2.0), learning_rate="1e-3")
    b = ended(store, "beta", steps(1.0), learning_rate="2e-3", status="failed")
    c = ended(store, "gamma", steps(3.0), learning_rate="5e-4")
    experiment_acts.annotate(store, a, tags="baseline, small", note="the reference run")
    experiment_acts.annotate(store, c, tags="small")
    df = runtable.frame(api.runs())
    assert list(runtable.search(df, "small")["id"]) == [c, a]
    assert list(runtable.search(df, "REFERENCE small")["id"]) == [a]
    assert list(runtable.search(df, "beta")["id"]) == [b]
    assert list(runtable.filter_column(df, "final_loss", "<2.5")["id"]) == [b, a]
    assert list(runtable.filter_column(df, "p:learning_rate", ">=0.001")["id"]) == [b, a]
    assert list(runtable.filter_column(df, "status", "=failed")["id"]) == [b]
    assert list(runtable.filter_column(df, "status", "!=failed")["id"]) == [c, a]
    assert list(runtable.filter_column(df, "name", "AM")["id"]) == [c]
    assert list(runtable.sort(df, "final_loss")["id"]) == [b, a, c]
    assert list(runtable.sort(df, "p:learning_rate", descending=True)["id"]) == [b, a, c]
    assert list(runtable.sort(df, "name", descending=True)["id"]) == [c, b, a]
    with pytest.raises(MessageError, match="not a number"):
        runtable.filter_column(df, "final_loss", "<low")
    with pytest.raises(MessageError, match="no column 'nope'"):
        runtable.filter_column(df, "nope", "1")
    text = runtable.csv(runtable.search(df, "small"))
    lines = text.splitlines()
    assert lines[0].startswith("id,name,type,owner,status,tags,note") and len(lines) == 3
    assert '"baseline, small"' in text


def test_diff_names_exactly_what_differs_with_data_identity_and_code(home, tmp_path):
    store = JobStore()
    data = tmp_path / "data.jsonl"
    data.write_text('{"text": "hello"}\n')
    a = ended(store, "a", steps(2.0), learning_rate="1e-3", data_path=str(data))
    b = ended(store, "b", steps(1.0), learning_rate="2e-3", data_path=str(data))
    codeversion.record(job_dir(store.home, a), ROOT)
    found = api.diff([a, b])
    assert found["params"] == {"learning_rate": ["0.001", "0.002"]}
    assert [r["id"] for r in found["runs"]] == [a, b]
    [file_a] = found["data"][0]["files"]
    assert file_a["path"] == str(data) and file_a["size"] == data.stat().st_size
    assert file_a["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert found["code"][0]["commit"] == (head or None) and found["code"][1]["commit"] is None
    assert found["results"]["final_loss"] == [2.0, 1.0]
    assert "hidden_size" in api.diff([a, b], only_differences=False)["params"]
    with pytest.raises(api.Refused, match="Choose 2 to 8 runs"):
        api.diff([a])
    with pytest.raises(api.Refused, match="no job with id 999"):
        api.diff([a, 999])


def test_tags_and_notes_by_the_owner_or_an_admin_audited_and_bad_ones_change_nothing(home):
    store = JobStore()
    (home / "roles.toml").write_text('[users]\nalice = "member"\nbob = "member"\nroot = "admin"\n')
    job_id = ended(store, "mine", steps(1.0), user="alice")
    assert api.annotate(job_id, tags="baseline,lr", note="first try", user="alice") == {
        "tags": ["baseline", "lr"], "note": "first try"}
    with pytest.raises(api.Refused, match="may not"):
        api.annotate(job_id, note="not yours", user="bob")
    with pytest.raises(api.Refused, match="is not a tag"):
        api.annotate(job_id, tags="a b", user="alice")
    assert api.annotate(job_id, note="checked", user="root") == {"tags": ["baseline", "lr"], "note": "checked"}
    [run] = api.runs()
    assert run["tags"] == ["baseline", "lr"] and run["note"] == "checked"
    rows = [(e.user, e.action, e.detail["result"]["note"]) for e in audit.entries(job_id, home=home)]
    assert rows == [("root", "annotate", "checked"), ("alice", "annotate", "first try")]
    assert [r.user for r in audit.refusals(home=home)] == ["alice", "bob"]


def test_pages_read_tags_without_writing_and_name_runs_with_them(home):
    """peek_tags reads every tagged run without making the tags table; a run whose tags were cleared is not
    listed; `tagged` names a run with its tags, and the Jobs table shows its Tags column only when a row has tags."""
    from mmcore.experiments.annotations import Annotations, tagged
    from mmcore.jobs import jobtable
    store = JobStore()
    first, second = ended(store, "a"), ended(store, "b")
    assert Annotations.peek_tags(store.path) == {}
    with sqlite3.connect(store.path) as conn:
        assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'run_annotations'").fetchone()
    api.annotate(first, tags="baseline,lr")
    api.annotate(second, tags="x")
    api.annotate(second, tags="")
    assert Annotations.peek_tags(store.path) == {first: ["baseline", "lr"]}
    assert (tagged("1 — a", ["baseline", "lr"]), tagged("2 — b", [])) == ("1 — a [baseline, lr]", "2 — b")
    columns = ["id", "name", "tags"]
    assert jobtable.shown_columns([{"id": 1, "tags": ""}], columns) == ["id", "name"]
    assert jobtable.shown_columns([{"id": 1, "tags": ""}, {"id": 2, "tags": "lr"}], columns) == columns


def cli(*args, home):
    env = {**os.environ, "MINIMIND_DASHBOARD_HOME": str(home)}
    env.pop(roles.ROLES_ENV, None)
    return subprocess.run([sys.executable, "-m", "mmcore", *args], cwd=ROOT, env=env, capture_output=True, text=True)


def test_two_tiny_real_jobs_runs_json_and_diff_json(home):
    """The issue's check: on a temporary home with tiny jobs, `runs --json` has each job's parameters and final
    loss, and `diff A B --json` lists exactly the parameters that differ."""
    records = home / "records"  # a write root of every job, so readable too
    records.mkdir(parents=True)
    head = (ROOT / "dataset" / "demo" / "pretrain.jsonl").read_text().splitlines()[:24]
    (records / "tiny.jsonl").write_text("\n".join(head) + "\n")
    values = {**demo_preset("pretrain"), "epochs": "1", "max_seq_len": "64", "log_interval": "1", "batch_size": "4",
              "data_path": str(records / "tiny.jsonl"), "save_dir": str(records / "out")}
    a = api.submit("pretrain", {**values, "learning_rate": "1e-3", "save_weight": "runs_a"}, name="runs-a")
    b = api.submit("pretrain", {**values, "learning_rate": "5e-4", "save_weight": "runs_b"}, name="runs-b")
    store = JobStore()
    wait_for(lambda: all(store.get(i).finished for i in (a, b)), timeout=600, interval=1, what="both jobs to end")
    assert [store.get(i).status for i in (a, b)] == ["succeeded", "succeeded"]
    runresults._cache.clear()
    runresults.SummaryStore(store.path).load()  # what the supervisors kept as their jobs ended
    kept = {path for path in runresults._cache if path.endswith(("job-%d/metrics.jsonl" % a, "job-%d/metrics.jsonl" % b))}
    assert len(kept) == 2
    done = cli("runs", "--json", home=home)
    assert done.returncode == 0, done.stderr
    runs = {r["id"]: r for r in json.loads(done.stdout)}
    assert runs[a]["params"]["learning_rate"] == "0.001" and runs[b]["params"]["learning_rate"] == "0.0005"
    assert all(isinstance(runs[i]["results"]["final_loss"], float) for i in (a, b))
    assert all(runs[i]["results"]["tokens"] > 0 for i in (a, b))
    done = cli("diff", str(a), str(b), "--json", home=home)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert set(found["params"]) == {"learning_rate", "save_weight"}
    assert found["data"][0]["files"][0]["sha256"] == found["data"][1]["files"][0]["sha256"]
    assert found["code"][0]["commit"] == found["code"][1]["commit"]
    text = cli("diff", str(a), str(b), home=home)
    assert text.returncode == 0 and "learning_rate" in text.stdout and "hidden_size" not in text.stdout
    bad = cli("diff", str(a), home=home)
    assert bad.returncode == 1 and "Choose 2 to 8 runs" in bad.stderr
