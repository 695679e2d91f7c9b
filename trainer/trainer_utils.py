"""Building blocks of the MiniMind training scripts: processes, output, precision, models, data.

The scripts' shape and their one training loop live in `trainer.loop`; resume state and weight files
in `trainer.checkpoint`; the RL maths in `trainer.rl`, built into the RL scripts by `trainer.rl_setup`;
`SetupError` and `MissingWeightError` in `trainer.rules.setup_errors`. Here, roughly in script order:

- `script_main(main)`: runs a script's `main()`; a setup error (missing data or weight file, bad data
  line) becomes one `ERROR: ...` line and exit status 1, a SIGTERM exit status 143, and the process
  group is always torn down.
- `init_distributed(args)`: plain process or torchrun (NCCL on CUDA, gloo on CPU); returns a `DistInfo`.
- `setup_seed`, `autocast_context`, `make_grad_scaler`.
- `model_config`, `load_tokenizer`, `init_model` (reads `{weight_dir}/{name}_{h}[_moe].pth`, named by
  `trainer.rules.specs.weight_file`; a missing one names the fix: `missing_weight_fix`), `log_model_size`,
  `unwrap_model`, `wrap_ddp`.
- `load_dataset` (checks the file first; `--pack 1`: the packed dataset), `lm_collate` (pad to the longest
  row, or to max_seq_len for MoE as upstream), `make_loader` (per-epoch deterministic shuffle, resume skipping).
- `log`, `warn`: rank-0 output, one flushed line each.

Directories follow upstream MiniMind: scripts run in `trainer/`, so `../out` is `<repo>/out`; the
resume state always lives in `<repo>/checkpoints` (resolved from this file's location, not the
working directory).
"""
import math
import os
import random
import signal
import sys
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, Sampler

from trainer.rules.setup_errors import MissingWeightError, SetupError, pack_refusal
from trainer.rules.specs import rl_base_weight, weight_file

TRAINER_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TRAINER_DIR)

#: Where resume states are written: `../checkpoints` seen from trainer/, like upstream.
CHECKPOINT_DIR = os.path.join(ROOT, "checkpoints")
#: The tokenizer shipped in model/.
TOKENIZER_DIR = os.path.join(ROOT, "model")
#: Base seed; epoch e shuffles its data with seed BASE_SEED + e, so a resumed run sees the same order.
BASE_SEED = 42
#: Exit status after a SIGTERM (128 + 15), so a stopped job is recognisably "stopped, resumable".
SIGTERM_EXIT = 143


# ----------------------------------------------------------------------------------------------------
# Output


def is_main_process():
    """True on rank 0, and in a plain (non-distributed) run."""
    return not dist.is_initialized() or dist.get_rank() == 0


def log(message):
    """Print one line on rank 0 only, flushed at once (logs are read while the job runs)."""
    if is_main_process():
        print(message, flush=True)


def warn(message):
    """Print a `WARNING: ...` line on rank 0."""
    log(f"WARNING: {message}")


# ----------------------------------------------------------------------------------------------------
# Processes, seeds, precision


@dataclass
class DistInfo:
    """Where this process stands: `rank`/`world_size` are 0/1 in a plain run."""
    distributed: bool
    rank: int
    local_rank: int
    world_size: int
    device: str


def init_distributed(args):
    """Set up torch.distributed when started by torchrun (RANK in the environment).

    NCCL with one GPU per process when CUDA is available and the requested device is not the CPU,
    gloo on CPU. Updates `args.device` (torchrun runs use `cuda:{LOCAL_RANK}`) and returns a `DistInfo`.
    """
    if int(os.environ.get("RANK", -1)) == -1:
        return DistInfo(False, 0, 0, 1, args.device)
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = torch.cuda.is_available() and not str(args.device).startswith("cpu")
    if use_cuda:
        torch.cuda.set_device(local_rank)
        args.device = f"cuda:{local_rank}"
    else:
        args.device = "cpu"
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return DistInfo(True, dist.get_rank(), local_rank, dist.get_world_size(), args.device)


def cleanup_distributed():
    """Destroy the process group if there is one (safe to call more than once)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def setup_seed(seed):
    """Seed Python, NumPy (when installed) and torch (CPU and CUDA)."""
    random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    try:
        import numpy as np
        np.random.seed(seed)
    except ImportError:
        pass


def device_type(device):
    """'cuda', 'mps' or 'cpu' for a device string such as 'cuda:1'."""
    device = str(device)
    return "cuda" if device.startswith("cuda") else ("mps" if device.startswith("mps") else "cpu")


def autocast_context(device, dtype):
    """Mixed precision on CUDA for `--dtype bfloat16/float16`; the CPU always trains in float32."""
    if device_type(device) != "cuda" or dtype == "float32":
        return nullcontext()
    return torch.autocast("cuda", dtype=torch.bfloat16 if dtype == "bfloat16" else torch.float16)


def make_grad_scaler(device, dtype):
    """A GradScaler that is active only for float16 on CUDA (bf16 and fp32 need no loss scaling)."""
    return torch.amp.GradScaler("cuda", enabled=(dtype == "float16" and device_type(device) == "cuda"))


# ----------------------------------------------------------------------------------------------------
# Models and weights


def model_config(hidden_size, num_hidden_layers, use_moe):
    """A `MiniMindConfig` with the MiniMind defaults for everything but the size."""
    from model.model_minimind import MiniMindConfig
    try:
        return MiniMindConfig(hidden_size=hidden_size, num_hidden_layers=num_hidden_layers, use_moe=bool(use_moe))
    except ValueError as e:  # e.g. a hidden_size that is not a multiple of the 8 attention heads
        raise SetupError(f"invalid model size: {e}") from None


def load_tokenizer(path=TOKENIZER_DIR):
    """The tokenizer in folder `path` (default: the one shipped in `<repo>/model`; never downloaded)."""
    from transformers import AutoTokenizer

    from trainer.rules import weight_meta
    tokenizer = AutoTokenizer.from_pretrained(path)
    if os.path.realpath(path) != os.path.realpath(TOKENIZER_DIR):  # say so when it is not the usual one
        log(f"Tokenizer: {path} ({len(tokenizer)} tokens, fingerprint {weight_meta.tokenizer_fingerprint(path)})")
    return tokenizer


def missing_weight_fix(args, option="from_weight"):
    """What gets a run past a missing base weight, in the options of this run's own trainer (`args`):
    `option` is the one that chose the weight (`from_weight`, `from_student_weight`,
    `from_teacher_weight`, or `reasoning` for PPO/GRPO/SPO, which start from reason or full_sft)."""
    fix = "train that stage first, pass --weight_dir FOLDER (the folder that holds it)"
    if option == "reasoning":
        other = 1 - int(args.reasoning)
        return f"{fix}, or --reasoning {other} to start from {rl_base_weight(other)} instead"
    if option == "from_teacher_weight" or hasattr(args, "lora_name"):  # a teacher, a LoRA base: never random
        return f"{fix}, or --{option} NAME to start from another weight in it"
    return f"{fix}, or --{option} none to start from random weights"


def init_model(config, from_weight, weight_dir, device, tokenizer=True, fix=None):
    # `tokenizer`: True (the bundled tokenizer), a tokenizer folder, or False (none).
    """Build a `MiniMindForCausalLM` and load `{weight_dir}/{from_weight}_{h}[_moe].pth` into it.

    `from_weight='none'` keeps the random initialisation. A missing weight file raises
    `MissingWeightError` naming the path and `fix` (what to do, in the trainer's own options; see
    `missing_weight_fix`). Returns `(model, tokenizer)` (tokenizer None if not asked for).
    """
    from model.model_minimind import MiniMindForCausalLM
    model = MiniMindForCausalLM(config)
    if from_weight and from_weight != "none":
        path = os.path.join(weight_dir, weight_file(from_weight, config.hidden_size, config.use_moe))
        if not os.path.isfile(path):
            raise MissingWeightError(
                f"weight file not found: {os.path.abspath(path)} (base weight {from_weight!r} in "
                f"weight_dir={weight_dir!r}); {fix or 'train that stage first'}")
        state = torch.load(path, map_location="cpu", weights_only=True)  # tensors only: no code from a file
        missing, unexpected = model.load_state_dict(state, strict=False)
        # Tied lm_head / rotary buffers may legitimately be absent; anything else means a wrong file.
        real_missing = [k for k in missing if k != "lm_head.weight" and "freqs" not in k]
        if real_missing or unexpected:
            raise SetupError(f"{os.path.abspath(path)} does not match the model (hidden_size={config.hidden_size}, "
                             f"layers={config.num_hidden_layers}, use_moe={int(bool(config.use_moe))}): "
                             f"{len(real_missing)} missing and {len(unexpected)} unexpected keys, "
                             f"e.g. {(real_missing + list(unexpected))[:3]}")
    model = model.to(device)
    return model, (load_tokenizer(tokenizer if isinstance(tokenizer, str) else TOKENIZER_DIR) if tokenizer else None)


def load_model(args, from_weight, label="Model", tokenizer=True, hidden_size=None, num_hidden_layers=None,
               option="from_weight"):
    """`init_model` sized by the options (`args.hidden_size`, `args.num_hidden_layers`, `args.use_moe`, unless
    given) from `{args.weight_dir}/{from_weight}_...` on `args.device`, with the tokenizer of
    `--tokenizer_path` (unless `tokenizer` is False); logs its size under `label` (None: not logged).
    `option` names the option that chose `from_weight` (for the missing-weight message).
    Returns `(model, tokenizer)`; the config is `model.config`."""
    config = model_config(hidden_size or args.hidden_size, num_hidden_layers or args.num_hidden_layers, args.use_moe)
    model, tok = init_model(config, from_weight, args.weight_dir, args.device,
                            tokenizer=args.tokenizer_path if tokenizer else False,
                            fix=missing_weight_fix(args, option))
    if label:
        log_model_size(model, config, label=label)
    return model, tok


def count_params(model, trainable_only=False):
    """Number of parameters (shared tensors counted once)."""
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) in seen or (trainable_only and not p.requires_grad):
            continue
        seen.add(id(p))
        total += p.numel()
    return total


def log_model_size(model, config, label="Model"):
    """Log `{label} Params: 25.83M` (MoE: total and active, `25.83M-A18.00M`) and the trainable count."""
    total = count_params(model)
    text = f"{total / 1e6:.3f}M"
    if getattr(config, "use_moe", False):
        expert = sum(p.numel() for n, p in model.named_parameters() if ".mlp.experts.0." in n)
        routed = getattr(config, "n_routed_experts", getattr(config, "num_experts", 0))
        per_tok = getattr(config, "num_experts_per_tok", routed)
        active = total - expert * routed + expert * per_tok
        if active < total:
            text += f"-A{active / 1e6:.3f}M"
    log(f"{label} Params: {text} (hidden_size={config.hidden_size}, layers={config.num_hidden_layers}"
        f"{', moe' if getattr(config, 'use_moe', False) else ''}); "
        f"trainable: {count_params(model, trainable_only=True) / 1e6:.3f}M")


def unwrap_model(model):
    """The plain module inside DDP and/or torch.compile wrappers."""
    model = model.module if isinstance(model, DistributedDataParallel) else model
    return getattr(model, "_orig_mod", model)


def wrap_ddp(model, info, find_unused_parameters=False):
    """Wrap `model` in DistributedDataParallel when running distributed (else return it unchanged)."""
    if not info.distributed:
        return model
    # The rotary tables are constant buffers: no need to broadcast them every step.
    model._ddp_params_and_buffers_to_ignore = {n for n, _ in model.named_buffers() if "freqs" in n}
    device_ids = [info.local_rank] if device_type(info.device) == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids, find_unused_parameters=find_unused_parameters)


# ----------------------------------------------------------------------------------------------------
# Data


def check_data_file(path):
    """Raise SetupError naming the absolute path when the data file is missing."""
    if not os.path.isfile(path):
        raise SetupError(f"data file not found: {os.path.abspath(path)} (--data_path {path})")


def load_dataset(dataset_class, args, tokenizer, train_type=None):
    """`dataset_class(args.data_path, tokenizer, max_length=args.max_seq_len)`, after checking the file exists;
    with `--pack 1` its packed form (`dataset.lm_dataset.packed_dataset`), unless packing cannot be exact for
    a run of `train_type` (`PackingRefused`, see `trainer.rules.setup_errors.pack_refusal`)."""
    check_data_file(args.data_path)
    if getattr(args, "pack", 0):
        from dataset.lm_dataset import packed_dataset
        refusal = pack_refusal(train_type, args.pack, args.use_moe)
        if refusal:
            raise refusal
        dataset_class = packed_dataset(dataset_class)
    return dataset_class(args.data_path, tokenizer, max_length=args.max_seq_len)


def lm_collate(args, tokenizer):
    """The `collate_fn` of the types that add the MoE auxiliary loss (pretrain, SFT, LoRA, distillation,
    reasoning distillation): each batch right-padded to its longest row; with --use_moe 1 to
    --max_seq_len, as upstream pads every row, because upstream's router auxiliary loss counts the pad
    positions too (their hidden states depend on the row before them, so they are computed, not
    assumed). The losses never count the padding."""
    from dataset.lm_dataset import pad_collate
    return pad_collate(tokenizer.pad_token_id, pad_to=args.max_seq_len if args.use_moe else None)


class SkipBatchSampler(Sampler):
    """Groups the indices of `sampler` into batches of `batch_size` (last one may be short) and drops
    the first `skip_batches` batches: a resumed epoch continues where the stopped one left off."""

    def __init__(self, sampler, batch_size, skip_batches=0):
        self.sampler = sampler
        self.batch_size = batch_size
        self.skip_batches = skip_batches

    def __iter__(self):
        batch, index = [], 0
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                if index >= self.skip_batches:
                    yield batch
                batch, index = [], index + 1
        if batch and index >= self.skip_batches:
            yield batch

    def __len__(self):
        return max(0, math.ceil(len(self.sampler) / self.batch_size) - self.skip_batches)


def batches_per_epoch(dataset_len, batch_size, world_size):
    """Batches each process sees in one epoch (DistributedSampler pads ranks to equal length)."""
    return math.ceil(math.ceil(dataset_len / world_size) / batch_size)


def run_seed(args):
    """The run's seed: `--seed` where given (a sweep's seeds), else upstream's BASE_SEED."""
    seed = getattr(args, "seed", None)
    return BASE_SEED if seed is None else int(seed)


def make_loader(dataset, batch_size, epoch, info, collate_fn, num_workers=0, skip_batches=0, seed=BASE_SEED):
    """A DataLoader over this process's share of `dataset` for one epoch.

    The order is a shuffle seeded with `seed + epoch` (the same for any number of processes;
    rank r takes every world_size-th sample), so resuming after `skip_batches` batches continues
    exactly where a run stopped. `collate_fn` pads a batch: `pad_collate(pad_id)` (to its longest row)
    or `lm_collate`.
    """
    sampler = DistributedSampler(dataset, num_replicas=info.world_size, rank=info.rank,
                                 shuffle=True, seed=seed, drop_last=False)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_sampler=SkipBatchSampler(sampler, batch_size, skip_batches),
                      collate_fn=collate_fn, num_workers=num_workers, worker_init_fn=_ignore_sigterm,
                      pin_memory=device_type(info.device) == "cuda")


def _ignore_sigterm(worker_id):
    """DataLoader workers ignore SIGTERM: a job is stopped by signalling its whole process group, and a
    worker dying first would crash the trainer before it can save its resume state. The workers end
    with the trainer."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def to_device(batch, device):
    """Move every tensor of a batch dict to `device` (other values are kept as they are)."""
    return {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}


# ----------------------------------------------------------------------------------------------------
# Script entry


def script_main(main):
    """Run a training script's `main()` and turn its outcome into an exit status.

    0 on success; 1 with a single `ERROR: ...` line (no traceback) for setup and data errors (missing
    data or weight file, `DataFormatError` naming file and line); 143 after a SIGTERM. The process
    group is destroyed in every case.
    """
    try:
        from dataset.lm_dataset import DataFormatError
    except ImportError:  # the dataset module failed to import: let that traceback show below
        DataFormatError = SetupError
    status = 0
    try:
        main()
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except (SetupError, DataFormatError, FileNotFoundError) as e:
        print(f"ERROR: {e}", file=sys.stderr, flush=True)
        status = 1
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr, flush=True)
        status = 130
    finally:
        cleanup_distributed()
    sys.exit(status)
