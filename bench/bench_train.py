"""Training-speed figures of the MiniMind trainers.

    python bench/bench_train.py                      # every measurement
    python bench/bench_train.py --only pretrain      # one of them
    python bench/bench_train.py --configs tiny       # pretrain: only the tiny model

Measurements (each a function registered in MEASUREMENTS, printing its own table):

- `pretrain`: useful (non-pad) tokens per second of a pretraining step with this project's batching
  (each batch padded to its longest row, `dataset.lm_dataset.pad_collate`) against an upstream-style
  loop that pads every sample to max_seq_len, on the same data, model and sample order, plus the
  process's peak RSS. Tokens per CPU-second are printed too: on a busy shared machine they are the
  steadier figure. Each (config, batching) pair runs in a fresh subprocess so the RSS figures are
  its own. Target: pad-to-longest >= 1.5x the useful tokens/s of pad-to-max.
- `sft_pack`: SFT on the bundled short conversations at the SFT defaults (max_seq_len 512, batch 16):
  useful tokens per second of `--pack 1` against today's pad-to-longest batches and an upstream-style
  pad-to-max loop, interleaved step by step. Target (issue 26): packed >= 2x upstream-style per useful
  token; against pad-to-longest the gain is bounded by the padding that batching leaves.
- `grpo`: seconds per GRPO step (random-init model, rule rewards) and how they split between
  sampling (generate with the KV cache), rewards and the update, plus generated tokens per second.

To add a measurement (e.g. GRPO seconds per step): write `bench_<name>(args)` that prints its figures
and returns a list of result dicts, and add it to MEASUREMENTS; `--only <name>` then selects it.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Model sizes for the pretrain measurement. Both use the pretrain script's default max_seq_len (512),
#: which is what an upstream-style loop pads every sample to.
PRETRAIN_CONFIGS = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, max_seq_len=512, batch_size=16, steps=10),
    "512x8": dict(hidden_size=512, num_hidden_layers=8, max_seq_len=512, batch_size=4, steps=3),
}
DEFAULT_DATA = os.path.join(ROOT, "dataset", "demo", "pretrain.jsonl")
TARGET_SPEEDUP = 1.5


def peak_rss_mib():
    """This process's peak resident memory in MiB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def pad_to_max_collate(pad_id, max_len):
    """Upstream MiniMind's batching: every sample padded to max_seq_len, with a loss mask."""
    import torch

    def collate(batch):
        ids = torch.full((len(batch), max_len), pad_id, dtype=torch.long)
        labels = torch.full((len(batch), max_len), -100, dtype=torch.long)
        mask = torch.zeros((len(batch), max_len), dtype=torch.long)
        for row, item in enumerate(batch):
            n = item["input_ids"].shape[0]
            ids[row, :n] = item["input_ids"]
            labels[row, :n] = item["labels"]
            mask[row, :n] = 1
        return {"input_ids": ids, "labels": labels, "attention_mask": mask}
    return collate


def run_pretrain_case(config_name, batching, data_path, device, threads=0, warmup=1):
    """Time `steps` pretraining steps (after `warmup` untimed ones) in this process; return a result dict."""
    import torch

    from dataset.lm_dataset import PretrainDataset, pad_collate
    from trainer import trainer_utils as tu
    from trainer.loop import make_optimizer

    cfg = PRETRAIN_CONFIGS[config_name]
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = tu.model_config(cfg["hidden_size"], cfg["num_hidden_layers"], False)
    model, tokenizer = tu.init_model(config, "none", ".", device)
    optimizer = make_optimizer(model.parameters(), 5e-4)
    dataset = PretrainDataset(data_path, tokenizer, max_length=cfg["max_seq_len"])
    collate = (pad_collate(tokenizer.pad_token_id) if batching == "longest"
               else pad_to_max_collate(tokenizer.pad_token_id, cfg["max_seq_len"]))
    info = tu.DistInfo(False, 0, 0, 1, device)
    batches = iter(tu.make_loader(dataset, cfg["batch_size"], 0, info, collate))
    model.train()

    def step(batch):
        batch = tu.to_device(batch, device)
        out = model(batch["input_ids"], labels=batch["labels"])
        (out.loss + out.aux_loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return int(batch["attention_mask"].sum()), batch["input_ids"].numel()

    for _ in range(warmup):
        step(next(batches))
    useful = computed = 0
    sync = torch.cuda.synchronize if tu.device_type(device) == "cuda" else (lambda: None)
    sync()
    start, start_cpu = time.perf_counter(), time.process_time()
    for _ in range(cfg["steps"]):
        u, c = step(next(batches))
        useful, computed = useful + u, computed + c
    sync()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - start_cpu
    return {"measurement": "pretrain", "config": config_name, "batching": batching, "steps": cfg["steps"],
            "threads": torch.get_num_threads(), "seconds": seconds, "cpu_seconds": cpu_seconds,
            "useful_tokens": useful, "computed_tokens": computed, "useful_tokens_per_s": useful / seconds,
            "useful_tokens_per_cpu_s": useful / cpu_seconds, "peak_rss_mib": peak_rss_mib()}


def bench_pretrain(args):
    """Pad-to-longest vs pad-to-max pretraining throughput, each case in a fresh subprocess."""
    results = []
    for config_name in args.configs:
        for batching in ("max", "longest"):
            cmd = [sys.executable, os.path.abspath(__file__), "--_case", config_name, batching,
                   "--data", args.data, "--device", args.device, "--threads", str(args.threads)]
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            if proc.returncode != 0:
                raise SystemExit(f"benchmark case {config_name}/{batching} failed:\n{proc.stderr}")
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))

    print(f"\npretrain, {args.device}, data {os.path.relpath(args.data, ROOT)}")
    print(f"{'config':<7} {'batching':<14} {'steps':>5} {'useful tok/s':>12} {'tok/CPU-s':>10} "
          f"{'pad share':>9} {'peak RSS':>10}")
    for r in results:
        pad_share = 1 - r["useful_tokens"] / r["computed_tokens"]
        label = "pad-to-max" if r["batching"] == "max" else "pad-to-longest"
        print(f"{r['config']:<7} {label:<14} {r['steps']:>5} {r['useful_tokens_per_s']:>12.0f} "
              f"{r['useful_tokens_per_cpu_s']:>10.0f} {pad_share:>9.0%} {r['peak_rss_mib']:>6.0f} MiB")
    for config_name in args.configs:
        by = {r["batching"]: r for r in results if r["config"] == config_name}
        speedup = by["longest"]["useful_tokens_per_s"] / by["max"]["useful_tokens_per_s"]
        cpu_speedup = by["longest"]["useful_tokens_per_cpu_s"] / by["max"]["useful_tokens_per_cpu_s"]
        verdict = "meets" if speedup >= TARGET_SPEEDUP else "MISSES"
        print(f"{config_name}: pad-to-longest is {speedup:.2f}x pad-to-max in useful tokens/s ({verdict} the "
              f"{TARGET_SPEEDUP}x target); {cpu_speedup:.2f}x per CPU-second")
    return results


#: Model sizes for the GRPO measurement: (hidden_size, layers, batch_size, num_generations, max_gen_len, steps).
GRPO_CONFIGS = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, batch_size=2, num_generations=4, max_gen_len=48, steps=5),
    "512x8": dict(hidden_size=512, num_hidden_layers=8, batch_size=2, num_generations=8, max_gen_len=128, steps=2),
}
GRPO_DATA = os.path.join(ROOT, "dataset", "demo", "rlaif.jsonl")


def bench_grpo(args):
    """GRPO seconds per step of a random-init model with rule rewards, split into sampling (generate
    with the KV cache), rewards and the update (policy + reference passes, backward, optimizer step)."""
    import torch

    from dataset.lm_dataset import RLAIFDataset, pad_collate
    from trainer import trainer_utils as tu
    from trainer.loop import make_optimizer
    from trainer.rl import losses, rewards
    from trainer.rl.rollout import completion_logps, rollout

    results = []
    for config_name in args.configs:
        cfg = GRPO_CONFIGS[config_name]
        torch.manual_seed(0)
        config = tu.model_config(cfg["hidden_size"], cfg["num_hidden_layers"], False)
        model, tokenizer = tu.init_model(config, "none", ".", args.device)
        reference, _ = tu.init_model(config, "none", ".", args.device, tokenizer=False)
        reference.load_state_dict(model.state_dict())
        reference.eval().requires_grad_(False)
        optimizer = make_optimizer(model.parameters(), 1e-6)
        dataset = RLAIFDataset(GRPO_DATA, tokenizer, max_length=66)
        info = tu.DistInfo(False, 0, 0, 1, args.device)
        batches = iter(tu.make_loader(dataset, cfg["batch_size"], 0, info, pad_collate(tokenizer.pad_token_id)))
        n = cfg["num_generations"]
        sync = torch.cuda.synchronize if tu.device_type(args.device) == "cuda" else (lambda: None)
        totals = {"sample": 0.0, "reward": 0.0, "update": 0.0}
        tokens = 0
        for i in range(cfg["steps"] + 1):  # the first step warms up and is not counted
            batch = next(batches)
            sync()
            t0 = time.perf_counter()
            ro = rollout(model, tokenizer, batch["prompt"], batch["answer"], 66, cfg["max_gen_len"], args.device, n)
            sync()
            t1 = time.perf_counter()
            reward, _ = rewards.score(rewards.reward_functions(1), ro.prompts, ro.responses, ro.references)
            reward = reward.to(args.device)
            t2 = time.perf_counter()
            advantages, _ = losses.group_advantages(reward, n)
            logps, aux = completion_logps(model, ro.input_ids, ro.attention_mask, ro.num_completion)
            with torch.no_grad():
                ref_logps, _ = completion_logps(reference, ro.input_ids, ro.attention_mask, ro.num_completion)
            loss, _ = losses.grpo_loss(logps, ref_logps, advantages, ro.completion_mask, 0.02)
            (loss + aux).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            sync()
            t3 = time.perf_counter()
            if i:
                totals["sample"] += t1 - t0
                totals["reward"] += t2 - t1
                totals["update"] += t3 - t2
                tokens += int(ro.completion_mask.sum())
        steps = cfg["steps"]
        seconds = sum(totals.values())
        results.append({"measurement": "grpo", "config": config_name, "steps": steps,
                        "responses_per_step": cfg["batch_size"] * n, "max_gen_len": cfg["max_gen_len"],
                        "seconds_per_step": seconds / steps, "sample_share": totals["sample"] / seconds,
                        "reward_share": totals["reward"] / seconds, "update_share": totals["update"] / seconds,
                        "generated_tokens_per_s": tokens / totals["sample"]})

    print(f"\ngrpo, {args.device}, rule rewards, data {os.path.relpath(GRPO_DATA, ROOT)}")
    print(f"{'config':<7} {'responses':>9} {'max gen':>7} {'s/step':>8} {'sample':>7} {'reward':>7} {'update':>7} "
          f"{'gen tok/s':>10}")
    for r in results:
        print(f"{r['config']:<7} {r['responses_per_step']:>9} {r['max_gen_len']:>7} {r['seconds_per_step']:>8.2f} "
              f"{r['sample_share']:>7.0%} {r['reward_share']:>7.0%} {r['update_share']:>7.0%} "
              f"{r['generated_tokens_per_s']:>10.0f}")
    return results


# ---------------------------------------------------------------------------------------------------
# Pretraining compute: per computed token against an upstream-style loop, and packing

def _upstream_style_loss(model, batch):
    """Upstream MiniMind's pretraining step: inputs and targets shifted by the data (X = ids[:-1],
    Y = ids[1:]), logits for every position, per-token cross entropy times the loss mask."""
    import torch.nn.functional as F
    ids, mask = batch["input_ids"], batch["attention_mask"]
    x, y, loss_mask = ids[:, :-1], ids[:, 1:], mask[:, 1:].float()
    out = model(x)
    loss = F.cross_entropy(out.logits.reshape(-1, out.logits.size(-1)), y.reshape(-1), reduction="none")
    return (loss * loss_mask.reshape(-1)).sum() / loss_mask.sum() + out.aux_loss


def _today_loss(model, batch):
    """The pretraining loss as it was before `loss_only`: logits everywhere, shifted in the model."""
    out = model(batch["input_ids"], labels=batch["labels"])
    return out.loss + out.aux_loss


def _current_loss(model, batch):
    from trainer.train_pretrain import lm_loss
    return lm_loss(model, batch)[0]


def bench_pretrain_compute(args):
    """(1) Rows that fill max_seq_len (the bundled pretrain data concatenated into 512-token rows):
    computed tokens/s of the trainer's loss against an upstream-style pad-to-max loop on the same
    rows. (2) Bundled data: useful tokens/s of `--pack 1` against today's pad-to-longest batching.
    All cases of a model run interleaved step by step in this process, on the same weights."""
    import torch

    from dataset.lm_dataset import PackedPretrainDataset, PretrainDataset, pad_collate
    from trainer import trainer_utils as tu

    if args.threads:
        torch.set_num_threads(args.threads)
    results = []
    for config_name in args.configs:
        cfg = PRETRAIN_CONFIGS[config_name]
        torch.manual_seed(0)
        model, tokenizer = tu.init_model(tu.model_config(cfg["hidden_size"], cfg["num_hidden_layers"], False),
                                         "none", ".", args.device)
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
        collate = pad_collate(tokenizer.pad_token_id)
        packed = PackedPretrainDataset(args.data, tokenizer, max_length=cfg["max_seq_len"])
        docs = PretrainDataset(args.data, tokenizer, max_length=cfg["max_seq_len"])
        full_rows = [{k: v for k, v in packed[i].items() if k != "document_ids"} for i in range(len(packed))]
        for row in full_rows:
            row["labels"] = row["input_ids"].clone()  # plain concatenated rows: every token counts
        bs = cfg["batch_size"]
        sources = {  # case -> (items, loss)
            "full rows, upstream-style": (full_rows, _upstream_style_loss),
            "full rows, trainer": (full_rows, _current_loss),
            "pad-to-longest, today": ([docs[i] for i in range(len(docs))], _today_loss),
            "--pack 1": ([packed[i] for i in range(len(packed))], _current_loss),
        }
        totals = {case: [0.0, 0.0, 0, 0] for case in sources}  # wall, CPU, useful, computed tokens
        steps = 2 * cfg["steps"]
        for i in range(steps + 1):  # step 0 warms up
            cases = list(sources.items())
            for case, (items, loss_fn) in cases[i % len(cases):] + cases[:i % len(cases)]:  # rotate the order
                batch = collate([items[(i * bs + j) % len(items)] for j in range(bs)])
                batch = tu.to_device(batch, args.device)
                start, start_cpu = time.perf_counter(), time.process_time()
                loss_fn(model, batch).backward()
                optimizer.zero_grad(set_to_none=True)  # no step: every case sees the same weights
                if i:
                    t = totals[case]
                    t[0] += time.perf_counter() - start
                    t[1] += time.process_time() - start_cpu
                    t[2] += int(batch["attention_mask"].sum())
                    t[3] += batch["input_ids"].numel()
        for case, (wall, cpu, useful, computed) in totals.items():
            results.append({"measurement": "pretrain_compute", "config": config_name, "case": case, "steps": steps,
                            "useful_tokens_per_s": useful / wall, "useful_tokens_per_cpu_s": useful / cpu,
                            "computed_tokens_per_s": computed / wall, "computed_tokens_per_cpu_s": computed / cpu})

    print(f"\npretrain compute, {args.device}, threads {torch.get_num_threads()}, data {os.path.relpath(args.data, ROOT)}, "
          f"forward + backward per step (no optimizer step)")
    print(f"{'config':<7} {'case':<27} {'comp tok/s':>10} {'comp tok/CPU-s':>14} {'useful tok/s':>12} "
          f"{'useful tok/CPU-s':>16}")
    for r in results:
        print(f"{r['config']:<7} {r['case']:<27} {r['computed_tokens_per_s']:>10.0f} {r['computed_tokens_per_cpu_s']:>14.0f} "
              f"{r['useful_tokens_per_s']:>12.0f} {r['useful_tokens_per_cpu_s']:>16.0f}")
    for config_name in args.configs:
        by = {r["case"]: r for r in results if r["config"] == config_name}
        full = (by["full rows, trainer"]["computed_tokens_per_cpu_s"]
                / by["full rows, upstream-style"]["computed_tokens_per_cpu_s"])
        pack = by["--pack 1"]["useful_tokens_per_cpu_s"] / by["pad-to-longest, today"]["useful_tokens_per_cpu_s"]
        pack_wall = by["--pack 1"]["useful_tokens_per_s"] / by["pad-to-longest, today"]["useful_tokens_per_s"]
        print(f"{config_name}: full rows, trainer/upstream-style computed tokens per CPU-s = {full:.2f}x (target >= 1); "
              f"--pack 1 / today's pad-to-longest useful tokens = {pack:.2f}x per CPU-s, {pack_wall:.2f}x per s "
              f"(target >= 1.5)")
    return results


# ---------------------------------------------------------------------------------------------------
# SFT on short rows: --pack 1 against today's pad-to-longest batches and an upstream-style pad-to-max loop

SFT_DATA = os.path.join(ROOT, "dataset", "demo", "sft.jsonl")
#: The SFT script's max_seq_len (512) and batch size (16), whose padding packing saves.
SFT_PACK_CONFIGS = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, max_seq_len=512, batch_size=16, steps=10),
    "512x8": dict(hidden_size=512, num_hidden_layers=8, max_seq_len=512, batch_size=16, steps=2),
}
PACK_TARGET = 2.0  # issue 26: with packing, at least twice upstream's useful tokens per second


def _upstream_style_sft_loss(model, batch):
    """Upstream MiniMind's SFT step: rows padded to max_seq_len, logits for every position, per-token cross
    entropy times the assistant-token loss mask."""
    import torch.nn.functional as F
    ids, labels = batch["input_ids"], batch["labels"][:, 1:]
    out = model(ids[:, :-1])
    mask = (labels != -100).float().reshape(-1)
    loss = F.cross_entropy(out.logits.reshape(-1, out.logits.size(-1)), labels.clamp(min=0).reshape(-1),
                           reduction="none")
    return (loss * mask).sum() / mask.sum() + out.aux_loss


def bench_sft_pack(args):
    """SFT on the bundled short conversations at the SFT defaults (SFT_PACK_CONFIGS): useful (non-pad)
    tokens per second of `--pack 1` (PackedSFTDataset rows, attention within each conversation)
    against today's pad-to-longest batches and an upstream-style pad-to-max loop, forward and backward
    with the trainer's loss, the cases interleaved step by step on the same weights."""
    import torch

    from dataset.lm_dataset import PackedSFTDataset, pad_collate
    from trainer import trainer_utils as tu

    if args.threads:
        torch.set_num_threads(args.threads)
    results = []
    for config_name in args.configs:
        cfg = SFT_PACK_CONFIGS[config_name]
        torch.manual_seed(0)
        model, tokenizer = tu.init_model(tu.model_config(cfg["hidden_size"], cfg["num_hidden_layers"], False),
                                         "none", ".", args.device)
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
        started = time.perf_counter()
        packed = PackedSFTDataset(args.sft_data, tokenizer, max_length=cfg["max_seq_len"])
        pack_seconds = time.perf_counter() - started
        rows = packed.conversations
        bs = cfg["batch_size"]
        longest = pad_collate(tokenizer.pad_token_id)
        to_max = pad_to_max_collate(tokenizer.pad_token_id, cfg["max_seq_len"])
        sources = {  # case -> (items, collate, loss)
            "pad-to-max, upstream-style": (rows, to_max, _upstream_style_sft_loss),
            "pad-to-longest, today": (rows, longest, _current_loss),
            "--pack 1": (packed, longest, _current_loss),
        }
        totals = {case: [0.0, 0.0, 0, 0, 0] for case in sources}  # wall, CPU, useful, computed, conversations
        steps = 2 * cfg["steps"]
        sync = torch.cuda.synchronize if tu.device_type(args.device) == "cuda" else (lambda: None)
        for i in range(steps + 1):  # step 0 warms up
            cases = list(sources.items())
            for case, (items, collate, loss_fn) in cases[i % len(cases):] + cases[:i % len(cases)]:
                batch = tu.to_device(collate([items[(i * bs + j) % len(items)] for j in range(bs)]), args.device)
                sync()
                start, start_cpu = time.perf_counter(), time.process_time()
                loss_fn(model, batch).backward()
                optimizer.zero_grad(set_to_none=True)  # no step: every case sees the same weights
                sync()
                if i:
                    t = totals[case]
                    t[0] += time.perf_counter() - start
                    t[1] += time.process_time() - start_cpu
                    t[2] += int(batch["attention_mask"].sum())
                    t[3] += batch["input_ids"].numel()
                    t[4] += int(batch["document_ids"].max(dim=1).values.add(1).sum()) if "document_ids" in batch else bs
        for case, (wall, cpu, useful, computed, conversations) in totals.items():
            results.append({"measurement": "sft_pack", "config": config_name, "case": case, "steps": steps,
                            "max_seq_len": cfg["max_seq_len"], "batch_size": bs, "pack_seconds": pack_seconds,
                            "conversations_per_step": conversations / steps, "useful_share": useful / computed,
                            "useful_tokens_per_s": useful / wall, "useful_tokens_per_cpu_s": useful / cpu,
                            "computed_tokens_per_s": computed / wall})

    print(f"\nSFT packing, {args.device}, threads {torch.get_num_threads()}, "
          f"data {os.path.relpath(args.sft_data, ROOT)}, forward + backward per step (no optimizer step)")
    print(f"{'config':<7} {'case':<27} {'conv/step':>9} {'useful':>7} {'useful tok/s':>12} {'useful tok/CPU-s':>16} "
          f"{'comp tok/s':>10}")
    for r in results:
        print(f"{r['config']:<7} {r['case']:<27} {r['conversations_per_step']:>9.1f} {r['useful_share']:>7.0%} "
              f"{r['useful_tokens_per_s']:>12.0f} {r['useful_tokens_per_cpu_s']:>16.0f} "
              f"{r['computed_tokens_per_s']:>10.0f}")
    # On a CPU the CPU-seconds are the steadier figure on a shared machine; a GPU's time is the wall clock.
    judged = "useful_tokens_per_s" if tu.device_type(args.device) == "cuda" else "useful_tokens_per_cpu_s"
    for config_name in args.configs:
        by = {r["case"]: r for r in results if r["config"] == config_name}
        pack = by["--pack 1"]
        for other in ("pad-to-max, upstream-style", "pad-to-longest, today"):
            cpu = pack["useful_tokens_per_cpu_s"] / by[other]["useful_tokens_per_cpu_s"]
            wall = pack["useful_tokens_per_s"] / by[other]["useful_tokens_per_s"]
            if other.endswith("upstream-style"):
                verdict = "meets" if pack[judged] / by[other][judged] >= PACK_TARGET else "MISSES"
                note = f"{verdict} the {PACK_TARGET}x target"
            else:
                note = f"its batches are {1 - by[other]['useful_share']:.0%} padding"
            print(f"{config_name}: --pack 1 / {other}: {cpu:.2f}x useful tokens per CPU-s, {wall:.2f}x per s ({note})")
        print(f"{config_name}: packing the file took {pack['pack_seconds']:.1f} s")
    return results


def bench_rl(args, algo):
    """Seconds per step of `algo` and their split: `bench/bench_rl_steps.py`."""
    from bench.bench_rl_steps import bench_rl as measure
    return measure(args, algo)


#: Every measurement, by the name `--only` takes.
MEASUREMENTS = {"pretrain": bench_pretrain, "pretrain_compute": bench_pretrain_compute, "sft_pack": bench_sft_pack,
                "grpo": lambda args: bench_rl(args, "grpo"),
                "spo": lambda args: bench_rl(args, "spo"), "ppo": lambda args: bench_rl(args, "ppo"),
                "grpo_split": bench_grpo}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted(MEASUREMENTS), action="append",
                        help="run only this measurement (repeatable)")
    parser.add_argument("--configs", nargs="+", choices=list(PRETRAIN_CONFIGS), default=list(PRETRAIN_CONFIGS))
    parser.add_argument("--data", default=DEFAULT_DATA, help="pretrain jsonl")
    parser.add_argument("--sft_data", default=SFT_DATA, help="sft jsonl (sft_pack)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads per case (0 = torch's default); 1 keeps figures steady on a shared machine")
    parser.add_argument("--json", help="also write every result to this JSON file")
    parser.add_argument("--baseline", action="store_true",
                        help="RL: also time the steps as they were before the lean sampler, interleaved in this process")
    parser.add_argument("--rl_steps", type=int, default=0, help="RL: timed steps per implementation (0 = per model)")
    parser.add_argument("--reward_model", default="none", help="RL: reward model folder (none = rule rewards)")
    parser.add_argument("--_case", nargs=2, help=argparse.SUPPRESS)  # internal: one timed case
    args = parser.parse_args(argv)
    if args._case:
        print(json.dumps(run_pretrain_case(args._case[0], args._case[1], args.data, args.device, args.threads)))
        return
    results = []
    for name in args.only or MEASUREMENTS:
        results += MEASUREMENTS[name](args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
