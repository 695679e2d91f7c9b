"""Rescore as a queued job and with a reward-model folder (mmcore.runs.rescore, mmcore.models.rescore_job,
mmcore.workers.rescore_worker): a tiny reward model built here scores every stored response as the trainers'
reward-model code scores it, in a child process (the caller never loads torch); the Logs page and
`python -m mmcore rescore --queue` queue a small-lane job that the real scheduler runs, whose progress
reaches its row on Jobs and whose scores land where every rescore writes them; bad input is refused before
anything is queued or written."""
import contextlib
import io
import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
from _pages_helpers import open_page, texts, wait_for
from _rescore_helpers import write_run
from _reward_models import classifier_reward_model  # noqa: F401  (fixture)
from test_page_records import recorded_job

from mmcore import api, cli, metrics, rollouts
from mmcore.access import audit, roles
from mmcore.base.paths import ROOT
from mmcore.jobs import progress as job_progress
from mmcore.jobs.jobstore import JobStore
from mmcore.models import rescore_job
from mmcore.runs import metric_stream
from mmcore.runs import rescore as rescoring
from trainer.rules import roots

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(rescoring.TRUSTED_FUNCTIONS_ENV, raising=False)
    monkeypatch.delenv(roles.ROLES_ENV, raising=False)
    return tmp_path / "home"


def trainers_scores(folder, run_dir, reasoning):
    """Each stored response scored by the trainers' own reward-model code, in this (test) process."""
    from trainer.rl.reward_model import load_reward_model
    from trainer.rl.rewards import reward_model_scores
    stored = rollouts.read(run_dir)
    return stored, reward_model_scores(load_reward_model(str(folder), "cpu"), list(stored["prompt"]),
                                       list(stored["response"]), reasoning)


def test_a_reward_model_folder_scores_as_the_trainers_do_and_the_caller_never_loads_torch(
        tmp_path, classifier_reward_model):
    run_dir = write_run(tmp_path / "home" / "records" / "run", reasoning=1)
    # The stable function, called from a process of the dashboard's kind: the folder is scored in a child.
    code = ("import json, sys; from mmcore import rollouts; told = []; "
            f"s = rollouts.rescore({str(run_dir)!r}, {str(classifier_reward_model)!r}, name='rm', "
            "progress=lambda done, total: told.append([done, total])); "
            "print(json.dumps({'summary': s, 'told': told, 'torch': 'torch' in sys.modules, "
            "'transformers': 'transformers' in sys.modules}))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not found["torch"] and not found["transformers"]
    assert found["summary"]["name"] == "rm" and found["summary"]["responses"] == 24 == found["told"][-1][0]
    stored, expected = trainers_scores(classifier_reward_model, run_dir, reasoning=True)
    scores = stored["rescore/rm"].to_numpy(dtype=float)
    assert np.isfinite(scores).all() and len(set(np.round(scores, 6))) > 1  # each response its own score
    np.testing.assert_allclose(scores, expected, atol=1e-5)
    df = metrics.read(run_dir).set_index("global_step")
    np.testing.assert_allclose(df["rescore/rm/mean"], stored.groupby("step")["rescore/rm"].mean().to_numpy(),
                               atol=1e-9)


def test_the_logs_page_queues_a_rescore_job_whose_progress_and_scores_show(home, classifier_reward_model):
    store = JobStore()
    run_job = recorded_job(store)
    run_dir = metric_stream.job_run_dir(store.get(run_job), store.home)
    at = open_page("pages/logs.py", query={"job": str(run_job)})
    assert not at.exception, at.exception
    at.selectbox(key="logs.rescore.reward").set_value("model").run()
    at.text_input(key="logs.rescore.folder").set_value(str(classifier_reward_model)).run()
    at.text_input(key="logs.rescore.name").set_value("second").run()
    at.button(key="logs.rescore.go").click().run()
    assert not at.exception, at.exception
    assert at.success, (texts(at.error), texts(at.warning))
    job_id = int(re.search(r"queued as job (\d+)", at.success[0].value).group(1))
    (link,) = [e.proto for e in at.get("page_link") if e.proto.label == f"Open job {job_id} on Jobs"]
    assert link.page.endswith("jobs") and link.query_string == f"job={job_id}"
    queued = store.get(job_id)
    assert queued.train_type == rescore_job.JOB_TYPE and queued.resources == {"lane": "small"}
    assert queued.params["reward"] == str(classifier_reward_model.resolve())
    job = wait_for(lambda: (j := store.get(job_id)).finished and j, timeout=500, what="the rescore job")
    log = open(job.log_path, encoding="utf-8").read()
    assert job.status == "succeeded", log
    stored = rollouts.read(run_dir)
    assert len(stored) == 48 and stored["rescore/second"].map(math.isfinite).all()
    assert "rescore/second/mean" in metrics.read(run_dir).columns
    done = job_progress.final_progress(job)  # what the Jobs table shows of it
    assert (done.step, done.total, done.percent) == (48, 48, 100.0), log
    [row] = [e for e in audit.entries(limit=5, home=store.home) if e.action == "rescore"]
    assert (row.user, row.detail["entry"], row.detail["result"]) == (roles.os_user(), "page",
                                                                      {"job": job_id, "name": "second"})


def test_cli_queue_prints_the_job_and_the_job_reproduces_the_stored_rule_part(home, tmp_path):
    run_dir = write_run(home / "records" / "run")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["rescore", str(run_dir), "--reward", "rule", "--name", "queued", "--queue", "--json"]) == 0
    job_id = json.loads(out.getvalue())["job"]
    store = JobStore()
    job = wait_for(lambda: (j := store.get(job_id)).finished and j, timeout=300, what="the rescore job")
    assert job.status == "succeeded", open(job.log_path, encoding="utf-8").read()
    scored = rollouts.read(run_dir)
    np.testing.assert_allclose(scored["rescore/queued"], scored["reward/rule"], atol=1e-6)


def test_bad_input_is_refused_before_anything_is_queued_or_written(home, tmp_path, monkeypatch):
    run_dir = write_run(home / "records" / "run")
    store = JobStore()
    before = rollouts.columns(run_dir)
    no_config = tmp_path / "not_a_model"
    no_config.mkdir()
    with pytest.raises(api.Refused, match="has no config.json"):
        api.rescore(run_dir, str(no_config), wait=False)
    with pytest.raises(api.Refused, match="unknown reward"):
        api.rescore(run_dir, str(tmp_path / "missing"), wait=False)
    with pytest.raises(api.Refused, match="not a trusted reward function"):
        api.rescore(run_dir, "py:_rescore_helpers:length_reward", wait=False)
    with pytest.raises(api.Refused, match="usable rescore name"):
        api.rescore(run_dir, "rule", name="a b", wait=False)
    with pytest.raises(api.Refused, match="no rollout store"):
        api.rescore(tmp_path, "rule", wait=False)
    monkeypatch.setenv(roots.WRITE_ENV, str(home / "records"))
    outside = write_run(tmp_path / "elsewhere")
    for wait in (True, False):
        with pytest.raises(api.Refused, match="outside"):
            api.rescore(outside, "rule", wait=wait)
    monkeypatch.setenv(roots.READ_ENV, str(ROOT / "dataset"))
    (no_config / "config.json").write_text("{}")
    with pytest.raises(api.Refused, match="outside"):
        api.rescore(run_dir, str(no_config), wait=False)
    assert store.list(limit=None) == [] and rollouts.columns(run_dir) == before
    assert "rescore/rule" not in rollouts.columns(outside)
    assert not [e for e in audit.entries(limit=None, home=store.home) if e.action == "rescore"]
