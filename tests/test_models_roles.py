"""The Models page's acts and roles (mmcore.actions.model_acts): a viewer may not chat, compare, evaluate or
export (nothing runs, nothing is written, nothing is recorded); a member may, as itself, and each act
lands in the audit trail; `python -m mmcore export --user U` applies the same rule."""
import subprocess
import sys

import pytest
from _runner_helpers import home_with_roles, wait_for
from _trainer_helpers import DEMO

from mmcore.access import audit, roles
from mmcore.actions import model_acts
from mmcore.base.paths import ROOT
from mmcore.jobs.jobstore import JobStore
from mmcore.models import eval_jobs, modelsview

pytestmark = pytest.mark.timeout(600)
PROMPTS = [{"messages": [{"role": "user", "content": "6-3=?"}], "reference": "3"}]
SETTINGS = {"temperature": 0.0, "top_p": 1.0, "max_new_tokens": 4, "seed": 0, "reasoning": True, "system": None}


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A dashboard home whose roles file makes vera a viewer and mia a member."""
    return home_with_roles(tmp_path, monkeypatch, vera="viewer", mia="member")


@pytest.fixture
def target(tmp_path):
    weight = tmp_path / "full_sft_64.pth"
    weight.write_bytes(b"not a state dict")
    return modelsview.ChatTarget(str(weight), str(weight), None, None, "sft")


def test_only_members_and_admins_may_run_or_export_models(home):
    for action in roles.MODEL_ACTIONS:
        assert model_acts.refusal("vera", action).startswith("vera is a viewer and may not")
        assert model_acts.refusal("someone else", action).startswith("someone else is a viewer")
        assert model_acts.refusal("mia", action) is None
    assert model_acts.role("vera") == "viewer" and model_acts.role("mia") == "member"


def test_a_viewer_runs_nothing_writes_nothing_and_leaves_no_record(home, target, tmp_path):
    store = JobStore()
    out = tmp_path / "exported"
    for outcome, says in ((model_acts.chat("vera", target, home), "vera is a viewer and may not chat"),
                          (model_acts.compare("vera", [target, target], PROMPTS, SETTINGS, home), "may not compare"),
                          (model_acts.evaluate(store, "vera", [target], [], DEMO / "rlaif.jsonl", SETTINGS),
                           "may not evaluate"),
                          (model_acts.export("vera", target.weight, out, home), "may not export")):
        assert outcome.refused and not outcome.done and outcome.value is None
        assert says in outcome.message and outcome.reasons == (outcome.message,)
    assert not out.exists()
    assert store.list() == [] and eval_jobs.eval_store_for(store).results() == []
    assert audit.entries(home=home) == []


def test_a_members_actions_are_its_own_and_audited(home, target):
    store = JobStore()
    assert model_acts.chat("mia", target, home).done
    job_id, eval_id = model_acts.evaluate(store, "mia", [target], [], DEMO / "rlaif.jsonl", SETTINGS).value
    assert store.get(job_id).user == "mia"  # the member owns the evaluation job: it may stop or delete it
    entries = audit.entries(home=home)
    assert [(e.user, e.action, e.job_id) for e in entries] == [("mia", "evaluate", job_id), ("mia", "chat", None)]
    assert entries[0].detail["result"] == {"job": job_id, "eval_id": eval_id}
    assert entries[1].detail == {"entry": "page", "request": {"weight": target.weight, "lora": None},
                                 "result": {"allowed": True}}
    # The weight file is not a state dict: the job fails, with the reason in its log.
    job = wait_for(lambda: (j := store.get(job_id)).finished and j, timeout=300, what="the evaluation job")
    assert job.status == "failed"


def test_cli_export_checks_the_role_and_records_the_export(home, target, tmp_path):
    out = tmp_path / "exported"
    command = [sys.executable, "-m", "mmcore", "export", target.weight, str(out), "--user"]
    refused = subprocess.run(command + ["vera"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and "vera is a viewer and may not export models" in refused.stderr
    assert not out.exists() and audit.entries(home=home) == []

    ran = subprocess.run(command + ["mia"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 2 and "not" in ran.stderr, ran.stderr  # it ran: the file is no MiniMind state dict
    [entry] = audit.entries(home=home)
    assert (entry.user, entry.action, entry.detail["entry"], entry.detail["result"]) == ("mia", "export", "cli",
                                                                                          {"exit_code": 2})
    assert entry.detail["request"]["weight"] == target.weight and not out.exists()
