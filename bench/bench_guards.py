"""Guards benchmark: what following a run's records for its guards costs its supervisor.

    python bench/bench_guards.py [--rate 50] [--checks 300]

A run logging `--rate` records a second (each with 20 metrics, as an RL step writes) appends to its metrics
stream between two looks of the supervisor (`guards.CHECK_S` apart); every guard is on. The CPU time of
`GuardWatch.check` per look, over the check period, is the share of one core the guards take. Target: <= 1%.
The same for the health checks a supervisor runs for an owner who wants their event (`health.HealthWatch`, one
look every `supervisor.HEALTH_CHECK_S`): the mean over `--health-checks` looks, and the last look's (the frame
grows with the run: the last is the dearest).
"""
import argparse
import json
import tempfile
import time
from pathlib import Path

from mmcore.jobs import supervisor
from mmcore.runs import guards, health


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=50.0, help="records logged per second")
    parser.add_argument("--checks", type=int, default=300)
    parser.add_argument("--health-checks", type=int, default=120, help="looks of the health checks (30 s apart)")
    args = parser.parse_args()
    per_check = max(1, round(args.rate * guards.CHECK_S))
    settings = guards.parse({"loss_above": "100", "patience": "50", "reward_below": "-100", "eval_patience": "1000"})
    with tempfile.TemporaryDirectory(prefix="bench-guards-") as tmp:
        path = Path(tmp) / "metrics.jsonl"
        watch = guards.GuardWatch(path, settings)
        step, spent = 0, 0.0
        with open(path, "a") as f:
            for _ in range(args.checks):
                for _ in range(per_check):
                    step += 1
                    record = {"global_step": step, "epoch": 0, "step": step, "samples": 8 * step,
                              "tokens": 1024 * step, "time": time.time(), "elapsed_s": step * 0.02, "loss": 2.0,
                              "reward": 0.5, **{f"metric_{i}": 0.1 * i for i in range(12)}}
                    if step % 100 == 0:
                        record["eval/loss"] = 2.0 - step * 1e-6
                    f.write(json.dumps(record) + "\n")
                f.flush()
                began = time.process_time()
                assert watch.check() is None
                spent += time.process_time() - began
    mean = spent / args.checks
    print(f"{per_check} records per look, one look every {guards.CHECK_S:g} s: {mean * 1000:.2f} ms CPU per look, "
          f"{100 * mean / guards.CHECK_S:.3f}% of a core (target <= 1%)")
    bench_health(args.rate, args.health_checks)


def bench_health(rate, checks):
    period = supervisor.HEALTH_CHECK_S
    per_check = max(1, round(rate * period))
    with tempfile.TemporaryDirectory(prefix="bench-health-") as tmp:
        watch = health.HealthWatch(tmp)
        step, spent, last = 0, 0.0, 0.0
        with open(Path(tmp) / "metrics.jsonl", "a") as f:
            for _ in range(checks):
                for _ in range(per_check):
                    step += 1
                    f.write(json.dumps({"global_step": step, "loss": 2.0, "reward": 0.5, "kl": 0.01,
                                        "frac_reward_zero_std": 0.1, "length/mean": 100.0, "truncated_frac": 0.0,
                                        **{f"metric_{i}": 0.1 * i for i in range(12)}}) + "\n")
                f.flush()
                began = time.process_time()
                assert watch.check() == []
                last = time.process_time() - began
                spent += last
    mean = spent / checks
    print(f"health checks: {per_check} records per look, one look every {period:g} s, {step} records in all: "
          f"{mean * 1000:.1f} ms CPU per look ({100 * mean / period:.3f}% of a core), the last look "
          f"{last * 1000:.1f} ms ({100 * last / period:.3f}%)")


if __name__ == "__main__":
    main()
