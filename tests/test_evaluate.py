"""Evaluation: a real job (supervisor + mmcore/workers/eval_worker.py) answers the demo prompts with the demo checkpoints,
stores every answer with the training rewards (or the reward model chosen on the page) and each
checkpoint's summary in SQLite, and the Models page shows the results and the answers."""

import pytest
from _models_helpers import only_default_write_roots  # noqa: F401  (fixture)
from _pages_helpers import open_page, wait_for
from _reward_models import classifier_reward_model  # noqa: F401  (fixture)
from _trainer_helpers import DEMO

from mmcore.jobs.jobstore import JobStore
from mmcore.models import catalogue, eval_jobs, modelsview
from mmcore.models.evalstore import summarise

pytestmark = [pytest.mark.timeout(900), pytest.mark.usefixtures("only_default_write_roots")]


def test_summarise_hand_checked_scores():
    scored = [{"rewards": {"total": 2.5, "format": 1.5, "rule": 1.0}, "length": 10},
              {"rewards": {"total": 0.75, "format": 0.75, "rule": 0.0}, "length": 20},
              {"rewards": {"total": 1.5, "format": 1.5, "rule": 0.0}, "length": 30},
              {"rewards": {"total": 1.0, "format": 0.0, "rule": 1.0}, "length": 40}]
    assert summarise(scored) == {"n": 4, "accuracy": 0.5, "format_rate": 0.5, "mean_reward": 1.4375,
                                 "mean_length": 25.0}
    plain = [{"rewards": {"total": 1.0, "format": None, "rule": 1.0}, "length": 3}]
    assert summarise(plain)["format_rate"] is None
    # Scored by a reward model (no rule part): accuracy still counts the answers that match the reference.
    by_model = [{"rewards": {"total": 2.1, "format": 1.5, "rule": None, "reward_model": 0.6, "correct": c},
                 "length": 5} for c in (1.0, 0.0, 0.0, 0.0)]
    assert summarise(by_model)["accuracy"] == 0.25 and summarise(by_model)["mean_reward"] == pytest.approx(2.1)


def test_eval_chart_follows_the_step_per_run():
    results = [{"step": 20, "accuracy": 0.5, "run_job_id": 1, "label": "a"},
               {"step": 10, "accuracy": 0.25, "run_job_id": 1, "label": "b"},
               {"step": None, "accuracy": 1.0, "run_job_id": None, "label": "c"},
               {"step": 10, "accuracy": 0.75, "run_job_id": 2, "label": "d"}]
    assert modelsview.eval_chart_data(results, "accuracy") == [
        {"step": 10, "accuracy": 0.25, "run": "job 1"}, {"step": 20, "accuracy": 0.5, "run": "job 1"},
        {"step": 10, "accuracy": 0.75, "run": "job 2"}]


def test_evaluation_job_scores_every_answer_and_the_page_shows_them(demo_models):
    from mmcore.workers.chat_engine import score_reply

    store = JobStore()
    entries = catalogue.scan(store)
    targets = modelsview.chat_targets(entries)
    chosen = [targets[str(demo_models / "out" / name)] for name in ("grpo_64.pth", "reason_64.pth")]
    settings = {"temperature": 0.0, "top_p": 1.0, "max_new_tokens": 10, "seed": 0, "reasoning": True,
                "system": None, "max_samples": 3}
    job_id, eval_id = eval_jobs.launch(store, chosen, entries, DEMO / "rlaif.jsonl", settings)
    job = wait_for(lambda: (j := store.get(job_id)).finished and j, timeout=600, what="the evaluation job")
    log = open(job.log_path, encoding="utf-8").read()
    assert job.status == "succeeded", log
    assert "Result: " in log

    evals = eval_jobs.eval_store_for(store)
    results = evals.results([eval_id])
    assert sorted(r["weight"] for r in results) == sorted(t.weight for t in chosen)
    for r in results:
        answers = evals.answers(eval_id, r["weight"])
        assert [a["prompt"] for a in answers] == ["6-3=?", "7+1等于几？", "3-1=?"]
        assert [a["reference"] for a in answers] == ["3", "8", "2"]
        for a in answers:  # each stored score is what the training reward gives that answer
            s = score_reply("", a["answer"], a["reference"], True)
            assert (a["reward"], a["format"], a["rule"]) == (s["total"], s["format"], s["rule"])
        expected = summarise([{"rewards": {"total": a["reward"], "format": a["format"], "rule": a["rule"]},
                               "length": a["length"]} for a in answers])
        assert {k: r[k] for k in expected} == expected and r["run_job_id"] is not None

    at = open_page("pages/models.py")
    at.radio(key="models.section").set_value("Evaluate").run()
    assert not at.exception, at.exception
    table = at.dataframe[0].value
    ours = table[table["Eval"] == eval_id]
    assert len(ours) == 2 and set(ours["Prompts"]) == {3}
    at.selectbox(key="models.eval.browse").set_value(eval_id).run()
    shown = [t.value for t in at.text]
    assert "1. 6-3=?" in shown and "3. 3-1=?" in shown


def test_evaluation_from_the_page_scores_with_the_chosen_reward_model(demo_models, classifier_reward_model):
    """Evaluate on the page with a reward-model folder: every stored reward is what that model gives."""
    import re

    from mmcore.workers.chat_engine import build_prompt, score_reply
    from model.weights import load_tokenizer
    from trainer.rl.reward_model import RewardModel

    at = open_page("pages/models.py")
    at.radio(key="models.section").set_value("Evaluate").run()
    grpo = str(demo_models / "out" / "grpo_64.pth")
    at.multiselect(key="models.eval.targets").set_value([grpo])
    at.number_input(key="models.eval.count").set_value(2)
    at.number_input(key="models.eval.max_new_tokens").set_value(10)
    at.text_input(key="models.eval.reward_model").set_value(str(classifier_reward_model)).run()
    next(b for b in at.button if b.label == "Launch evaluation").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    eval_id, job_id = map(int, re.search(r"Evaluation (\d+) queued as job (\d+)", at.success[0].value).groups())
    assert [e.proto.query_string for e in at.get("page_link") if e.proto.label == f"Open job {job_id} on Jobs"] == \
        [f"job={job_id}"]
    store = JobStore()
    job = wait_for(lambda: (j := store.get(job_id)).finished and j, timeout=600, what="the evaluation job")
    assert job.status == "succeeded", open(job.log_path, encoding="utf-8").read()

    reward_model, tokenizer = RewardModel(str(classifier_reward_model)), load_tokenizer()
    answers = eval_jobs.eval_store_for(store).answers(eval_id, grpo)
    prompts = modelsview.load_prompts(DEMO / "rlaif.jsonl", 2)
    assert [a["prompt"] for a in answers] == [p["messages"][-1]["content"] for p in prompts]
    for a, p in zip(answers, prompts):
        expected = score_reply(build_prompt(tokenizer, p["messages"], None, True), a["answer"], p["reference"], True,
                               reward_model)
        assert expected["rule"] is None and expected["reward_model"] is not None
        assert (a["reward"], a["format"]) == pytest.approx((expected["total"], expected["format"]), abs=1e-5)
        # each answer keeps the reward model's score and whether it matches the reference
        assert a["reward_model"] == pytest.approx(expected["reward_model"], abs=1e-5)
        assert a["correct"] == expected["correct"]
        assert ("matches the reference" if a["correct"] else "differs from the reference") in modelsview.score_text(a)
    assert len({round(a["reward"], 5) for a in answers}) == 2  # a classifier's scores differ from answer to answer
    # Accuracy is still against the references (what the rule reward checks), though it is not in the reward.
    [result] = eval_jobs.eval_store_for(store).results([eval_id])
    correct = [score_reply("", a["answer"], a["reference"], True)["rule"] for a in answers]
    assert result["accuracy"] == pytest.approx(sum(correct) / len(correct))
    assert [a["correct"] for a in answers] == correct


def test_an_older_evaluation_store_gains_the_new_answer_columns(tmp_path):
    import sqlite3

    from mmcore.models.evalstore import EvalStore
    path = tmp_path / "evals.db"
    with sqlite3.connect(path) as conn:  # eval_answers as first released: no reward_model, no correct
        conn.execute("CREATE TABLE eval_answers (eval_id INTEGER NOT NULL, weight TEXT NOT NULL, idx INTEGER NOT NULL,"
                     " prompt TEXT NOT NULL, reference TEXT, answer TEXT NOT NULL, reward REAL, format REAL, rule REAL,"
                     " length INTEGER NOT NULL, PRIMARY KEY (eval_id, weight, idx))")
        conn.execute("INSERT INTO eval_answers VALUES (1, 'w.pth', 0, 'p', 'r', 'a', 1.0, 0.5, 0.5, 3)")
    evals = EvalStore(path)
    [old] = evals.answers(1, "w.pth")
    assert old["answer"] == "a" and old["reward_model"] is None and old["correct"] is None
    evals.add_answer(1, "w.pth", 1, "p2", "8", "8", {"total": 2.0, "format": 0.0, "reward_model": 2.0,
                                                     "correct": 1.0}, 1)
    assert [(a["reward_model"], a["correct"]) for a in evals.answers(1, "w.pth")] == [(None, None), (2.0, 1.0)]
