"""Held-out evaluation during training (ours, off unless --eval_data or --eval_holdout is given).

The held-out set is a second file in the training data's format (`--eval_data`), or the last
`--eval_holdout` rows of the training file, taken out of training (the split is written to the run's
`eval_split.json`). `loop.train` evaluates before the first step (step 0), every `--eval_interval`
optimizer steps (0: `--save_interval`) and after the last step, on the first `--eval_rows` held-out rows,
each process its share (rows rank, rank + world, ...), the sums all-reduced: every process gets the
means over all of them. The models are in eval mode under no_grad for it and go back to training
mode after; no random state of the training is touched, so a run trains exactly as without it.

What is measured goes to the run's metrics stream under stable names (`eval/...`):

- pretrain, SFT, LoRA, both distillations: `eval/loss`, the training loss function on held-out rows;
- DPO: `eval/loss`, `eval/reward_accuracy` (chosen beats rejected), `eval/reward_margin` (chosen minus
  rejected implicit reward);
- PPO, GRPO, SPO: greedy answers to the held-out prompts, scored by the run's reward functions:
  `eval/reward/mean`, `eval/reward/<part>/mean`, `eval/accuracy` (answer equals the reference),
  `eval/length/mean`, `eval/truncated_frac`; the same for answers sampled at a fixed seed (the run's
  temperature, top-k, top-p) under `eval/sampled/...`. Both answers to a prompt come from one batched
  call of the rollouts' sampler (the prompt encoded once, a key/value cache, stopping when every
  answer has ended, at most --max_gen_len tokens as in training). The answers themselves go to the
  rollout store's `probes` table (`mmcore.rollouts.probes`).

Each evaluation's seconds are recorded too, as `time/eval_s`.

A script builds one with `losses(...)` or `answers(...)`, which also take the held-out rows out of its
training set, and hands it to `loop.train(..., evaluation=...)`.
"""
import os
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist
from torch.utils.data import Subset

from trainer import trainer_utils as tu

PREFIX = "eval/"
#: The seed of the sampled held-out answers (each process adds its rank): the same answers at every
#: evaluation of the same weights.
SAMPLE_SEED = 20240917
MODES = ("greedy", "sampled")
#: Held-out prompts answered in one `model.sampling.sample` call, each twice (greedy and sampled): the
#: decoding loop's cost is mostly per token, not per row, so one call for all rows costs little more
#: than one for a few; the cap bounds the key/value cache of a long --eval_rows.
PROMPTS_PER_CALL = 64


def split(run, dataset, open_file):
    """(training set, held-out set or None, the split as written down or None) for the run's options:
    `open_file(path)` reads `--eval_data` with the training set's dataset class."""
    args = run.args
    if args.eval_holdout:
        total, held = len(dataset), args.eval_holdout
        if held >= total:
            raise tu.SetupError(f"--eval_holdout {held} leaves no training rows: {os.path.abspath(args.data_path)} "
                                f"has {total}")
        first = total - held
        return (Subset(dataset, range(first)), Subset(dataset, range(first, total)),
                {"source": "holdout", "data_path": os.path.abspath(args.data_path), "rows": total,
                 "held_out_rows": [first, total], "eval_rows": min(args.eval_rows, held)})
    if args.eval_data:
        if not os.path.isfile(args.eval_data):
            raise tu.SetupError(f"held-out file not found: {os.path.abspath(args.eval_data)} (--eval_data "
                                f"{args.eval_data})")
        held = open_file(args.eval_data)
        return dataset, held, {"source": "file", "eval_data": os.path.abspath(args.eval_data), "rows": len(held),
                               "eval_rows": min(args.eval_rows, len(held))}
    return dataset, None, None


@dataclass
class Evaluation:
    """What `loop.train` calls: `due(updates)` says whether an evaluation falls after optimizer step
    `updates`; `evaluate(parts, global_step)` runs one and returns the `eval/...` means.

    `measure(model, rows) -> (sums by name, rows measured, probe dicts)` runs on this process's share of
    the held-out set; `names` lists every name it may sum (the all-reduce's layout)."""
    run: object
    held_out: object
    split: dict
    names: tuple
    measure: Callable

    @property
    def interval(self):
        return self.run.args.eval_interval or self.run.args.save_interval

    def due(self, updates):
        return updates > 0 and updates % self.interval == 0

    def share(self):
        info = self.run.info
        return list(range(min(self.run.args.eval_rows, len(self.held_out))))[info.rank::info.world_size]

    def evaluate(self, parts, global_step):
        started = time.perf_counter()
        args, info = self.run.args, self.run.info
        modules = [p.module for p in parts]
        modes = [m.training for m in modules]
        cuda = tu.device_type(info.device) == "cuda"
        devices = [torch.device(info.device).index or 0] if cuda else []
        for m in modules:
            m.eval()
        try:
            with torch.random.fork_rng(devices=devices), torch.no_grad(), tu.autocast_context(info.device, args.dtype):
                sums, count, probes = self.measure(modules[0], self.share())
        finally:
            for m, mode in zip(modules, modes):
                m.train(mode)
        totals = torch.tensor([float(sums.get(n, 0.0)) for n in self.names] + [float(count)], dtype=torch.float64)
        if info.distributed:
            totals = totals.to("cuda" if dist.get_backend() == "nccl" else "cpu")
            dist.all_reduce(totals)
            gathered = [None] * info.world_size
            dist.all_gather_object(gathered, probes)
            probes = [row for rows in gathered for row in rows]
        probes.sort(key=lambda p: (MODES.index(p["mode"]), p["row"]))
        totals = totals.cpu().tolist()
        rows = max(totals[-1], 1.0)
        means = {PREFIX + n: total / rows for n, total in zip(self.names, totals)}
        if probes and self.run.records is not None:
            self.run.records.records.add_probes(global_step, probes)
        tu.log(f"Eval step {global_step}: " + " ".join(f"{name}:{value:.6f}" for name, value in means.items()))
        means["time/eval_s"] = time.perf_counter() - started  # what evaluating cost (bench/bench_eval.py)
        return means


def _batches(rows, size):
    return [rows[i:i + size] for i in range(0, len(rows), size)]


def losses(run, dataset, open_file, collate_fn, loss_fn, names=("loss",), named=None):
    """(training set, Evaluation or None) of a supervised type: `loss_fn(model, batch) -> (loss, metrics)`
    (the training loss) over batches of --batch_size held-out rows, each batch's values counted once per
    row. `named(loss, metrics) -> {name: value}` picks what is recorded (default: the loss as `loss`)."""
    train_set, held, written = split(run, dataset, open_file)
    if held is None:
        return train_set, None
    named = named or (lambda loss, metrics: {"loss": loss})
    args, device = run.args, run.info.device

    def measure(model, rows):
        sums, count = {}, 0
        for chunk in _batches(rows, args.batch_size):
            batch = tu.to_device(collate_fn([held[i] for i in chunk]), device)
            loss, metrics = loss_fn(model, batch)
            values = named(float(loss), {k: float(v) for k, v in metrics.items()})
            for name, value in values.items():
                sums[name] = sums.get(name, 0.0) + value * len(chunk)
            count += len(chunk)
        return sums, count, []
    return train_set, Evaluation(run, held, written, tuple(names), measure)


def answers(run, dataset, open_file, tokenizer, reward_fns):
    """(training set, Evaluation or None) of an RL type: greedy and fixed-seed sampled answers to the
    held-out prompts (RLAIF rows: `prompt`, `answer`), scored by `reward_fns` (see the module docstring)."""
    train_set, held, written = split(run, dataset, open_file)
    if held is None:
        return train_set, None
    from model.sampling import sample
    from trainer.rl import rewards
    from trainer.rl.rollout import decode, encode_prompts
    from trainer.rl.step_metrics import truncated

    args, info = run.args, run.info
    weights = {f.name: f.weight for f in reward_fns}
    names = []
    for mode in MODES:
        prefix = "" if mode == "greedy" else "sampled/"
        names += [f"{prefix}reward/mean", *(f"{prefix}reward/{f.name}/mean" for f in reward_fns),
                  f"{prefix}accuracy", f"{prefix}length/mean", f"{prefix}truncated_frac"]

    def measure(model, rows):
        sums, probes = {}, []
        generator = torch.Generator(device=info.device).manual_seed(SAMPLE_SEED + info.rank)
        for chunk in _batches(rows, PROMPTS_PER_CALL):
            items = [held[i] for i in chunk]
            prompts, references = [it["prompt"] for it in items], [it["answer"] for it in items]
            ids, mask = encode_prompts(tokenizer, prompts, args.max_seq_len, info.device)
            # Each prompt encoded once and answered twice, prompt-major: row 2j greedy, row 2j + 1 sampled.
            greedy = torch.tensor([mode == "greedy" for mode in MODES], device=info.device).repeat(len(chunk))
            out = sample(model, ids, mask, args.max_gen_len, eos_id=tokenizer.eos_token_id,
                         pad_id=tokenizer.pad_token_id, num_samples=len(MODES), temperature=args.temperature,
                         top_k=args.top_k, top_p=args.top_p, greedy=greedy, generator=generator)
            responses = decode(tokenizer, out.tokens, out.mask)
            asked = [(i, mode, prompt, reference)
                     for i, prompt, reference in zip(chunk, prompts, references) for mode in MODES]
            total, parts = rewards.score(reward_fns, [a[2] for a in asked], responses, [a[3] for a in asked])
            lengths = out.mask.sum(dim=1).cpu().tolist()
            cut = truncated(out.tokens, tokenizer.eos_token_id).cpu().tolist()
            for k, (i, mode, prompt, reference) in enumerate(asked):
                prefix = "" if mode == "greedy" else "sampled/"
                accuracy = rewards.rule_reward(responses[k], reference, args.reasoning)
                values = {"reward/mean": float(total[k]), "accuracy": accuracy, "length/mean": lengths[k],
                          "truncated_frac": float(cut[k]),
                          **{f"reward/{name}/mean": float(v[k]) for name, v in parts.items()}}
                for name, value in values.items():
                    sums[prefix + name] = sums.get(prefix + name, 0.0) + float(value)
                probes.append({"mode": mode, "row": i, "prompt": prompt, "reference": reference,
                               "response": responses[k], "reward": float(total[k]),
                               "parts": {name: weights[name] * float(v[k]) for name, v in parts.items()},
                               "accuracy": accuracy, "length": int(lengths[k]), "truncated": bool(cut[k])})
        return sums, len(rows), probes
    return train_set, Evaluation(run, held, written, tuple(names), measure)
