"""What held-out evaluation and rescoring cost.

1. Rescore: 10,000 stored responses (written by the trainers' own rollout writer, scored at write time
   by the trainers' reward functions) scored again with the rule reward by `mmcore.rollouts.rescore`.
   Target: at most 10 s.
2. Evaluation overhead on the demo chain: each stage run as the dashboard launches it (Demo preset,
   `build_command`, CPU) with `--eval_data` = its own training file (first 64 rows, the default
   `--eval_rows`; the default interval, i.e. the save interval). Each evaluation records its seconds
   (`time/eval_s` in the run's metrics stream): printed as a share of the stage's wall time.
   Target: at most 10%.

Measured on 2 shared CPU cores (one thread a stage, two runs each; stage walls vary with the load):
with the RL held-out answers generated one prompt batch and one mode at a time, GRPO's 6 evaluations
took 13.5% and 12.3% of its wall time (chain 9.1%, 6.9%); with greedy and sampled answers to all 64
prompts in one batched call, 4.0% and 4.2% (chain 3.8%, 3.2%), the same training log and the same
greedy eval/ values. Pretrain, SFT and reasoning distillation: 2-5% either way.

    python -m bench.bench_eval                      # both (from the repository root: this checkout's code)
    python -m bench.bench_eval --skip-chain         # the rescore only (seconds)
    python -m bench.bench_eval --keep DIR           # keep the chain's folder (weights, logs, records)
"""
import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.bench_demo_rl import CHAIN, make_layout
from mmcore import metrics, rollouts
from mmcore.runs import health
from mmcore.train.commandline import build_command
from mmcore.train.preset_table import demo_preset


def bench_rescore(folder, responses=10_000):
    from tests._rescore_helpers import PROMPTS, write_run
    group = 8
    steps = responses // (group * len(PROMPTS))
    start = time.perf_counter()
    write_run(folder, steps=steps, group_size=group)
    written = time.perf_counter() - start
    count = rollouts.counts(folder)[1]
    start = time.perf_counter()
    summary = rollouts.rescore(folder, "rule")
    seconds = time.perf_counter() - start
    stored = rollouts.read(folder)
    worst = float((stored["rescore/rule"] - stored["reward/rule"]).abs().max())
    print(f"rescore: {count} stored responses ({steps} steps, written in {written:.1f} s); rule rescore "
          f"{seconds:.2f} s (target: <= 10 s); largest difference to the stored rule part {worst:.1e}")
    assert summary["responses"] == count


def run_stage(layout, train_type, threads):
    values = {**demo_preset(train_type), "device": "cpu"}
    values["eval_data"] = values["data_path"]
    command = build_command(train_type, values, trainer_dir=layout / "trainer")
    run_dir = layout / "records" / train_type
    argv = metrics.with_run_dir(command.argv, run_dir)  # as the dashboard gives a job its records folder
    env = {**os.environ, **command.env, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": str(layout)}  # the layout's own trainer, whichever checkout is installed
    log_path = layout / f"{train_type}.log"
    print(f"[{train_type}] {command.display}", flush=True)
    start = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.run(argv, cwd=command.cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        print(log_path.read_text(errors="replace")[-4000:])
        raise SystemExit(f"{train_type} failed with exit code {proc.returncode} (log: {log_path})")
    df = metrics.read(run_dir)
    evals = df["time/eval_s"].dropna() if "time/eval_s" in df else []
    if train_type == "grpo":  # the demo's rewards are honest: the reward-hacking check must stay quiet
        found = [f.rule for f in health.evaluate(df)]
        print(f"[grpo] health findings: {found or 'none'} (reward_hacking must not be among them)")
    return wall, float(sum(evals)), len(evals)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip-chain", action="store_true", help="measure the rescore only")
    parser.add_argument("--keep", help="folder for the chain (kept afterwards); default: a temporary folder")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per stage (OMP_NUM_THREADS)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="minimind-bench-eval-") as tmp:
        bench_rescore(Path(tmp) / "rescore")
    if args.skip_chain:
        return
    layout = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="minimind-bench-eval-chain-"))
    layout.mkdir(parents=True, exist_ok=True)
    make_layout(layout)
    try:
        rows = [(t, *run_stage(layout, t, args.threads)) for t in CHAIN]
    finally:
        if not args.keep:
            shutil.rmtree(layout, ignore_errors=True)
    print("\nevaluation overhead (default interval, 64 held-out rows):")
    for train_type, wall, spent, count in rows:
        print(f"  {train_type:15s} wall {wall:7.1f} s, {count} evaluations {spent:6.1f} s = {100 * spent / wall:5.1f}%")
    wall, spent = sum(r[1] for r in rows), sum(r[2] for r in rows)
    print(f"  {'chain':15s} wall {wall:7.1f} s, evaluations {spent:6.1f} s = {100 * spent / wall:5.1f}% (target: <= 10%)")


if __name__ == "__main__":
    main()
