"""Score a run's stored responses again with a second reward: the process of a queued rescore job, and
the one `mmcore.runs.rescore.rescore` starts for a reward-model folder (so the dashboard never loads torch).

It runs `mmcore.runs.rescore.rescore` here, a reward-model folder loaded and scored by the RL trainers' own
code (`trainer.rl.reward_model.load_reward_model`, `trainer.rl.rewards.reward_model_scores`: the score a
trainer gives the same response). Progress goes to stdout, the job's log, as `Epoch:[1/1](done/total)`
lines (the Jobs page's progress bar); the results go where every rescore writes them (`rescore/<name>`
beside each response, `rescore/<name>/mean|std` per step). Exit status 0: scored; 2: refused (the reason
on stderr, nothing written).

    python -m mmcore.workers.rescore_worker RUN_DIR --reward rule|format|py:MODULE:FUNCTION|FOLDER [--name NAME]
"""
import argparse
import json
import sys
import time

import torch

from mmcore.runs import rescore as rescoring
from trainer.rl.rewards import reward_model_scores
from trainer.rules.setup_errors import SetupError


def folder_loader(device):
    """`load_folder` for `rescoring.rescore`: the trainers' reward model at a folder, scoring as they do."""
    def load(folder, reasoning):
        from trainer.rl.reward_model import load_reward_model
        model = load_reward_model(folder, device)
        print(f"Loaded the reward model {folder} ({model.kind}) on {device}", flush=True)
        return lambda prompts, responses, references: reward_model_scores(model, prompts, responses, reasoning)
    return load


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="the run's records folder (its rollouts.sqlite)")
    parser.add_argument("--reward", required=True, help="rule, format, py:MODULE:FUNCTION or a reward-model folder")
    parser.add_argument("--name", default=None, help="recorded as rescore/NAME (default: the reward's name)")
    parser.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu",
                        help="where a reward model runs")
    parser.add_argument("--summary", action="store_true", help="end with the summary as one JSON line")
    args = parser.parse_args(argv)
    started = time.monotonic()
    print(f"Rescoring the stored responses of {args.run_dir} with {args.reward}", flush=True)

    def progress(done, total):
        print(f"Rescore: {done}/{total} responses", flush=True)
        print(rescoring.progress_line(done, total, started), flush=True)
    try:
        summary = rescoring.rescore(args.run_dir, args.reward, name=args.name, progress=progress,
                                    load_folder=folder_loader(args.device))
    except (rescoring.RescoreError, SetupError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    print(f"Result: rescore/{summary['name']}: {summary['responses']} responses, {summary['steps']} steps, "
          f"{summary['seconds']} s", flush=True)
    if args.summary:
        print(rescoring.SUMMARY_PREFIX + json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
