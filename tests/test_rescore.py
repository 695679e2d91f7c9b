"""A second opinion on stored responses (mmcore.runs.rescore): the training rule reproduces the stored
parts exactly, the step means reach `metrics.read`, a trusted function scores, an untrusted one is refused,
and a resumed run's store drops the rescores of the steps it runs again."""
import contextlib
import io
import json

import numpy as np
import pytest
from _rescore_helpers import write_run

from mmcore import api, cli, metrics, rollouts
from mmcore.access import roles
from mmcore.runs import rescore as rescoring
from trainer.rules.records import RolloutWriter


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(rescoring.TRUSTED_FUNCTIONS_ENV, raising=False)
    monkeypatch.delenv(roles.ROLES_ENV, raising=False)


@pytest.mark.parametrize("reasoning", [1, 0])
def test_the_training_rewards_are_reproduced_exactly(tmp_path, reasoning):
    run_dir = write_run(tmp_path / "run", reasoning=reasoning)
    stored = rollouts.read(run_dir)
    assert stored["reward/rule"].nunique() == 2  # right and wrong answers both
    summary = rollouts.rescore(run_dir, "rule")
    assert (summary["name"], summary["responses"], summary["steps"]) == ("rule", len(stored), 3)
    scored = rollouts.read(run_dir)
    np.testing.assert_allclose(scored["rescore/rule"], scored["reward/rule"], atol=1e-6)
    if reasoning:
        rollouts.rescore(run_dir, "format")
        scored = rollouts.read(run_dir)
        np.testing.assert_allclose(scored["rescore/format"], scored["reward/format"], atol=1e-6)
    df = metrics.read(run_dir).set_index("global_step")
    expected = scored.groupby("step")["reward/rule"]
    np.testing.assert_allclose(df["rescore/rule/mean"], expected.mean().to_numpy(), atol=1e-9)
    np.testing.assert_allclose(df["rescore/rule/std"], expected.std().to_numpy(), atol=1e-9)
    assert df["loss"].notna().all()  # the training records are all still there


def test_cli_json_gives_every_response_its_score(tmp_path):
    run_dir = write_run(tmp_path / "run")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["rescore", str(run_dir), "--reward", "rule", "--name", "second", "--json"]) == 0
    report = json.loads(out.getvalue())
    assert report["name"] == "second" and len(report["responses_scored"]) == report["responses"] == 24
    for row in report["responses_scored"]:
        assert abs(row["rescore/second"] - row["reward/rule"]) <= 1e-6
    assert [s["step"] for s in report["per_step"]] == [1, 2, 3]


def test_an_admin_trusted_function_scores_and_others_are_refused(tmp_path, monkeypatch):
    run_dir = write_run(tmp_path / "run")
    before = rollouts.columns(run_dir)
    with pytest.raises(api.Refused, match="not a trusted reward function"):
        api.rescore(run_dir, "py:_rescore_helpers:length_reward")
    with pytest.raises(api.Refused, match="unknown reward"):
        api.rescore(run_dir, "../reward_model")
    with pytest.raises(api.Refused, match="usable rescore name"):
        api.rescore(run_dir, "rule", name="a b")
    assert rollouts.columns(run_dir) == before  # nothing changed
    monkeypatch.setenv(rescoring.TRUSTED_FUNCTIONS_ENV, "_rescore_helpers:length_reward")
    summary = api.rescore(run_dir, "py:_rescore_helpers:length_reward", name="length")
    scored = rollouts.read(run_dir)
    np.testing.assert_allclose(scored["rescore/length"], scored["response"].str.len() / 100, atol=1e-9)
    assert summary["responses"] == len(scored)


def test_a_resumed_store_drops_the_rescores_of_steps_run_again(tmp_path):
    run_dir = write_run(tmp_path / "run")
    rollouts.rescore(run_dir, "rule")
    RolloutWriter(str(run_dir), resume_step=2).close()  # what a run resuming after step 2 does first
    assert list(rescoring.rescores(run_dir)["global_step"]) == [1, 2]


def test_a_folder_without_a_store_is_refused(tmp_path):
    with pytest.raises(api.Refused, match="no rollout store"):
        api.rescore(tmp_path, "rule")
