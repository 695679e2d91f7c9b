"""Side by side with upstream MiniMind: seconds per training step of each type, this project's trainers
against upstream's own training step, on one base weight, the same data and the same machine.

    python -m bench.bench_vs_upstream --upstream ../minimind                 # 512x8, every type
    python -m bench.bench_vs_upstream --upstream DIR --hidden 64 --layers 2 --steps 2 --types pretrain grpo

(from the repository root, so that this checkout's code is the one measured; each side's child process
gets its side's root first on PYTHONPATH.)

`--upstream DIR` is a local checkout of upstream MiniMind (the version docs/UPSTREAM.md compares
against: PR 524); nothing is downloaded. Upstream's model and its training step (`train_epoch` of
`trainer/train_pretrain.py`, `train_full_sft.py`, `train_dpo.py`, `grpo_train_epoch`, `ppo_train_epoch`,
`spo_train_epoch`, with the module globals their `__main__` blocks set) run in one child process with
DIR first on its path; this project's trainers' steps run in another. Both load one base weight (this
project's model, seed 0; the parameter names are upstream's), read the same rows in the same order
through their own dataset classes and this project's tokenizer, and take turns step by step (ours,
upstream, upstream, ours, ...), so a busy machine slows both alike. The figures are medians over
`--steps` timed steps after `--warmup` untimed ones per side: a process's first steps run slower (on a
quiet machine, with one warm-up step, the first case measured ours at 0.88x upstream's speed; 1.12x
once both were warm).

Cases (`--types`): pretrain, sft and dpo on `full` rows (every row filled to max_seq_len: the demo
documents or conversations concatenated, then cut by both sides' truncation; no padding for either
side to skip) and on `short` rows (the bundled demo data: upstream pads each row to max_seq_len,
ours to the batch's longest), plus ours with `--pack 1` on the short rows where the type has a
packed dataset; grpo, ppo and spo with upstream's prompt length (66), 64 new tokens, 2 prompts a step
(GRPO: 4 responses each, 8 rows decoded together). Every type updates the weights every step
(accumulation 1), in float32.

Columns: seconds per step (wall; upstream, ours, and upstream/ours: above 1 = ours faster); useful
tokens/s (tokens whose loss counts; RL: response tokens up to their end) and computed tokens/s
(positions the model runs on; RL: decoded positions); `comp x`: ours/upstream computed tokens per
second; and each side's model FLOP/s as a share of a measured float32 GEMM peak (`torch.mm` at the
model's largest matrix shape, same threads). Model FLOPs are counted the same way for both sides from
the batch: 6 N per trained position, 2 N per forward-only or decoded position (N = the weights of every
matrix product, output head included), plus 2 x layers x hidden x row length per position and pass
for attention; a side that skips work shows as a higher share.

Upstream as of PR 524 reads its KV cache as a list of tuples; transformers >= 5 hands `generate()`'s
cache over under another name, which that model ignores, so its `generate()` would decode each new
token without context. The upstream child therefore decodes upstream's own model with its own tuple
cache in the loop transformers 4.x's `generate()` ran (prompt rows repeated per return sequence, logits
of the last position, temperature 0.8, top-k 50, stop when every row has ended); without
generate()'s per-token bookkeeping this loop is if anything faster than upstream's. Upstream's RL
steps need a reward model: the child gives them one that scores 0 (this project's side scores with
its rule rewards; both cost next to nothing), so the measurement is the training, not a reward model.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER_DIR = os.path.join(ROOT, "model")
DEMO = os.path.join(ROOT, "dataset", "demo")
#: Steps so large that upstream's loops never reach their epoch-end log and save (`step == iters - 1`).
NEVER = 10 ** 9

SUPERVISED = {  # type -> batch size, max_seq_len, demo file, upstream script and learning rate
    "pretrain": dict(batch_size=4, max_seq_len=256, data="pretrain.jsonl", script="train_pretrain", lr=5e-4),
    "sft": dict(batch_size=4, max_seq_len=256, data="sft.jsonl", script="train_full_sft", lr=1e-6),
    "dpo": dict(batch_size=2, max_seq_len=256, data="dpo.jsonl", script="train_dpo", lr=4e-8),
}
RL_TYPES = ("grpo", "ppo", "spo")
TYPES = tuple(SUPERVISED) + RL_TYPES
#: The RL setting of both sides (upstream's names; this project's side reads bench_rl_steps.RL_CONFIG,
#: which holds the same values).
RL = dict(max_seq_len=66, max_gen_len=64, batch_size=2, num_generations=4, beta=0.02, reasoning=1, clip_epsilon=0.1,
          vf_coef=0.5, kl_coef=0.02, update_old_actor_freq=4, lr=8e-8, temperature=0.8, top_k=50)


# ---------------------------------------------------------------------------------------------------
# Shared by both children: the protocol and the FLOP count


def _reply(out, message):
    out.write(json.dumps(message) + "\n")
    out.flush()


def matmul_params(hidden, layers, vocab=6400, heads=8, kv_heads=2):
    """Weights of every matrix product of a dense MiniMind per token (attention, feed-forward, head)."""
    head_dim = hidden // heads
    inter = 64 * ((int(hidden * 8 / 3) + 63) // 64)
    per_layer = 2 * hidden * hidden + 2 * hidden * kv_heads * head_dim + 3 * hidden * inter
    return layers * per_layer + vocab * hidden


def model_flops(work, hidden, layers):
    """Model FLOPs of a step from its `work` counts (see the module docstring)."""
    n = matmul_params(hidden, layers)
    attention = 2 * layers * hidden * work.get("row_len", 0)
    return (work.get("train", 0) * (6 * n + 3 * attention) + work.get("forward", 0) * (2 * n + attention)
            + work.get("decode", 0) * 2 * n)


def _timed(fn):
    start, start_cpu = time.perf_counter(), time.process_time()
    counts = fn()
    return {"wall": time.perf_counter() - start, "cpu": time.process_time() - start_cpu, **counts}


def _rows(dataset, batch_size, step):
    """The items of batch `step` (0-based), in file order, wrapping around."""
    return [dataset[(step * batch_size + j) % len(dataset)] for j in range(batch_size)]


# ---------------------------------------------------------------------------------------------------
# The upstream child


class _ZeroRewardModel:
    """Stands in for upstream's InternLM reward model (`get_score(tokenizer, messages)`): scores 0."""

    def get_score(self, tokenizer, messages):
        return 0.0


def _legacy_generate(model, input_ids=None, attention_mask=None, max_new_tokens=20, do_sample=True, temperature=1.0,
                     num_return_sequences=1, pad_token_id=None, eos_token_id=None, top_k=50, record=None, **_):
    """Sampling with upstream's tuple KV cache, as transformers 4.x's `generate()` drove it."""
    import torch
    eos = model.config.eos_token_id if eos_token_id is None else eos_token_id
    ids = input_ids.repeat_interleave(num_return_sequences, dim=0)
    mask = (torch.ones_like(ids) if attention_mask is None
            else attention_mask.repeat_interleave(num_return_sequences, dim=0))
    unfinished = torch.ones(ids.size(0), dtype=torch.bool, device=ids.device)
    past, step_ids, steps = None, ids, 0
    for _ in range(max_new_tokens):
        out = model(input_ids=step_ids, attention_mask=mask, past_key_values=past, use_cache=True, logits_to_keep=1)
        past = out.past_key_values
        logits = out.logits[:, -1, :].float() / temperature
        if top_k:
            kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        token = (torch.multinomial(logits.softmax(dim=-1), 1).squeeze(1) if do_sample else logits.argmax(dim=-1))
        token = torch.where(unfinished, token, torch.full_like(token, pad_token_id))
        ids = torch.cat([ids, token[:, None]], dim=1)
        mask = torch.cat([mask, mask.new_ones(mask.size(0), 1)], dim=1)
        step_ids, steps = token[:, None], steps + 1
        unfinished &= token != eos
        if not bool(unfinished.any()):
            break
    if record is not None:
        completion = ids[:, input_ids.size(1):]
        ended = (completion == eos).int()
        record.update(rows=ids.size(0), row_len=ids.size(1), decode=ids.size(0) * steps,
                      useful=int(((ended.cumsum(1) - ended) == 0).sum()))
    return ids


class UpstreamSide:
    """Upstream's training steps, from the modules of an upstream checkout (`root`)."""

    def __init__(self, root, base_path, hidden, layers, device, workdir):
        import importlib
        import types
        self.root, self.device, self.workdir = os.path.abspath(root), device, workdir
        self.hidden, self.layers = hidden, layers
        self.importlib, self.types = importlib, types
        mm = importlib.import_module("model.model_minimind")
        if not os.path.abspath(mm.__file__).startswith(self.root + os.sep):
            raise SystemExit(f"model.model_minimind came from {mm.__file__}, not from {self.root}")
        self.mm = mm
        import torch
        self.torch = torch
        self.base = torch.load(base_path, map_location="cpu", weights_only=True)
        from transformers import AutoTokenizer
        self.tokenizer = AutoTokenizer.from_pretrained(TOKENIZER_DIR)
        self.datasets = importlib.import_module("dataset.lm_dataset")
        self.step_fn = None

    def _model(self, config, frozen=False):
        model = self.mm.MiniMindForCausalLM(config)
        model.load_state_dict(self.base, strict=False)
        model = model.to(self.device)
        return model.eval().requires_grad_(False) if frozen else model

    def _args(self, **kw):
        return argparse.Namespace(device=self.device, epochs=1, accumulation_steps=1, grad_clip=1.0, log_interval=NEVER,
                                  save_interval=NEVER, save_dir=os.path.join(self.workdir, "upstream-out"),
                                  save_weight="bench", dtype="float32", **kw)

    def setup(self, case):
        from contextlib import nullcontext

        from torch.utils.data import default_collate
        torch = self.torch
        kind = case["type"]
        torch.manual_seed(0)
        if kind in SUPERVISED:
            spec = SUPERVISED[kind]
            mod = self.importlib.import_module(f"trainer.{spec['script']}")
            config = self.mm.MiniMindConfig(hidden_size=self.hidden, num_hidden_layers=self.layers)
            dataset_class = getattr(self.datasets, {"pretrain": "PretrainDataset", "sft": "SFTDataset",
                                                    "dpo": "DPODataset"}[kind])
            dataset = dataset_class(case["data"], self.tokenizer, max_length=spec["max_seq_len"])
            mod.args = self._args(learning_rate=spec["lr"])
            mod.model = self._model(config)
            mod.model.train()
            mod.optimizer = torch.optim.AdamW(mod.model.parameters(), lr=spec["lr"])
            mod.scaler = torch.amp.GradScaler("cuda", enabled=False)
            mod.autocast_ctx, mod.lm_config = nullcontext(), config
            ref = self._model(config, frozen=True) if kind == "dpo" else None

            def step(k):
                batch = default_collate(_rows(dataset, spec["batch_size"], k))
                if kind == "dpo":
                    mod.train_epoch(0, [batch], NEVER, ref, config, start_step=k, wandb=None, beta=0.1)
                    x = torch.cat([batch["x_chosen"], batch["x_rejected"]])
                    mask = torch.cat([batch["mask_chosen"], batch["mask_rejected"]])
                    work = {"train": x.numel(), "forward": x.numel(), "row_len": x.size(1)}
                else:
                    mod.train_epoch(0, [batch], NEVER, start_step=k)
                    x, _, mask = batch
                    work = {"train": x.numel(), "row_len": x.size(1)}
                return {"useful": int(mask.sum()), "computed": x.numel(), "work": work}
        else:
            step = self._rl_setup(kind, default_collate)
        self.step_fn = step
        return {}

    def _rl_setup(self, kind, default_collate):
        from contextlib import nullcontext

        from torch.optim.lr_scheduler import CosineAnnealingLR
        torch = self.torch
        mod = self.importlib.import_module(f"trainer.train_{kind}")
        config = self.mm.MiniMindConfig(hidden_size=self.hidden, num_hidden_layers=self.layers,
                                        max_seq_len=RL["max_seq_len"] + RL["max_gen_len"])
        dataset = self.datasets.RLAIFDataset(os.path.join(DEMO, "rlaif.jsonl"), self.tokenizer,
                                             max_length=RL["max_seq_len"] + RL["max_gen_len"])
        n = RL["num_generations"] if kind == "grpo" else 1
        mod.args = self._args(learning_rate=RL["lr"], critic_learning_rate=RL["lr"], num_generations=n,
                              **{k: RL[k] for k in ("max_seq_len", "max_gen_len", "beta", "reasoning", "clip_epsilon",
                                                    "vf_coef", "kl_coef", "update_old_actor_freq")})
        mod.tokenizer, mod.autocast_ctx, mod.lm_config = self.tokenizer, nullcontext(), config
        record = {}

        def with_generate(model):  # upstream's generate(), decoding with upstream's own cache (module docstring)
            model.generate = self.types.MethodType(
                lambda m, **kw: _legacy_generate(m, top_k=RL["top_k"], record=record, **kw), model)
            return model

        reward_model, ref = _ZeroRewardModel(), self._model(config, frozen=True)
        if kind == "ppo":
            mod.actor_model = with_generate(self._model(config))
            mod.old_actor_model = self._model(config, frozen=True)
            mod.critic_model = mod.CriticModel(config)
            mod.critic_model.load_state_dict(self.base, strict=False)
            mod.critic_model = mod.critic_model.to(self.device)
            mod.actor_optimizer = torch.optim.AdamW(mod.actor_model.parameters(), lr=RL["lr"])
            mod.critic_optimizer = torch.optim.AdamW(mod.critic_model.parameters(), lr=RL["lr"])
            schedulers = [CosineAnnealingLR(o, T_max=1000, eta_min=RL["lr"] / 10)
                          for o in (mod.actor_optimizer, mod.critic_optimizer)]
            mod.actor_model.train()
        else:
            mod.model = with_generate(self._model(config))
            mod.model.train()
            mod.optimizer = torch.optim.AdamW(mod.model.parameters(), lr=RL["lr"])
            mod.scheduler = CosineAnnealingLR(mod.optimizer, T_max=1000, eta_min=RL["lr"] / 10)
        tracker = mod.AutoAdaptiveValueTracker() if kind == "spo" else None

        def step(k):
            torch.manual_seed(1000 + k)
            batch = default_collate(_rows(dataset, RL["batch_size"], k))
            args = (0, [batch], NEVER)
            if kind == "grpo":
                mod.grpo_train_epoch(*args, ref, reward_model, None, start_step=k)
            elif kind == "spo":
                mod.spo_train_epoch(*args, ref, reward_model, None, tracker, start_step=k)
            else:
                mod.ppo_train_epoch(*args, mod.old_actor_model, ref, *schedulers, reward_model, None, start_step=k)
            positions = record["rows"] * record["row_len"]
            passes = 2 if kind == "ppo" else 1  # PPO: the actor and the critic train, old actor and reference look
            work = {"train": passes * positions, "forward": passes * positions, "decode": record["decode"],
                    "row_len": record["row_len"]}
            return {"useful": record["useful"], "computed": record["decode"], "work": work}
        return step

    def step(self, k):
        return _timed(lambda: self.step_fn(k))


# ---------------------------------------------------------------------------------------------------
# This project's child


class OursSide:
    """This project's training steps: the trainers' loss functions, optimizer and update (`trainer.loop`)."""

    def __init__(self, base_path, hidden, layers, device, workdir):
        import torch

        from trainer import trainer_utils as tu
        self.torch, self.tu, self.device = torch, tu, device
        self.hidden, self.layers = hidden, layers
        self.base = torch.load(base_path, map_location="cpu", weights_only=True)
        self.tokenizer = tu.load_tokenizer()
        self.step_fn = None

    def _model(self, frozen=False):
        model, _ = self.tu.init_model(self.tu.model_config(self.hidden, self.layers, False), "none", ".", self.device,
                                      tokenizer=False)
        model.load_state_dict(self.base)
        return model.eval().requires_grad_(False) if frozen else model.train()

    def setup(self, case):
        torch = self.torch
        kind = case["type"]
        torch.manual_seed(0)
        if kind in RL_TYPES:
            self.step_fn = self._rl_setup(kind)
            return {}
        from dataset import lm_dataset
        from trainer import loop
        from trainer.train_pretrain import lm_loss
        spec = SUPERVISED[kind]
        dataset_class = {"pretrain": lm_dataset.PretrainDataset, "sft": lm_dataset.SFTDataset,
                         "dpo": lm_dataset.DPODataset}[kind]
        if case.get("pack"):
            dataset_class = lm_dataset.packed_dataset(dataset_class)
        dataset = dataset_class(case["data"], self.tokenizer, spec["max_seq_len"])
        collate = lm_dataset.pad_collate(self.tokenizer.pad_token_id)
        model = self._model()
        part = loop.Part("model", model, loop.make_optimizer(model.parameters(), spec["lr"]), spec["lr"])
        scaler = self.tu.make_grad_scaler(self.device, "float32")
        if kind == "dpo":
            from trainer.train_dpo import make_dpo_loss_fn
            dpo_loss = make_dpo_loss_fn(self._model(frozen=True), 0.1, self.tokenizer.pad_token_id)

            def loss_fn(batch):
                return dpo_loss(model, batch)[0]
        else:
            def loss_fn(batch):
                return lm_loss(model, batch)[0]

        def step(k):  # one micro-step of trainer.loop.train with accumulation 1
            batch = self.tu.to_device(collate(_rows(dataset, spec["batch_size"], k)), self.device)
            for group in part.optimizer.param_groups:
                group["lr"] = loop.get_lr(k + 1, NEVER, spec["lr"])
            scaler.scale(loss_fn(batch)).backward()
            loop._optimizer_step([part], scaler, 1.0)
            if kind == "dpo":
                useful = sum(int((batch[f"{side}_labels"][:, 1:] != -100).sum()) for side in ("chosen", "rejected"))
                rows, length = 2 * batch["chosen_input_ids"].size(0), max(batch["chosen_input_ids"].size(1),
                                                                           batch["rejected_input_ids"].size(1))
                work = {"train": rows * length, "forward": rows * length, "row_len": length}
                return {"useful": useful, "computed": rows * length, "work": work}
            ids = batch["input_ids"]
            computed = ids.size(0) * (ids.size(1) - 1)  # a dense body skips the last position
            return {"useful": int((batch["labels"][:, 1:] != -100).sum()), "computed": computed,
                    "work": {"train": computed, "row_len": ids.size(1) - 1}}
        self.step_fn = step
        return {}

    def _rl_setup(self, kind):
        from bench.bench_rl_steps import RL_CONFIG, RLParts, current_rl_step, rl_batches
        from bench.rl_baseline import StepTimer
        assert all(RL_CONFIG[k] == RL[k] for k in ("max_seq_len", "max_gen_len", "batch_size", "num_generations",
                                                   "beta", "reasoning"))
        parts = RLParts(kind, None, self.device, hidden_size=self.hidden, num_hidden_layers=self.layers,
                        base_state=self.base)
        batches = rl_batches(parts.tokenizer, RL["batch_size"], RL["max_seq_len"])
        step_of = current_rl_step(kind)

        def step(k):
            self.torch.manual_seed(1000 + k)
            timer = StepTimer(self.device)
            step_of(timer, parts, next(batches))
            ro = timer.rollout
            rows, row_len = ro.input_ids.shape
            passes = 2 if kind == "ppo" else 1
            work = {"train": passes * rows * row_len, "forward": passes * rows * row_len,
                    "decode": ro.completion_mask.numel(), "row_len": row_len}
            return {"useful": int(ro.completion_mask.sum()), "computed": ro.completion_mask.numel(), "work": work}
        return step

    def step(self, k):
        return _timed(lambda: self.step_fn(k))


def serve(args):
    """A child: answer the parent's commands (JSON lines on stdin) on the real stdout; anything the
    training code prints goes to stderr."""
    out = sys.stdout
    sys.stdout = sys.stderr
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    if args._child == "upstream":
        side = UpstreamSide(args.upstream, args._base, args.hidden, args.layers, args.device, args._workdir)
    else:
        side = OursSide(args._base, args.hidden, args.layers, args.device, args._workdir)
    _reply(out, {"ready": True, "threads": torch.get_num_threads()})
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "quit":
            break
        result = side.setup(command["case"]) if command["op"] == "setup" else side.step(command["k"])
        _reply(out, result)


# ---------------------------------------------------------------------------------------------------
# The parent


class Child:
    """One side's process."""

    def __init__(self, side, args, base, workdir):
        cmd = [sys.executable, os.path.abspath(__file__), "--_child", side, "--_base", base, "--_workdir", workdir,
               "--hidden", str(args.hidden), "--layers", str(args.layers), "--threads", str(args.threads),
               "--device", args.device]
        if side == "upstream":
            cmd += ["--upstream", os.path.abspath(args.upstream)]
        self.side = side
        self.log = open(os.path.join(workdir, f"{side}.log"), "w")
        # Upstream's child runs from its trainer folder (its scripts' relative paths start there).
        cwd = os.path.join(os.path.abspath(args.upstream), "trainer") if side == "upstream" else ROOT
        # Its side's packages (model, dataset, trainer) come first: upstream's checkout, or this one.
        first = os.path.abspath(args.upstream) if side == "upstream" else ROOT
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([first, *filter(None, [os.environ.get("PYTHONPATH")])])}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     cwd=cwd, env=env)
        self.hello = self._read()

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            self.log.flush()
            with open(self.log.name) as f:
                tail = f.read()[-4000:]
            raise SystemExit(f"the {self.side} side stopped:\n{tail}")
        return json.loads(line)

    def ask(self, **command):
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self):
        try:
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        self.log.close()


def gemm_peak(threads, shape=(1024, 512, 1408), reps=10):
    """Measured float32 GEMM rate (GFLOP/s): the best of a few timings of `torch.mm` at the model's
    largest matrix shape (rows x hidden x feed-forward width)."""
    import torch
    if threads:
        torch.set_num_threads(threads)
    m, k, n = shape
    a, b = torch.randn(m, k), torch.randn(k, n)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b)
        best = min(best, (time.perf_counter() - start) / reps)
    return 2 * m * k * n / best / 1e9


def full_row_files(workdir, max_seq_len):
    """Data whose every row fills `max_seq_len` tokens: consecutive demo documents (pretrain) or
    conversations (sft; dpo: chosen with chosen, rejected with rejected) joined until they are longer."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(TOKENIZER_DIR)
    need = max_seq_len + 16

    def length(messages):
        return len(tok.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"])

    def read(name):
        with open(os.path.join(DEMO, name), encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def write(name, records):
        path = os.path.join(workdir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        return path

    def joined(items, long_enough, join, count=48):
        records, i = [], 0
        while len(records) < count:
            acc = items[i % len(items)]
            i += 1
            while not long_enough(acc):
                acc = join(acc, items[i % len(items)])
                i += 1
            records.append(acc)
        return records

    texts = [r["text"] for r in read("pretrain.jsonl")]
    pretrain = joined(texts, lambda t: len(tok(t)["input_ids"]) >= need, lambda a, b: a + b)
    convs = [r["conversations"] for r in read("sft.jsonl")]
    sft = joined(convs, lambda c: length(c) >= need, lambda a, b: a + b)
    pairs = [(r["chosen"], r["rejected"]) for r in read("dpo.jsonl")]
    dpo = joined(pairs, lambda p: min(length(p[0]), length(p[1])) >= need, lambda a, b: (a[0] + b[0], a[1] + b[1]))
    return {"pretrain": write("pretrain_full.jsonl", [{"text": t} for t in pretrain]),
            "sft": write("sft_full.jsonl", [{"conversations": c} for c in sft]),
            "dpo": write("dpo_full.jsonl", [{"chosen": c, "rejected": r} for c, r in dpo])}


def cases(types):
    """(label, case) pairs to measure, in order."""
    from dataset import lm_dataset
    out = []
    for kind in types:
        if kind in RL_TYPES:
            out.append((kind, {"type": kind}))
            continue
        out.append((f"{kind} full", {"type": kind, "rows": "full"}))
        out.append((f"{kind} short", {"type": kind, "rows": "short"}))
        plain = {"pretrain": lm_dataset.PretrainDataset, "sft": lm_dataset.SFTDataset, "dpo": lm_dataset.DPODataset}
        try:
            lm_dataset.packed_dataset(plain[kind])
            out.append((f"{kind} short, ours --pack 1", {"type": kind, "rows": "short", "pack": True}))
        except (AttributeError, ValueError):  # this type has no packed dataset
            pass
    return out


def measure(children, case, steps, warmup):
    """Set both sides up for `case`, run `warmup` untimed steps each, then `steps` timed steps each,
    taking turns (ours first on even steps, upstream first on odd ones). Returns {side: [step results]}."""
    for child in children.values():
        child.ask(op="setup", case=case)
    for k in range(warmup):
        for child in children.values():
            child.ask(op="step", k=k)
    results = {side: [] for side in children}
    for i in range(warmup, warmup + steps):
        order = ("ours", "upstream") if i % 2 == 0 else ("upstream", "ours")
        for side in order:
            results[side].append(children[side].ask(op="step", k=i))
    return results


def summarise(label, results, hidden, layers, peak):
    row = {"case": label}
    for side, steps in results.items():
        wall = statistics.median(s["wall"] for s in steps)
        cpu = statistics.median(s["cpu"] for s in steps)
        useful = statistics.median(s["useful"] for s in steps)
        computed = statistics.median(s["computed"] for s in steps)
        flops = statistics.median(model_flops(s["work"], hidden, layers) / s["wall"] for s in steps)
        row[side] = {"s_per_step": wall, "cpu_s_per_step": cpu, "useful_tok_s": useful / wall,
                     "computed_tok_s": computed / wall, "peak_share": flops / 1e9 / peak,
                     "walls": [round(s["wall"], 3) for s in steps]}
    row["ratio"] = row["upstream"]["s_per_step"] / row["ours"]["s_per_step"]
    row["cpu_ratio"] = row["upstream"]["cpu_s_per_step"] / row["ours"]["cpu_s_per_step"]
    row["computed_ratio"] = row["ours"]["computed_tok_s"] / row["upstream"]["computed_tok_s"]
    row["useful_ratio"] = row["ours"]["useful_tok_s"] / row["upstream"]["useful_tok_s"]
    return row


def cpu_name():
    """The processor's model name (Linux), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def print_table(rows, args, peak, load):
    print(f"\nbench_vs_upstream: {args.hidden}x{args.layers}, {args.device}, threads {args.threads or 'default'}, "
          f"{args.steps} timed steps per side (medians), float32 GEMM peak {peak:.0f} GFLOP/s, {cpu_name()}, "
          f"{os.cpu_count()} CPUs, load average {load[0]:.2f} at start, {load[1]:.2f} at end")
    print("ratio: upstream s/step / ours (wall; cpu: the same in CPU seconds); useful x, comp x: ours / upstream "
          "tokens per second")
    head = (f"{'case':<30} {'up s/step':>9} {'ours':>7} {'ratio':>6} {'cpu':>5} {'useful tok/s up':>15} {'ours':>6} "
            f"{'useful x':>8} {'computed tok/s up':>17} {'ours':>6} {'comp x':>6} {'% peak up':>9} {'ours':>5}")
    print(head)
    for r in rows:
        u, o = r["upstream"], r["ours"]
        print(f"{r['case']:<30} {u['s_per_step']:>9.3f} {o['s_per_step']:>7.3f} {r['ratio']:>6.2f} "
              f"{r['cpu_ratio']:>5.2f} "
              f"{u['useful_tok_s']:>15.0f} {o['useful_tok_s']:>6.0f} {r['useful_ratio']:>8.2f} "
              f"{u['computed_tok_s']:>17.0f} {o['computed_tok_s']:>6.0f} {r['computed_ratio']:>6.2f} "
              f"{100 * u['peak_share']:>8.0f}% {100 * o['peak_share']:>4.0f}%")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", help="a local checkout of upstream MiniMind (never downloaded)")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per side and case")
    parser.add_argument("--warmup", type=int, default=2,
                        help="untimed steps per side and case first (the first steps of a process run slower)")
    parser.add_argument("--types", nargs="+", choices=TYPES, default=list(TYPES))
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads per side (0 = torch default); 1 keeps figures steady on a busy machine")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    parser.add_argument("--_child", choices=("ours", "upstream"), help=argparse.SUPPRESS)
    parser.add_argument("--_base", help=argparse.SUPPRESS)
    parser.add_argument("--_workdir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._child:
        return serve(args)
    if not args.upstream or not os.path.isfile(os.path.join(args.upstream, "model", "model_minimind.py")):
        parser.error("--upstream DIR must be a local upstream MiniMind checkout (DIR/model/model_minimind.py)")
    import torch

    from trainer import trainer_utils as tu
    load_start = os.getloadavg()[0]
    peak = gemm_peak(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench_vs_upstream_") as workdir:
        torch.manual_seed(0)
        base, _ = tu.init_model(tu.model_config(args.hidden, args.layers, False), "none", ".", "cpu", tokenizer=False)
        base_path = os.path.join(workdir, "base.pth")
        torch.save(base.state_dict(), base_path)
        full = full_row_files(workdir, max(spec["max_seq_len"] for spec in SUPERVISED.values()))
        children = {side: Child(side, args, base_path, workdir) for side in ("ours", "upstream")}
        rows = []
        try:
            for label, case in cases(args.types):
                if case["type"] in SUPERVISED:
                    case["data"] = (full[case["type"]] if case["rows"] == "full"
                                    else os.path.join(DEMO, SUPERVISED[case["type"]]["data"]))
                results = measure(children, case, args.steps, args.warmup)
                rows.append(summarise(label, results, args.hidden, args.layers, peak))
                r = rows[-1]
                print(f"  {label}: upstream {r['upstream']['s_per_step']:.3f} s/step, ours {r['ours']['s_per_step']:.3f} "
                      f"({r['ratio']:.2f}x; CPU {r['cpu_ratio']:.2f}x; useful tokens/s {r['useful_ratio']:.2f}x)",
                      flush=True)
        finally:
            for child in children.values():
                child.close()
    print_table(rows, args, peak, (load_start, os.getloadavg()[0]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"peak_gflops": peak, "threads": args.threads, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
