"""Evaluate checkpoints over prompts with reference answers: accuracy, format rate, mean reward, mean length.

Runs as a dashboard job (`mmcore.models.eval_jobs.launch` writes the evaluation's row in `evals.db` and starts
this script as the job). For each checkpoint it answers every prompt of the RLAIF/SFT file (the last
assistant turn is the reference), scores each answer with the RL trainers' rewards (format reward with
reasoning, plus the rule reward against the reference), and stores every answer and the checkpoint's
summary. Progress goes to stdout, the job's log:

    python -m mmcore.workers.eval_worker --eval_id 3 [--db runs/evals.db]
"""
import argparse
import sys
import time

import torch

from mmcore.models.evalstore import EvalStore, summarise
from mmcore.models.modelsview import load_prompts
from mmcore.workers.chat_engine import build_prompt, score_reply, stream_reply
from model.weights import WeightFileError, load_model, load_tokenizer


def _number(value):
    """A summary figure for the log: "n/a" where it does not apply (the format rate needs reasoning on)."""
    return "n/a" if value is None else f"{value:.3f}"


def evaluate_weight(store, eval_id, spec, prompts, settings, device, index, total, reward_model=None):
    """Answer and score every prompt with one checkpoint; store the answers and its summary."""
    start = time.time()
    model = load_model(spec["weight"], lora=spec.get("lora"), device=device)
    tokenizer = load_tokenizer(spec.get("tokenizer_path"))
    reasoning = bool(settings.get("reasoning", True))
    scored = []
    for i, p in enumerate(prompts):
        prompt = build_prompt(tokenizer, p["messages"], settings.get("system"), reasoning)
        ids = [token for _, token in stream_reply(model, tokenizer, prompt, int(settings.get("max_new_tokens", 256)),
                                                  float(settings.get("temperature", 0.0)),
                                                  float(settings.get("top_p", 1.0)), int(settings.get("seed", 0)))]
        answer = tokenizer.decode(ids, skip_special_tokens=True)
        rewards = score_reply(prompt, answer, p["reference"], reasoning, reward_model)
        scored.append({"rewards": rewards, "length": len(ids)})
        store.add_answer(eval_id, spec["weight"], i, p["messages"][-1]["content"], p["reference"], answer, rewards,
                         len(ids))
        running = summarise(scored)
        print(f"Eval: checkpoint {index}/{total} {spec['label']}, prompt {i + 1}/{len(prompts)}, "
              f"accuracy {_number(running['accuracy'])}, mean reward {_number(running['mean_reward'])}", flush=True)
    summary = summarise(scored)
    store.add_result(eval_id, spec["weight"], spec["label"], spec.get("train_type"), spec.get("run_job_id"),
                     spec.get("step"), summary)
    print(f"Result: {spec['label']}: accuracy {_number(summary['accuracy'])}, format rate "
          f"{_number(summary['format_rate'])}, mean reward {_number(summary['mean_reward'])}, mean length "
          f"{summary['mean_length']:.1f} tokens "
          f"({time.time() - start:.1f} s)", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval_id", type=int, required=True)
    parser.add_argument("--db", help="evaluation database (default: evals.db in the dashboard home)")
    parser.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    store = EvalStore(args.db)
    row = store.get(args.eval_id)
    if row is None:
        print(f"error: no evaluation {args.eval_id} in {store.path}", file=sys.stderr)
        return 2
    settings = row["settings"]
    try:
        prompts = load_prompts(row["data_path"], int(settings.get("max_samples", 20)))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not prompts:
        print(f"error: {row['data_path']} has no record with a reference answer", file=sys.stderr)
        return 2
    print(f"Evaluating {len(row['weights'])} checkpoint(s) on {len(prompts)} prompts of {row['data_path']} "
          f"(device {args.device}, settings {settings})", flush=True)
    reward_model = None
    if settings.get("reward_model_path"):
        from mmcore.workers.chat_engine import ModelPool
        from trainer.trainer_utils import SetupError
        try:
            reward_model = ModelPool().reward_model(settings["reward_model_path"])
        except SetupError as exc:  # not a reward model, or its code is not allowed to run: one clear line
            print(f"error: {exc}", file=sys.stderr)
            return 2
    failed = 0
    for index, spec in enumerate(row["weights"], 1):
        try:
            evaluate_weight(store, args.eval_id, spec, prompts, settings, args.device, index, len(row["weights"]),
                            reward_model)
        except (WeightFileError, OSError) as exc:
            failed += 1
            print(f"error: {spec['label']}: {exc}", file=sys.stderr, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
