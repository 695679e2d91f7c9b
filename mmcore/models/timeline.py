"""The held-out prompts across a run's checkpoints (Models -> Compare): the same prompts, the answer of
every checkpoint the run saved side by side, with each checkpoint's training and held-out scores.

- `run_checkpoints(entries)`: {job id: [entries]} of the runs that saved weights one can chat with, each
  run's checkpoints one per step, oldest first (a step snapshot and the weight file of the same step are
  the same weights: the snapshot, a stable file, is kept);
- `held_out_prompts(run_dir)`: the prompts the run evaluated during training (`--eval_data` /
  `--eval_holdout`): those of its recorded held-out answers (`rollout_store.probes`), else the rows of its
  held-out file as written down in `eval_split.json`;
- `recorded_answers(run_dir)`: the greedy answers recorded during training, by (step, row);
- `missing(checkpoints, prompts, recorded)`: the checkpoints whose step has no recorded answers: only they
  are run (in the chat worker, by the act `model_acts.compare`: never here, never torch in a page);
- `plan(store, job_id, checkpoints)`: all of the above for one run, and the settings of the missing answers;
- `timeline(...)`: the rows shown (one per prompt, an answer per checkpoint) and the scores per checkpoint:
  the training reward logged at its step, and the held-out mean reward and accuracy of its answers.
"""
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mmcore.models import modelsview
from mmcore.runs import metric_stream, rollout_store
from trainer.rules import specs
from trainer.rules.records import EVAL_SPLIT_FILE
from trainer.rules.reward_rules import prompt_messages

RECORDED, GENERATED = "recorded", "generated"
#: The most held-out prompts shown (each checkpoint without recorded answers answers all of them).
PROMPTS_SHOWN = 16
#: The answer length of a run whose type has no `max_gen_len` (its checkpoints answer an SFT-style file).
MAX_NEW_TOKENS = 256


@dataclass(frozen=True)
class Checkpoint:
    """One saved checkpoint of a run: its weight file and the optimizer step it was saved at."""
    label: str
    weight: str
    step: int | None
    tokenizer_path: str | None = None
    train_type: str | None = None

    def target(self):
        """The chat worker's target for it (what `model_acts.compare` runs)."""
        return modelsview.ChatTarget(self.label, self.weight, None, self.tokenizer_path, self.train_type)


def run_checkpoints(entries):
    """{job id: [Checkpoint]} of every run that saved chattable weights, newest run first; each run's
    checkpoints one per step (None, a step unknown, last), in step order."""
    by_job = {}
    for e in entries:
        if e.job_id is None or not e.chattable:
            continue
        by_step = by_job.setdefault(e.job_id, {})
        kept = by_step.get(e.step)
        if kept is None or (e.kind == "snapshot" and kept.kind != "snapshot"):
            by_step[e.step] = e
    return {job: [Checkpoint(e.label, e.path, e.step, e.tokenizer_path, e.train_type)
                  for _, e in sorted(steps.items(), key=lambda item: (item[0] is None, item[0] or 0))]
            for job, steps in sorted(by_job.items(), reverse=True)}


def held_out_prompts(run_dir, limit=PROMPTS_SHOWN):
    """[{"row", "messages", "reference"}] of the run's held-out prompts, at most `limit`: those of its
    recorded greedy answers (the first evaluation's rows), else the first rows of the held-out file its
    `eval_split.json` names; [] for a run without held-out evaluation."""
    probes = _probes(run_dir)
    if len(probes):
        greedy = probes[probes["mode"] == "greedy"]
        first = greedy[greedy["step"] == greedy["step"].min()].sort_values("row").head(limit)
        return [{"row": int(r["row"]), "messages": prompt_messages(r["prompt"]), "reference": r["reference"]}
                for _, r in first.iterrows()]
    split = Path(run_dir) / EVAL_SPLIT_FILE
    try:
        written = json.loads(split.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if written.get("source") == "file" and written.get("eval_data"):
        try:
            rows = modelsview.load_prompts(written["eval_data"], limit)
        except (OSError, ValueError):
            return []
        return [{"row": i, **p} for i, p in enumerate(rows)]
    return []


def _probes(run_dir):
    try:
        return rollout_store.probes(run_dir, mode="greedy")
    except rollout_store.NoRollouts:
        return pd.DataFrame(columns=list(rollout_store.PROBE_COLUMNS))


def recorded_answers(run_dir):
    """{(step, row): {"text", "reward", "accuracy", "tokens"}} of the greedy held-out answers recorded
    during training."""
    probes = _probes(run_dir)
    return {(int(r["step"]), int(r["row"])): {"text": r["response"], "reward": _number(r["reward"]),
                                              "accuracy": _number(r["accuracy"]), "tokens": _number(r["length"])}
            for _, r in probes.iterrows()}


def _number(value):
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if value != value else value  # NaN: not recorded


def missing(checkpoints, prompts, recorded):
    """The checkpoints some of whose answers to `prompts` were not recorded at their step: those to run."""
    return [c for c in checkpoints
            if c.step is None or any((c.step, p["row"]) not in recorded for p in prompts)]


def generation_settings(run_dir, job=None):
    """How the missing answers are made: greedy, as the training's held-out evaluation answers, with the
    run's reasoning format (its rollout store's) and its answer length (`max_gen_len` of `job`, else the
    trainer's default for its type)."""
    try:
        meta = rollout_store.meta(run_dir)
    except rollout_store.NoRollouts:
        meta = {}
    longest = None
    if job is not None:
        try:
            longest = int((job.params or {}).get("max_gen_len")
                          or specs.SPECS[job.train_type].defaults().get("max_gen_len"))
        except (KeyError, TypeError, ValueError):
            longest = None
    return {"temperature": 0.0, "top_p": 1.0, "max_new_tokens": longest or MAX_NEW_TOKENS, "seed": 0,
            "reasoning": bool(meta.get("reasoning", True)), "system": None, "reward_model_path": None}


@dataclass(frozen=True)
class Plan:
    """What the timeline of one run shows and what it still has to run."""
    run_dir: Path
    checkpoints: list
    prompts: list
    recorded: dict
    to_run: list  # the checkpoints without recorded answers
    settings: dict


def plan(store, job_id, checkpoints):
    """The timeline's `Plan` for job `job_id` of `store` and its `checkpoints` (`run_checkpoints`)."""
    job = store.get(int(job_id))
    run_dir = metric_stream.job_run_dir(job, store.home)
    prompts = held_out_prompts(run_dir)
    recorded = recorded_answers(run_dir)
    return Plan(run_dir, list(checkpoints), prompts, recorded, missing(checkpoints, prompts, recorded),
                generation_settings(run_dir, job))


def generated_answers(rows, checkpoints, prompts):
    """{(label, row): answer} of `model_acts.compare`'s rows (one per prompt, in `prompts` order)."""
    found = {}
    for prompt, row in zip(prompts, rows):
        for c in checkpoints:
            answer = row["answers"].get(c.label)
            if answer is None:
                continue
            rewards = answer.get("rewards") or {}
            found[(c.label, prompt["row"])] = {
                "text": answer["text"], "reward": rewards.get("total"),
                "accuracy": rewards.get("correct", rewards.get("rule")), "tokens": answer.get("tokens")}
    return found


def _training_reward(metrics, step):
    """The training reward logged at `step` (the last one logged at or before it), or None."""
    if step is None or "reward" not in metrics.columns:
        return None
    logged = metrics[(metrics["global_step"] <= step) & metrics["reward"].notna()]
    return float(logged["reward"].iloc[-1]) if len(logged) else None


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def timeline(run_dir, checkpoints, prompts, recorded, generated=None):
    """(rows, scores) of the checkpoints' answers to `prompts`. rows: one per prompt, {"row", "prompt",
    "reference", "answers": {label: {"text", "reward", "accuracy", "tokens", "source"}}} (a checkpoint
    neither recorded nor generated is left out); scores: one per checkpoint, {"checkpoint", "step",
    "training_reward", "held_out_reward", "held_out_accuracy", "answers", "source"}."""
    generated = generated or {}
    try:
        metrics = metric_stream.read(run_dir)
    except (OSError, ValueError):
        metrics = None
    rows = []
    for p in prompts:
        answers = {}
        for c in checkpoints:
            if c.step is not None and (c.step, p["row"]) in recorded:
                answers[c.label] = {**recorded[(c.step, p["row"])], "source": RECORDED}
            elif (c.label, p["row"]) in generated:
                answers[c.label] = {**generated[(c.label, p["row"])], "source": GENERATED}
        rows.append({"row": p["row"], "prompt": p["messages"][-1]["content"] if p["messages"] else "",
                     "reference": p["reference"], "answers": answers})
    scores = []
    for c in checkpoints:
        mine = [r["answers"][c.label] for r in rows if c.label in r["answers"]]
        sources = sorted({a["source"] for a in mine})
        scores.append({
            "checkpoint": c.label, "step": c.step,
            "training_reward": _training_reward(metrics, c.step) if metrics is not None and len(metrics) else None,
            "held_out_reward": _mean([a["reward"] for a in mine]),
            "held_out_accuracy": _mean([a["accuracy"] for a in mine]),
            "answers": len(mine), "source": "+".join(sources)})
    return rows, scores
