"""What the rollout store costs and how fast the Rollouts view is.

1. The demo GRPO (Demo preset values: batch 4, 4 responses per prompt, 48 new tokens, tiny model from
   random `reason` weights, CPU) with the rollout store on (`--rollout_groups -1`) and off
   (`--rollout_groups 0`), alternating runs; prints the mean step time of each (from the runs' own
   metrics streams, first step left out) and the direct cost of writing one step to the store.
   Target: under 3% slower with the store.
2. The store's size per 1,000 responses (from the demo runs, and from the 100,000-response store).
3. The Logs page (AppTest) on a records folder whose store holds 100,000 responses: the time to open a
   step and to filter it (reward range, truncated, text search). Target: under 0.5 s each.

    python3 -m bench.bench_rollouts [--steps 10] [--rounds 2] [--responses 100000]

Figures are wall-clock times on whatever else the machine is doing: run it on a quiet machine.
"""
import argparse
import os
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from mmcore.runs import metric_stream, rollout_store
from mmcore.train.commandline import build_command
from mmcore.train.preset_table import demo_preset
from trainer.rules import records

ROOT = Path(__file__).resolve().parent.parent


def store_bytes(run_dir):
    return sum(p.stat().st_size for p in Path(run_dir).glob(records.ROLLOUTS_FILE + "*"))


def demo_grpo(layout, run_dir, keep_groups, steps, threads):
    """One demo GRPO run of `steps` steps; returns its step times (s) after the first."""
    values = {**demo_preset("grpo"), "device": "cpu", "weight_dir": str(layout / "base"), "save_dir": str(layout / "out"),
              "data_path": str(layout / "data" / "rlaif.jsonl"), "save_interval": "100000",
              "run_dir": str(run_dir), "rollout_groups": str(keep_groups)}
    command = build_command("grpo", values, trainer_dir=layout / "trainer")
    env = {**os.environ, **command.env, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(command.argv, cwd=command.cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"demo GRPO failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    df = metric_stream.read(run_dir)
    assert len(df) == steps, (len(df), steps)
    tokens = df["tokens"].diff()
    return list(df["time/step_s"].iloc[1:]), list(tokens.iloc[1:])


def bench_trainer(args):
    from tests._trainer_helpers import DEMO, head_jsonl, make_repo_copy, save_random_weights
    from trainer.rules import roots
    with tempfile.TemporaryDirectory(prefix="bench-rollouts-") as tmp:
        # The runs read and write in the temporary folder: allow it beside the default roots.
        defaults = roots.default_roots()
        os.environ[roots.READ_ENV] = os.pathsep.join([*map(str, defaults.read), os.path.realpath(tmp)])
        os.environ[roots.WRITE_ENV] = os.pathsep.join([*map(str, defaults.write), os.path.realpath(tmp)])
        layout = make_repo_copy(Path(tmp) / "repo")
        save_random_weights(layout / "base", "reason", seed=3)
        batch = int(demo_preset("grpo")["batch_size"])
        head_jsonl(DEMO / "rlaif.jsonl", layout / "data" / "rlaif.jsonl", batch * args.steps)
        times, tokens = {"on": [], "off": []}, {"on": [], "off": []}
        sizes = []
        for r in range(args.rounds):
            for mode in (("on", "off") if r % 2 == 0 else ("off", "on")):
                run_dir = Path(tmp) / f"{mode}-{r}"
                step_s, step_tokens = demo_grpo(layout, run_dir, -1 if mode == "on" else 0, args.steps, args.threads)
                times[mode] += step_s
                tokens[mode] += step_tokens
                if mode == "on":
                    sizes.append(store_bytes(run_dir) / max(rollout_store.counts(run_dir)[1], 1) * 1000)
                print(f"  round {r + 1} store {mode}: mean step {statistics.mean(step_s):.3f} s, "
                      f"{statistics.mean(step_tokens):.0f} tokens a step", flush=True)
        on, off = statistics.mean(times["on"]), statistics.mean(times["off"])
        print(f"demo GRPO step time: store on {on:.3f} s, off {off:.3f} s "
              f"({(on / off - 1) * 100:+.1f}%; target < +3%; {len(times['on'])} steps each)")
        per_token = {m: sum(times[m]) / sum(tokens[m]) * 1000 for m in times}
        print(f"  per 1,000 tokens processed: on {per_token['on']:.3f} s, off {per_token['off']:.3f} s "
              f"({(per_token['on'] / per_token['off'] - 1) * 100:+.1f}%)")
        # the store's own cost, measured directly: one demo step (4 groups of 4) written and committed
        rec = records.RunRecords(Path(tmp) / "direct", "grpo", rollouts=True)
        text = "<think>\n" + "思考 " * 30 + "\n</think>\n<answer>\n42\n</answer>"
        started = time.perf_counter()
        for step in range(1, 201):
            rec.add_rollouts(step, 0, synthetic_step(step, 4, 4, text))
        write_s = (time.perf_counter() - started) / 200
        rec.close()
        print(f"store write per demo step: {write_s * 1000:.2f} ms ({write_s / off * 100:.2f}% of a step)")
        print(f"store size per 1,000 responses (demo runs): {statistics.mean(sizes) / 1024:.0f} KiB")


def synthetic_step(step, groups, group_size, text, rng=random.Random(0)):
    out = []
    for g in range(groups):
        prompt = f"<|im_start|>user\nQuestion {(step * groups + g) % 997}: what is {g} + {step % 50}?<|im_end|>\n" \
                 f"<|im_start|>assistant\n"
        rows = []
        for i in range(group_size):
            fmt, rule = rng.choice((0.0, 0.25, 0.5, 1.5)), float(rng.random() < 0.3)
            rows.append({"prompt": prompt, "reference": str(g + step % 50), "response": f"{text} #{i}",
                         "reward": fmt + rule, "advantage": rng.uniform(-1.5, 1.5), "length": rng.randint(5, 48),
                         "truncated": rng.random() < 0.2, "parts": {"format": fmt, "rule": rule},
                         "extras": {"kl": rng.random() * 0.01, "accuracy": rule, "format_ok": float(fmt == 1.5)}})
        out.append(rows)
    return out


def bench_view(args):
    from streamlit.testing.v1 import AppTest
    with tempfile.TemporaryDirectory(prefix="bench-rollouts-view-") as tmp:
        os.environ["MINIMIND_DASHBOARD_HOME"] = tmp
        run_dir = metric_stream.records_dir(tmp) / "big-grpo"
        rec = records.RunRecords(run_dir, "grpo", rollouts=True, meta={"group_size": 4})
        text = "<think>\n" + "let me think about it " * 8 + "\n</think>\n<answer>\n42\n</answer>"
        steps = args.responses // 16
        started = time.perf_counter()
        for step in range(1, steps + 1):
            rec.add_rollouts(step, 0, synthetic_step(step, 4, 4, text))
            if step % 10 == 0 or step == steps:
                rec.log(step, 0, step, {"loss": 0.1, "reward": 0.5, "reward/format/mean": 0.4, "accuracy": 0.3,
                                        "length/mean": 30.0, "frac_reward_zero_std": 0.2}, step * 4, step * 400)
        rec.close()
        n = rollout_store.counts(run_dir)[1]
        print(f"built a store of {n:,} responses in {time.perf_counter() - started:.1f} s: "
              f"{store_bytes(run_dir) / n * 1000 / 1024:.0f} KiB per 1,000 responses")

        page = AppTest.from_file(str(ROOT / "pages" / "logs.py"), default_timeout=120)
        page.session_state["logs.folders"] = ["big-grpo"]
        t = time.perf_counter()
        page.run()
        print(f"Logs page, first open (log charts, RL charts, the last step's groups): {time.perf_counter() - t:.2f} s")
        assert not page.exception, page.exception
        t = time.perf_counter()
        page.select_slider(key="logs.rollouts.step").set_value(steps // 2).run()
        print(f"Logs page, whole page rerun on a new step: {time.perf_counter() - t:.2f} s "
              f"(in the browser the Rollouts view is a fragment: only it reruns, as timed below)")

        # The Rollouts view alone, as its fragment reruns when one of its widgets changes.
        at = AppTest.from_string(
            f"from mmcore.widgets import rollouts_panel\nrollouts_panel.show([('big-grpo', {str(run_dir)!r})])\n",
            default_timeout=120)
        at.run()
        assert not at.exception, at.exception

        def timed(label, action):
            best = []
            for _ in range(3):
                t = time.perf_counter()
                action()
                best.append(time.perf_counter() - t)
                assert not at.exception, at.exception
            print(f"{label}: {min(best):.3f} s (best of 3; target < 0.5 s)")

        rng = random.Random(1)
        timed("open a step", lambda: at.select_slider(key="logs.rollouts.step").set_value(rng.randint(1, steps)).run())
        timed("filter: truncated only / all", lambda: at.selectbox(key="logs.rollouts.truncated").set_value(
            "all" if at.selectbox(key="logs.rollouts.truncated").value == "only" else "only").run())
        timed("filter: text search", lambda: at.text_input(key="logs.rollouts.text").set_value(
            rng.choice(["answer", "think", "#3", "nothing like this"])).run())
        timed("filter: format failures", lambda: at.checkbox(key="logs.rollouts.format").set_value(
            not at.checkbox(key="logs.rollouts.format").value).run())
        t = time.perf_counter()
        for _ in range(20):
            rollout_store.query(run_dir, rng.randint(1, steps), reward_min=0.5, text="think")
        print(f"(query alone, step + reward + text: {(time.perf_counter() - t) / 20 * 1000:.1f} ms)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="demo GRPO steps per run")
    parser.add_argument("--rounds", type=int, default=2, help="runs with and without the store, alternating")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--responses", type=int, default=100_000, help="responses in the Rollouts view's store")
    parser.add_argument("--skip-trainer", action="store_true")
    args = parser.parse_args()
    if not args.skip_trainer:
        bench_trainer(args)
    bench_view(args)


if __name__ == "__main__":
    main()
