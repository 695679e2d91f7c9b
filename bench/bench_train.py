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
# RL steps: GRPO, SPO and PPO, split into their parts, against the baseline (bench/rl_baseline.py)

#: The RL configuration of the measurement: upstream's prompt length, 64 new tokens, 4 responses per
#: prompt (GRPO), 2 prompts a step, reasoning format rewards; rule rewards unless --reward_model.
RL_CONFIG = dict(max_seq_len=66, max_gen_len=64, num_generations=4, batch_size=2, reasoning=1, beta=0.02,
                 clip_epsilon=0.1, vf_coef=0.5, kl_coef=0.02, update_old_actor_freq=4)
#: Model sizes ("tiny" is the demo preset's 64x2) and timed steps per implementation.
RL_MODELS = {"tiny": dict(hidden_size=64, num_hidden_layers=2, steps=6),
             "512x8": dict(hidden_size=512, num_hidden_layers=8, steps=3)}
#: Seconds per step of the current trainers as a share of the baseline's, at most (the targets).
RL_TARGETS = {"grpo": 0.55, "spo": 0.55, "ppo": 0.7}
#: The parts a step's time is split into, in the order printed.
RL_PARTS = ("encode", "sample", "score", "policy_forward", "critic_forward", "reference", "old_forward", "loss",
            "backward", "optimizer")


class RLParts:
    """What an RL step needs: options, tokenizer, policy, reference, (PPO) old actor and critic, the
    optimised (module, optimizer) pairs, and the reward model (None = rule rewards)."""

    def __init__(self, algo, model_name, device, reward_model_path="none"):
        import torch

        from trainer import trainer_utils as tu
        from trainer.rl.setup import Critic
        cfg = RL_MODELS[model_name]
        self.args = argparse.Namespace(**RL_CONFIG, device=device, algo=algo)
        if algo != "grpo":
            self.args.num_generations = 1
        torch.manual_seed(0)
        config = tu.model_config(cfg["hidden_size"], cfg["num_hidden_layers"], False)
        self.policy, self.tokenizer = tu.init_model(config, "none", ".", device)
        state = self.policy.state_dict()
        self.reference = self._copy(tu, config, device, state)
        self.old_actor = self._copy(tu, config, device, state) if algo == "ppo" else None
        self.trained = [(self.policy, torch.optim.AdamW(self.policy.parameters(), lr=1e-7))]
        self.critic = None
        if algo == "ppo":
            self.critic = Critic(self._copy(tu, config, device, state, frozen=False)).to(device)
            self.trained.append((self.critic, torch.optim.AdamW(self.critic.parameters(), lr=1e-7)))
        self.reward_model = None
        if reward_model_path != "none":
            from trainer.rl.reward_model import RewardModel
            self.reward_model = RewardModel(reward_model_path, device)

    @staticmethod
    def _copy(tu, config, device, state, frozen=True):
        model, _ = tu.init_model(config, "none", ".", device, tokenizer=False)
        model.load_state_dict(state)
        return model.eval().requires_grad_(False) if frozen else model


def rl_batches(tokenizer, batch_size, max_seq_len):
    """Endless batches of demo RL prompts, in a fixed order."""
    from dataset.lm_dataset import RLAIFDataset
    dataset = RLAIFDataset(GRPO_DATA, tokenizer, max_length=max_seq_len)
    i = 0
    while True:
        items = [dataset[(i + j) % len(dataset)] for j in range(batch_size)]
        i += batch_size
        yield {"prompt": [x["prompt"] for x in items], "answer": [x["answer"] for x in items]}


def rl_implementations(algo, with_baseline):
    """(name, step function) pairs to time: the trainers' current step, and today's with --baseline."""
    from bench import rl_baseline
    impls = [("baseline", rl_baseline.STEPS[algo])] if with_baseline else []
    current = current_rl_step(algo)
    if current is not None:
        impls.append(("current", current))
    return impls


def current_rl_step(algo):
    """The trainers' step for `algo` (the calls train_grpo/spo/ppo.py make), timed part by part."""
    return {"grpo": _current_grpo, "spo": _current_spo, "ppo": _current_ppo}[algo]


def _current_rollout(timer, parts, batch, n=1):
    from trainer.rl import rewards
    from trainer.rl import rollout as rl_rollout
    a = parts.args
    with timer.part("sample"):  # prompt encoding included: it is a small part of a step
        ro = rl_rollout.rollout(parts.policy, parts.tokenizer, batch["prompt"], batch["answer"], a.max_seq_len,
                        a.max_gen_len, a.device, num_generations=n, temperature=0.8, top_k=50, top_p=1.0)
        timer.sampled_tokens += ro.completion_mask.numel()
    with timer.part("score"):
        functions = rewards.reward_functions(a.reasoning, parts.reward_model)
        reward = rewards.score(functions, ro.prompts, ro.responses, ro.references)[0].to(a.device)
    return ro, reward


def _current_policy_and_reference(timer, parts, ro):
    import torch

    from trainer.rl import rollout as rl_rollout
    with timer.part("policy_forward"):
        logps, aux = rl_rollout.rollout_logps(parts.policy, ro)
    with timer.part("reference"), torch.no_grad():
        ref_logps, _ = rl_rollout.rollout_logps(parts.reference, ro)
    return logps, aux, ref_logps


def _current_grpo(timer, parts, batch):
    from bench.rl_baseline import optimizer_step
    from trainer.rl import losses
    n = parts.args.num_generations
    ro, rewards = _current_rollout(timer, parts, batch, n)
    advantages, _ = losses.group_advantages(rewards, n)
    logps, aux, ref_logps = _current_policy_and_reference(timer, parts, ro)
    with timer.part("loss"):
        loss, _ = losses.grpo_loss(logps, ref_logps, advantages, ro.completion_mask, parts.args.beta)
    optimizer_step(timer, parts, loss + aux)


def _current_spo(timer, parts, batch):
    from bench.rl_baseline import optimizer_step
    from trainer.rl import losses
    ro, rewards = _current_rollout(timer, parts, batch)
    advantages = losses.spo_advantages(rewards, 0.0)
    logps, aux, ref_logps = _current_policy_and_reference(timer, parts, ro)
    with timer.part("loss"):
        loss, _ = losses.spo_loss(logps, ref_logps, advantages, ro.completion_mask, parts.args.beta)
        losses.masked_mean(logps.detach(), ro.completion_mask).item()
    optimizer_step(timer, parts, loss + aux)


def _current_ppo(timer, parts, batch):
    """As train_ppo.py: the old actor's pass is skipped on the steps right after its refresh (every
    update_old_actor_freq steps), where the rollout's own log-probs are the old actor's."""
    import torch

    from bench.rl_baseline import optimizer_step
    from trainer.rl import losses
    from trainer.rl import rollout as rl_rollout
    a = parts.args
    parts.ppo_steps = getattr(parts, "ppo_steps", -1) + 1
    ro, rewards = _current_rollout(timer, parts, batch)
    with timer.part("critic_forward"):
        values = losses.last_token_values(parts.critic(ro.input_ids, ro.attention_mask), ro.attention_mask)
    with timer.part("policy_forward"):
        logps, aux = rl_rollout.completion_logps(parts.policy, ro.input_ids, ro.attention_mask, ro.num_completion)
    mask = ro.completion_mask.to(logps.dtype)
    with timer.part("old_forward"), torch.no_grad():
        if parts.ppo_steps % a.update_old_actor_freq == 0:
            old_logps = ro.sample_logps
        else:
            old_logps, _ = rl_rollout.completion_logps(parts.old_actor, ro.input_ids, ro.attention_mask, ro.num_completion)
    with timer.part("reference"), torch.no_grad():
        ref_logps, _ = rl_rollout.completion_logps(parts.reference, ro.input_ids, ro.attention_mask, ro.num_completion)
    with timer.part("loss"):
        out = losses.ppo_losses((logps * mask).sum(dim=1), (old_logps * mask).sum(dim=1), (ref_logps * mask).sum(dim=1),
                            values.float(), rewards, a.clip_epsilon, a.vf_coef, a.kl_coef)
    optimizer_step(timer, parts, out["loss"] + aux)


def bench_rl(args, algo):
    """Seconds per step of `algo` and their split, for each model, baseline and current interleaved
    step by step in this process (the same batches for both), plus sampled tokens per second."""
    import torch

    from bench.rl_baseline import StepTimer

    if args.threads:
        torch.set_num_threads(args.threads)
    results = []
    for model_name in [c for c in args.configs if c in RL_MODELS]:
        impls = rl_implementations(algo, args.baseline or current_rl_step(algo) is None)
        parts = RLParts(algo, model_name, args.device, args.reward_model)
        batches = rl_batches(parts.tokenizer, parts.args.batch_size, parts.args.max_seq_len)
        timers = {name: StepTimer(args.device) for name, _ in impls}
        steps = args.rl_steps or RL_MODELS[model_name]["steps"]
        for i in range(steps + 1):  # step 0 warms up and is not counted
            batch = next(batches)
            for name, step in impls:
                torch.manual_seed(1000 + i)
                timer = timers[name] if i else StepTimer(args.device)
                step(timer, parts, batch)
        for name, _ in impls:
            t = timers[name]
            total, cpu_total = sum(t.seconds.values()), sum(t.cpu_seconds.values())
            results.append({"measurement": algo, "config": model_name, "implementation": name, "steps": steps,
                            "seconds_per_step": total / steps, "cpu_seconds_per_step": cpu_total / steps,
                            "parts": {k: v / steps for k, v in t.seconds.items()},
                            "cpu_parts": {k: v / steps for k, v in t.cpu_seconds.items()},
                            "sampled_tokens_per_s": t.sampled_tokens / max(t.seconds.get("sample", 0), 1e-9),
                            "sampled_tokens_per_cpu_s": t.sampled_tokens / max(t.cpu_seconds.get("sample", 0), 1e-9)})

    print(f"\n{algo}, {args.device}, threads {torch.get_num_threads()}, max_seq_len {RL_CONFIG['max_seq_len']}, "
          f"max_gen_len {RL_CONFIG['max_gen_len']}, batch_size {RL_CONFIG['batch_size']}"
          f"{', num_generations ' + str(RL_CONFIG['num_generations']) if algo == 'grpo' else ''}, reasoning 1, "
          f"reward model {args.reward_model}; seconds per step and its parts (wall, then CPU)")
    shown = [p for p in RL_PARTS if any(p in r["parts"] for r in results)]
    for clock, key, parts_key, tok in (("wall", "seconds_per_step", "parts", "sampled_tokens_per_s"),
                                       ("CPU", "cpu_seconds_per_step", "cpu_parts", "sampled_tokens_per_cpu_s")):
        print(f"{'config':<7} {'impl':<9} {clock + ' s/step':>11} " + " ".join(f"{p[:9]:>9}" for p in shown)
              + f" {'samp tok/s':>10}")
        for r in results:
            print(f"{r['config']:<7} {r['implementation']:<9} {r[key]:>11.3f} "
                  + " ".join(f"{r[parts_key].get(p, 0):>9.3f}" for p in shown) + f" {r[tok]:>10.0f}")
    for model_name in RL_MODELS:
        by = {r["implementation"]: r for r in results if r["config"] == model_name}
        if "baseline" in by and "current" in by:
            wall = by["current"]["seconds_per_step"] / by["baseline"]["seconds_per_step"]
            cpu = by["current"]["cpu_seconds_per_step"] / by["baseline"]["cpu_seconds_per_step"]
            print(f"{algo} {model_name}: current/baseline seconds per step = {wall:.2f}x wall, {cpu:.2f}x CPU "
                  f"(target {RL_TARGETS[algo]}x)")
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


#: Every measurement, by the name `--only` takes.
MEASUREMENTS = {"pretrain": bench_pretrain, "pretrain_compute": bench_pretrain_compute, "grpo": lambda args: bench_rl(args, "grpo"),
                "spo": lambda args: bench_rl(args, "spo"), "ppo": lambda args: bench_rl(args, "ppo"),
                "grpo_split": bench_grpo}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted(MEASUREMENTS), action="append",
                        help="run only this measurement (repeatable)")
    parser.add_argument("--configs", nargs="+", choices=list(PRETRAIN_CONFIGS), default=list(PRETRAIN_CONFIGS))
    parser.add_argument("--data", default=DEFAULT_DATA, help="pretrain jsonl")
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
