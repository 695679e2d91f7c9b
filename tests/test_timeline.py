"""The held-out prompts across a run's checkpoints (Models -> Compare, mmcore.models.timeline): a tiny real
GRPO run with held-out evaluation at steps 0, 3 and 4 that keeps step snapshots at steps 2 and 4. The step-4
checkpoint shows the answers recorded during training (no model run); the step-2 one, saved between
evaluations, answers in the real chat worker through the act `model_acts.compare`, greedy, and its answers
are the worker's own."""
import os
import signal
import time

import pytest
from _models_helpers import only_default_write_roots  # noqa: F401  (fixture)
from _pages_helpers import open_page, wait_for
from _trainer_helpers import DEMO, head_jsonl, make_repo_copy, proc_output, run_trainer, save_random_weights, tiny_args
from test_rl_trainers import RL_TINY

from mmcore import metrics, rollouts
from mmcore.access import audit
from mmcore.base import i18n
from mmcore.base.paths import TRAINER_DIR
from mmcore.jobs.jobstore import JobStore
from mmcore.models import catalogue, chat_client, timeline

pytestmark = [pytest.mark.timeout(900), pytest.mark.usefixtures("only_default_write_roots")]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The run's repository copy, records folder and (start, end) times."""
    root = make_repo_copy(tmp_path_factory.mktemp("timeline"))
    save_random_weights(root / "base", "reason", seed=3)
    head_jsonl(DEMO / "rlaif.jsonl", root / "data" / "rlaif.jsonl", 8)
    lines = (DEMO / "rlaif.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (root / "data" / "held.jsonl").write_text("".join(lines[-3:]), encoding="utf-8")
    run_dir = root / "records"
    started = time.time()
    proc = run_trainer(root, "train_grpo.py", tiny_args(**{
        **RL_TINY, "data_path": root / "data" / "rlaif.jsonl", "weight_dir": "../base", "num_generations": 2,
        "save_dir": root / "out", "save_weight": "grpo_tl", "run_dir": run_dir,
        "eval_data": root / "data" / "held.jsonl",
        "eval_interval": 3, "eval_rows": 3, "save_interval": 2, "keep_checkpoints": 5, "max_gen_len": 12}))
    assert proc.returncode == 0, proc_output(proc)
    yield root, run_dir, (started, time.time())
    info = chat_client.status()
    if info:
        os.kill(info["pid"], signal.SIGTERM)
        wait_for(lambda: not chat_client.worker_running(), timeout=60, what="the chat worker to stop")


def job_of(trained):
    """The run as a finished job in this test's store, so the catalogue attributes its weights."""
    root, run_dir, (started, ended) = trained
    store = JobStore()
    job_id = store.create("grpo", "timeline", {"save_dir": str(root / "out"), "save_weight": "grpo_tl",
                                               "hidden_size": "64", "num_hidden_layers": "2", "max_gen_len": "12"},
                          ["python", "train_grpo.py", "--run_dir", str(run_dir)], str(TRAINER_DIR), {})
    store.update(job_id, status="succeeded", started_at=started, ended_at=ended, exit_code=0)
    return store, job_id


def test_recorded_answers_are_shown_and_only_the_missing_checkpoints_answer(trained, tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    store, job_id = job_of(trained)
    checkpoints = timeline.run_checkpoints(catalogue.scan(store))[job_id]
    assert [c.step for c in checkpoints] == [2, 4]  # grpo_tl_64.pth is the step-4 snapshot's weights: once
    plan = timeline.plan(store, job_id, checkpoints)
    assert [p["reference"] for p in plan.prompts] == [
        rollouts.probes(plan.run_dir, step=0, mode="greedy")["reference"].iloc[i] for i in range(3)]
    assert [c.step for c in plan.to_run] == [2] and plan.settings["max_new_tokens"] == 12
    # Before anything runs: the step-4 answers are those recorded at step 4, the step-2 ones missing.
    rows, scores = timeline.timeline(plan.run_dir, checkpoints, plan.prompts, plan.recorded)
    step4 = rollouts.probes(plan.run_dir, step=4, mode="greedy").sort_values("row")
    assert [r["answers"][checkpoints[1].label]["text"] for r in rows] == list(step4["response"])
    assert all(checkpoints[0].label not in r["answers"] for r in rows)
    by_step = {s["step"]: s for s in scores}
    assert by_step[4]["held_out_reward"] == pytest.approx(step4["reward"].mean())
    assert by_step[4]["source"] == "recorded" and by_step[2]["answers"] == 0
    trained_reward = metrics.read(plan.run_dir).set_index("global_step")["reward"]
    assert by_step[2]["training_reward"] == pytest.approx(trained_reward[2])
    assert by_step[4]["training_reward"] == pytest.approx(trained_reward[4])


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_compare_section_shows_the_timeline_and_answers_the_missing(trained, tmp_path, monkeypatch, language):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    store, job_id = job_of(trained)
    with i18n.language(language):
        at = open_page("pages/models.py", state={i18n.STATE_KEY: language})
        at.radio(key="models.section").set_value("Compare").run()
        at.radio(key="models.compare.how").set_value("A run's checkpoints").run()
        at.selectbox(key="models.timeline.run").set_value(job_id).run()
        assert not at.exception and not at.error, (at.exception, at.error)
        scores = next(d.value for d in at.dataframe if "held_out_reward" in d.value.columns)
        assert list(scores["step"]) == [2, 4] and list(scores["answers"]) == [0, 3]
        go = at.button(key="models.timeline.go")
        assert go.label == i18n.t("models.timeline.answer", n=1)
        go.click().run()
        assert not at.exception and not at.error, (at.exception, at.error)
        scores = next(d.value for d in at.dataframe if "held_out_reward" in d.value.columns)
        assert list(scores["answers"]) == [3, 3]
        assert list(scores["source"]) == [i18n.t("models.timeline.source.generated"),
                                          i18n.t("models.timeline.source.recorded")]
        assert not [b for b in at.button if b.key == "models.timeline.go"]  # nothing left to answer
    plan = timeline.plan(store, job_id, timeline.run_checkpoints(catalogue.scan(store))[job_id])
    generated = at.session_state["models.timeline.generated"][job_id]
    step2 = plan.to_run[0]
    expected = chat_client.reply({**step2.target().payload(), **plan.settings, "messages": plan.prompts[0]["messages"],
                                  "reference": plan.prompts[0]["reference"]})
    assert generated[(step2.label, plan.prompts[0]["row"])]["text"] == expected["text"]
    shown = [t.value for t in at.text]
    assert expected["text"] in shown or any(part and part in shown
                                            for part in chat_client.split_think(expected["text"]))
    assert [e.action for e in audit.entries(home=tmp_path / "home")] == ["compare"]  # the act, recorded once


@pytest.mark.parametrize("language", ["en", "zh"])
def test_an_answers_scores_read_in_the_viewers_language(language):
    from mmcore.models import modelsview
    with i18n.language(language):
        text = modelsview.score_text({"reward": 2.5, "format": 1.5, "rule": 1.0, "reward_model": 0.25, "length": 12.0})
        assert text == " · ".join([i18n.t("models.score.reward", value="2.50"), "format 1.50", "rule 1.00",
                                   i18n.t("models.score.reward_model", value="0.25"),
                                   i18n.t("models.reply_tokens", n="12")])  # a count read back as 12.0 shows 12
    assert ("奖励 2.50" in text) == (language == "zh")
