"""The bundled demo chain on CPU, exactly as the dashboard launches it: does GRPO's reward rise?

Runs pretrain -> SFT -> reasoning distill -> GRPO (reward model `none`: format + rule rewards) with
the Demo preset's values (`mmcore.train.preset_table.demo_preset`) and the dashboard's own command builder
(`mmcore.train.commandline.build_command`, device cpu), in a temporary copy of the repository layout, so
nothing in the repository's out/ or checkpoints/ is touched. Prints each stage's time and the mean
GRPO reward over the first and the last 20% of its progress records (parsed by
`mmcore.logs.log_parser.parse_file`).

Targets: the last 20%'s mean reward clearly above the first's; the whole chain under 15 minutes on
2 CPU cores.

    python3 bench/bench_demo_rl.py                 # whole chain
    python3 bench/bench_demo_rl.py --keep DIR      # keep the run folder (weights and logs) in DIR
    python3 bench/bench_demo_rl.py --keep DIR --stages grpo   # rerun GRPO on DIR's reason weights

Each stage runs with one torch thread by default (`--threads`): a 64x2 model gains little from more,
and on a CPU shared with other work extra threads mostly wait on each other.
"""
import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from mmcore.logs.log_parser import parse_file
from mmcore.train.commandline import build_command
from mmcore.train.preset_table import demo_preset

ROOT = Path(__file__).resolve().parent.parent

CHAIN = ("pretrain", "sft", "distill_reason", "grpo")


def make_layout(dest):
    """A repository layout in `dest`: trainer/ copied (so out/ and checkpoints/ land in `dest`),
    model/ and dataset/ linked read-only."""
    shutil.copytree(ROOT / "trainer", dest / "trainer", ignore=shutil.ignore_patterns("__pycache__"),
                    dirs_exist_ok=True)
    for name in ("model", "dataset"):
        if not (dest / name).exists():
            (dest / name).symlink_to(ROOT / name, target_is_directory=True)


def run_stage(layout, train_type, threads):
    """Run one demo stage to completion; returns (seconds, log path)."""
    values = {**demo_preset(train_type), "device": "cpu"}
    command = build_command(train_type, values, trainer_dir=layout / "trainer")
    log_path = layout / f"{train_type}.log"
    env = {**os.environ, **command.env, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    print(f"[{train_type}] {command.display}", flush=True)
    start = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.run(command.argv, cwd=command.cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        print(log_path.read_text(errors="replace")[-4000:])
        raise SystemExit(f"{train_type} failed with exit code {proc.returncode} (log: {log_path})")
    return elapsed, log_path


def reward_summary(log_path):
    """Mean reward over the first and the last 20% of the progress records, and the record count."""
    frame = parse_file(log_path)
    rewards = frame["Reward"].dropna().to_numpy()
    if len(rewards) < 5:
        raise SystemExit(f"only {len(rewards)} progress records in {log_path}: too few to compare")
    k = max(1, len(rewards) // 5)
    return float(rewards[:k].mean()), float(rewards[-k:].mean()), len(rewards), frame


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", help="folder for the run (kept afterwards); default: a temporary folder")
    parser.add_argument("--stages", nargs="+", choices=CHAIN, default=list(CHAIN),
                        help="run only these stages (later ones need --keep with the earlier ones' weights)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per stage (OMP_NUM_THREADS)")
    args = parser.parse_args()
    if args.stages[-1] != "grpo":
        parser.error("the stages must end with grpo, whose rewards this benchmark reports")
    if args.stages[0] != "pretrain" and not args.keep:
        parser.error("starting after pretrain needs --keep DIR, a folder holding the earlier stages' weights")

    layout = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="minimind-demo-rl-"))
    layout.mkdir(parents=True, exist_ok=True)
    stages = [t for t in CHAIN if t in args.stages]
    make_layout(layout)
    times = {}
    try:
        for train_type in stages:
            times[train_type], log_path = run_stage(layout, train_type, args.threads)
            print(f"[{train_type}] {times[train_type]:.1f} s", flush=True)
        first, last, records, frame = reward_summary(log_path)
    finally:
        if not args.keep:
            shutil.rmtree(layout, ignore_errors=True)

    print("\nstage times:")
    for train_type, seconds in times.items():
        print(f"  {train_type:15s} {seconds:7.1f} s")
    print(f"  {'total':15s} {sum(times.values()):7.1f} s  (target: under 900 s on 2 cores)")
    print(f"\nGRPO: {records} progress records, steps {int(frame['step'].iloc[0])}..{int(frame['step'].iloc[-1])}")
    if "Avg Response Len" in frame:
        lengths = frame["Avg Response Len"].dropna().to_numpy()
        k = max(1, len(lengths) // 5)
        print(f"  mean response length: first 20% {lengths[:k].mean():.1f}, last 20% {lengths[-k:].mean():.1f}")
    print(f"  mean reward: first 20% {first:.4f}, last 20% {last:.4f}, change {last - first:+.4f} "
          f"(target: clearly above)")


if __name__ == "__main__":
    main()
