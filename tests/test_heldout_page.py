"""The Logs page's held-out view (AppTest): training reward against the held-out signals on one chart, the
per-prompt table and a prompt's groups across steps, in English and in Chinese. Records are written by the
trainers' writers (trainer/rules/records.py) and rescored by mmcore.runs.rescore, into real files."""
import json

import pytest
from test_page_records import open_page, recorded_job

from mmcore import rollouts
from mmcore.base import i18n
from mmcore.jobs.jobstore import JobStore
from mmcore.runs import heldout_view, metric_stream, prompt_record
from trainer.rules import records


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


HELD_OUT = [(f"What is {a}+{b}?", str(a + b)) for a, b in ((2, 3), (4, 4), (7, 1), (9, 5), (6, 6))]
RIGHT_AT = {0: 1, 6: 2, 12: 2}  # held-out answers right at each evaluation


def probe(step, row):
    """The greedy held-out answer to `HELD_OUT[row]` recorded at `step`: right for the first RIGHT_AT[step]."""
    question, answer = HELD_OUT[row]
    right = row < RIGHT_AT[step]
    return {"mode": "greedy", "row": row, "prompt": f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n",
            "reference": answer, "response": f"<think>\nstep {step}\n</think>\n<answer>\n{answer if right else 0}\n</answer>",
            "reward": 0.5 + 2.0 * right, "parts": {"format": 0.5, "rule": 2.0 * right}, "accuracy": float(right),
            "length": 12, "truncated": False}


def evaluated_job(store=None):
    """A finished GRPO job of `store` (default: the home's) with held-out evaluations at steps 0, 6 and 12
    (their means and their greedy answers, as the trainer's evaluation records them), rescored by the rule."""
    store = store or JobStore()
    job_id = recorded_job(store)
    run_dir = metric_stream.job_run_dir(store.get(job_id), store.home)
    writer = records.MetricsWriter(str(run_dir), resume_step=12)  # as a resumed run appends
    answers = records.RolloutWriter(str(run_dir), resume_step=12)
    for step in RIGHT_AT:  # a step's record holds its evaluation, as the loop's
        probes = [probe(step, row) for row in range(len(HELD_OUT))]
        answers.write_probes(step, probes)
        trained = {"loss": 0.1, "reward": 0.1 * step, "lr": 1e-7} if step else {}  # evaluation at 0: no training
        writer.write(step, 0, step, {**trained, "eval/reward/mean": sum(p["reward"] for p in probes) / len(probes),
                                     "eval/accuracy": sum(p["accuracy"] for p in probes) / len(probes)}, 0, 0)
    writer.close()
    answers.close()
    rollouts.rescore(run_dir, "format")
    return job_id, run_dir


def test_signals_are_one_long_table_of_every_series(tmp_path):
    _, run_dir = evaluated_job()
    long = heldout_view.signals(metric_stream.read(run_dir))
    assert list(dict.fromkeys(long["signal"])) == ["reward", "eval/reward/mean", "eval/accuracy",
                                                   "rescore/format/mean"]
    assert list(long[long["signal"] == "eval/accuracy"]["global_step"]) == [0, 6, 12]
    assert long["value"].notna().all() and len(long[long["signal"] == "reward"]) == 12


@pytest.mark.parametrize("language", ["en", "zh"])
def test_logs_shows_the_chart_and_the_prompt_table(language):
    job_id, run_dir = evaluated_job()
    at = open_page("logs.py", {"job": str(job_id)})
    if language == "zh":
        at.session_state[i18n.STATE_KEY] = "zh"
        at.run()
    assert not at.exception, at.exception
    headers = [h.value for h in at.subheader]
    with i18n.language(language):
        assert i18n.t("logs.heldout") in headers and i18n.t("logs.prompts") in headers
    # one figure holds the training reward and every held-out signal
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    held = [s for s in specs if "eval/accuracy" in [d.get("name") for d in s["data"]]]
    assert len(held) == 1, "no held-out chart"
    assert [d["name"] for d in held[0]["data"]] == ["reward", "eval/reward/mean", "eval/accuracy",
                                                    "rescore/format/mean"]
    table = next(d for d in at.dataframe if "flag" in d.value.columns)
    with i18n.language(language):
        flags = {i18n.t(f"logs.prompts.flag.{f}") for f in prompt_record.FLAGS}
    assert len(table.value) == 2 and set(table.value["flag"]) <= flags
    assert list(table.value.columns[:2]) == ["prompt_id", "prompt"]  # what a prompt is, first


def test_the_figure_draws_each_signal_and_marks_every_evaluation():
    _, run_dir = evaluated_job()
    fig = heldout_view.figure(metric_stream.read(run_dir))
    by_name = {trace.name: trace for trace in fig.data}
    assert list(by_name) == ["reward", "eval/reward/mean", "eval/accuracy", "rescore/format/mean"]
    assert list(by_name["eval/accuracy"].x) == [0, 6, 12] and list(by_name["eval/accuracy"].y) == [0.2, 0.4, 0.4]
    assert by_name["reward"].line.dash == "solid" and by_name["reward"].mode == "lines"
    assert all(by_name[n].mode == "lines+markers" and by_name[n].line.dash == "dash" for n in list(by_name)[1:])
    assert len(by_name["reward"].x) == 12


def test_prompt_rows_keep_the_order_and_word_the_flags(tmp_path):
    _, run_dir = evaluated_job()
    table = prompt_record.prompts(run_dir)
    with i18n.language("zh"):
        shown = heldout_view.prompt_rows(table)
        assert list(shown["flag"]) == [i18n.t(f"logs.prompts.flag.{f}") for f in table["flag"]]
    assert list(shown.columns) == list(heldout_view.PROMPT_COLUMNS)
    assert list(shown["prompt_id"]) == list(table["prompt_id"])
    assert all("\n" not in p and len(p) <= heldout_view.PROMPT_SHOWN_CHARS for p in shown["prompt"])
    assert shown["prompt"].iloc[0].endswith("<|im_start|>assistant")
