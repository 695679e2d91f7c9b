"""Utilities shared by the MiniMind training scripts.

Every `train_*.py` script is a thin file: it parses its options with `trainer.args.parse_args`, builds
its model(s) and dataset with the helpers here, and either hands a loss function to
`run_supervised_training` (pretrain, SFT, LoRA, DPO, reasoning distill, distillation) or writes its own
loop with the same building blocks (PPO, GRPO, SPO).

The building blocks, roughly in the order a script uses them:

- `script_main(main)`: runs a script's `main()`; a setup error (missing data or weight file, bad data
  line) becomes one `ERROR: ...` line and exit status 1, a SIGTERM exit status 143, and the process
  group is always torn down.
- `init_distributed(args)`: plain process or torchrun (NCCL on CUDA, gloo on CPU); returns a `DistInfo`.
- `setup_seed`, `get_lr` (upstream cosine), `autocast_context`, `make_grad_scaler`.
- `model_config`, `weight_path`, `load_tokenizer`, `init_model` (reads `{weight_dir}/{name}_{h}[_moe].pth`),
  `log_model_size`, `unwrap_model`, `wrap_ddp`.
- `check_data_file`, `make_loader` (per-epoch deterministic shuffle, resume skipping, pad-to-longest).
- `save_weights`, `atomic_torch_save`, `resume_path`, `save_resume`, `load_resume`.
- `StopSignal`: SIGTERM handling (finish the current step, save resume state, exit 143).
- `init_tracker`: wandb, else swanlab, else a warning; `resume_and_tracker`: both steps of a script's start.
- `log`, `warn`, `format_progress`: rank-0 output, one flushed line each.

Directories follow upstream MiniMind: scripts run in `trainer/`, so `../out` is `<repo>/out`; the
resume state always lives in `<repo>/checkpoints` (resolved from this file's location, not the
working directory).
"""
import math
import os
import random
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, Sampler

TRAINER_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TRAINER_DIR)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from trainer import ownership  # noqa: E402  (torch-free)

#: Where resume states are written: `../checkpoints` seen from trainer/, like upstream.
CHECKPOINT_DIR = os.path.join(ROOT, "checkpoints")
#: The tokenizer shipped in model/.
TOKENIZER_DIR = os.path.join(ROOT, "model")
#: Base seed; epoch e shuffles its data with seed BASE_SEED + e, so a resumed run sees the same order.
BASE_SEED = 42
#: Exit status after a SIGTERM (128 + 15), so a stopped job is recognisably "stopped, resumable".
SIGTERM_EXIT = 143


class SetupError(Exception):
    """A problem found before training starts (missing file, bad option); reported as one line."""


class MissingWeightError(SetupError, FileNotFoundError):
    """A base weight named by --from_weight (or similar) does not exist; the message names the path."""


# ----------------------------------------------------------------------------------------------------
# Output


def is_main_process():
    """True on rank 0, and in a plain (non-distributed) run."""
    return not dist.is_initialized() or dist.get_rank() == 0


def log(message):
    """Print one line on rank 0 only, flushed at once (logs are read while the job runs)."""
    if is_main_process():
        print(message, flush=True)


#: Upstream's name for `log`, for scripts written against MiniMind's trainer_utils.
Logger = log


def warn(message):
    """Print a `WARNING: ...` line on rank 0."""
    log(f"WARNING: {message}")


def format_progress(epoch, epochs, step, iters, loss, lr, eta_min, extra=None):
    """A progress line in the upstream format, e.g.

    `Epoch:[1/2](100/44160) loss:8.896761 lr:0.000549999999 epoch_Time:332.0min:`

    `epoch` is 0-based (printed 1-based), `step` 1-based within the epoch. `extra` (name -> float) is
    written between loss and lr, like distillation's `ce:` and `distill:` fields.
    """
    fields = "".join(f" {name}:{value:.6f}" for name, value in (extra or {}).items())
    return (f"Epoch:[{epoch + 1}/{epochs}]({step}/{iters}) loss:{loss:.6f}{fields} "
            f"lr:{lr:.12f} epoch_Time:{eta_min}min:")


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


def get_lr(current_step, total_steps, lr):
    """Upstream MiniMind's cosine schedule: from 1.0*lr down to 0.1*lr over `total_steps`."""
    return lr * (0.1 + 0.45 * (1 + math.cos(math.pi * current_step / total_steps)))


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


def weight_path(directory, name, hidden_size, use_moe=False):
    """`{directory}/{name}_{hidden_size}[_moe].pth`, the MiniMind weight-file convention."""
    return os.path.join(directory, f"{name}_{hidden_size}{'_moe' if use_moe else ''}.pth")


def load_tokenizer(path=TOKENIZER_DIR):
    """The tokenizer in folder `path` (default: the one shipped in `<repo>/model`; never downloaded)."""
    from transformers import AutoTokenizer

    from trainer import weight_meta
    tokenizer = AutoTokenizer.from_pretrained(path)
    if os.path.realpath(path) != os.path.realpath(TOKENIZER_DIR):  # say so when it is not the usual one
        log(f"Tokenizer: {path} ({len(tokenizer)} tokens, fingerprint {weight_meta.tokenizer_fingerprint(path)})")
    return tokenizer


def record_save(args, epoch, step, global_step):
    """Write the metadata beside the weight files just saved (and keep --keep_checkpoints snapshots)."""
    from trainer import specs, weight_meta
    script = os.path.basename(sys.argv[0])
    train_type = next((s.key for s in specs.SPECS.values() if s.script == script), None)
    if train_type is None:  # the loop driven from elsewhere (e.g. a test): nothing names the files
        return
    values = vars(args)
    paths = [os.path.join(args.save_dir, name) for name in specs.spec(train_type).weight_files(values)]
    weight_meta.after_save(values, train_type, [p for p in paths if os.path.isfile(p)], epoch=epoch, step=step,
                           global_step=global_step)


def init_model(config, from_weight, weight_dir, device, tokenizer=True):
    # `tokenizer`: True (the bundled tokenizer), a tokenizer folder, or False (none).
    """Build a `MiniMindForCausalLM` and load `{weight_dir}/{from_weight}_{h}[_moe].pth` into it.

    `from_weight='none'` keeps the random initialisation. A missing weight file raises
    `MissingWeightError` naming the path. Returns `(model, tokenizer)` (tokenizer None if not asked for).
    """
    from model.model_minimind import MiniMindForCausalLM
    model = MiniMindForCausalLM(config)
    if from_weight and from_weight != "none":
        path = weight_path(weight_dir, from_weight, config.hidden_size, config.use_moe)
        if not os.path.isfile(path):
            raise MissingWeightError(
                f"weight file not found: {os.path.abspath(path)} (from_weight={from_weight!r}, "
                f"weight_dir={weight_dir!r}); train that stage first or pass --from_weight none")
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


def atomic_torch_save(obj, path):
    """torch.save to a temp file in the same folder, then os.replace: readers never see half a file."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp{os.getpid()}")
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def half_state_dict(model):
    """The model's state dict in half precision on the CPU (the MiniMind weight-file format)."""
    return {k: v.detach().half().cpu() if v.is_floating_point() else v.detach().cpu()
            for k, v in unwrap_model(model).state_dict().items()}


def save_weights(model, path):
    """Atomically save the model's half-precision state dict to `path`."""
    atomic_torch_save(half_state_dict(model), path)


# ----------------------------------------------------------------------------------------------------
# Resume state


def resume_path(name, hidden_size, use_moe=False, directory=CHECKPOINT_DIR):
    """`<repo>/checkpoints/{name}_{hidden_size}[_moe]_resume.pth`."""
    return os.path.join(directory, f"{name}_{hidden_size}{'_moe' if use_moe else ''}_resume.pth")


def rng_states():
    """The random-number generators' states, so a resumed run draws the same numbers."""
    states = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states):
    """Restore what `rng_states` returned (missing entries are skipped)."""
    if not states:
        return
    if "python" in states:
        random.setstate(states["python"])
    if "torch" in states:
        torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available() and len(states["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(states["cuda"])


def save_resume(path, *, model, optimizer, epoch, step, world_size, scaler=None, global_step=None,
                wandb_id=None, **extra):
    """Atomically write the resume state: model (full precision), optimizer, scaler, scheduler position,
    epoch (0-based), step (optimizer-consistent micro-steps done in that epoch), world_size, RNG states.

    `extra` holds anything else a script needs back (e.g. a critic's state dict); modules and
    optimizers in it are stored as their state dicts.
    """
    state = {
        "model": {k: v.detach().cpu() for k, v in unwrap_model(model).state_dict().items()},
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "scheduler": {"type": "cosine", "global_step": global_step},
        "epoch": epoch,
        "step": step,
        "world_size": world_size,
        "rng": rng_states(),
        "wandb_id": wandb_id,
        "written_by": ownership.writer(),  # which job wrote it: a Resume refuses another job's state
    }
    for key, value in extra.items():
        if isinstance(value, torch.nn.Module):
            value = unwrap_model(value).state_dict()
        elif hasattr(value, "state_dict") and callable(value.state_dict):
            value = value.state_dict()
        state[key] = value
    atomic_torch_save(state, path)


def load_resume(path, world_size):
    """Read a resume state, or return None (with a warning) when there is none.

    When the number of processes changed, `step` is converted so that the same number of samples
    counts as done (`step * saved_world_size // world_size`).
    """
    if not os.path.isfile(path):
        warn(f"--from_resume 1 but no resume state at {os.path.abspath(path)}; starting from the beginning")
        return None
    # weights_only: tensors and plain containers only, so a planted file cannot run code.
    state = torch.load(path, map_location="cpu", weights_only=True)
    problem = ownership.resume_problem(state.get("written_by"), path)
    if problem:
        raise SetupError(problem)
    saved_ws = state.get("world_size", 1) or 1
    if saved_ws != world_size:
        state["step"] = state["step"] * saved_ws // world_size
        log(f"Number of processes changed ({saved_ws} -> {world_size}); resuming at step {state['step']}")
    return state


# ----------------------------------------------------------------------------------------------------
# Data


def check_data_file(path):
    """Raise SetupError naming the absolute path when the data file is missing."""
    if not os.path.isfile(path):
        raise SetupError(f"data file not found: {os.path.abspath(path)} (--data_path {path})")


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


def make_loader(dataset, batch_size, epoch, info, collate_fn, num_workers=0, skip_batches=0):
    """A DataLoader over this process's share of `dataset` for one epoch.

    The order is a shuffle seeded with `BASE_SEED + epoch` (the same for any number of processes;
    rank r takes every world_size-th sample), so resuming after `skip_batches` batches continues
    exactly where a run stopped. `collate_fn` should be `pad_collate(pad_id)`: batches are padded
    to their longest row only.
    """
    sampler = DistributedSampler(dataset, num_replicas=info.world_size, rank=info.rank,
                                 shuffle=True, seed=BASE_SEED, drop_last=False)
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
# Stopping


class StopSignal:
    """SIGTERM handling for a training loop.

    Before `arm()` a SIGTERM exits at once with status 143 (there is nothing to save yet). After it,
    the handler only sets a flag; the loop calls `should_stop()` after each step, saves its resume
    state, prints `stopped_message` and exits with `SIGTERM_EXIT`. Under torchrun every rank takes
    part in `should_stop()` (an all-reduce), so all ranks stop after the same step.
    """

    def __init__(self):
        self.requested = False
        self.armed = False
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        if not self.armed:
            raise SystemExit(SIGTERM_EXIT)
        self.requested = True

    def arm(self):
        """From now on, a SIGTERM lets the current step finish."""
        self.armed = True

    def should_stop(self):
        """True when any process got a SIGTERM (collective under torchrun: call it on every rank)."""
        if dist.is_available() and dist.is_initialized():
            device = "cuda" if dist.get_backend() == "nccl" else "cpu"
            flag = torch.tensor([1.0 if self.requested else 0.0], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            return bool(flag.item())
        return self.requested


def stopped_message(epoch, epochs, step, iters, path, resume_step=None):
    """The line printed when a run stops on SIGTERM: where it stopped and how to go on.

    `resume_step`, when it differs from `step`, is where the resume state continues (the last
    optimizer step under gradient accumulation)."""
    where = "" if resume_step is None or resume_step == step else f" (resumes after step {resume_step})"
    return (f"Stopped by SIGTERM at epoch {epoch + 1}/{epochs}, step {step}/{iters}{where}; resume state saved to "
            f"{os.path.abspath(path)}. Run the same command with --from_resume 1 to continue.")


# ----------------------------------------------------------------------------------------------------
# Experiment tracking


def resume_and_tracker(args, info, save_name, config, run_name):
    """The resume state of `save_name` (with --from_resume 1, else None) and the experiment tracker,
    whose run continues the resumed one. Returns (resume, tracker)."""
    resume = load_resume(resume_path(save_name, config.hidden_size, config.use_moe),
                         info.world_size) if args.from_resume else None
    return resume, init_tracker(args, run_name, resume)


def init_tracker(args, run_name, resume_state=None):
    """wandb if installed, else swanlab (same API), else None with a warning. Rank 0 only.

    With a `resume_state` that recorded a run id, the same tracker run is continued. Returns the
    module (with `.log(dict)`), or None when tracking is off or unavailable.
    """
    resume_id = (resume_state or {}).get("wandb_id")
    if not getattr(args, "use_wandb", False) or not is_main_process():
        return None
    try:
        import wandb as tracker
    except ImportError:
        try:
            import swanlab as tracker
        except ImportError:
            warn("--use_wandb was given but neither wandb nor swanlab is installed; training without a tracker")
            return None
    try:
        tracker.init(project=args.wandb_project, name=run_name, id=resume_id, resume="must" if resume_id else None)
    except Exception as e:  # a tracker outage (no network, no login) must not stop the training
        warn(f"could not start {tracker.__name__} ({e}); training without a tracker")
        return None
    return tracker


def tracker_run_id(tracker):
    """The tracker run's id (stored in the resume state so the run continues in the same chart)."""
    if tracker is None:
        return None
    run = tracker.get_run() if hasattr(tracker, "get_run") else getattr(tracker, "run", None)
    return getattr(run, "id", None)


# ----------------------------------------------------------------------------------------------------
# The supervised training loop


def run_supervised_training(args, info, *, model, config, dataset, collate_fn, loss_fn, save_name,
                            save_fn, optimizer, stop, resume_state=None, tracker=None, scaler=None,
                            find_unused_parameters=False):
    """Train `model` on `dataset` for `args.epochs` epochs: the loop of the six supervised scripts.

    - `loss_fn(model, batch) -> (loss, metrics)`: `loss` is the scalar to minimise for one micro-batch
      (MoE aux loss included); `metrics` is an ordered dict of extra values (floats or 0-d tensors)
      for the progress line, written between loss and lr.
    - `save_fn(model)` writes the weight file (rank 0 only); the resume state goes to
      `resume_path(save_name, config.hidden_size, config.use_moe)`.
    - Gradient accumulation (`args.accumulation_steps`), clipping (`args.grad_clip`) over the trainable
      parameters, the cosine schedule per micro-step like upstream, a progress line every
      `args.log_interval` steps and at each epoch's last step, saves every `args.save_interval` steps
      and at each epoch's end.
    - `resume_state` (from `load_resume`, for `--from_resume 1`): the model/optimizer/scaler/RNG are
      restored and the consumed batches skipped. A SIGTERM (see `StopSignal`) saves the resume state
      and raises SystemExit(143).

    Resume states always record the last optimizer-step boundary: the micro-batches after it (their
    gradients were not yet applied) are simply run again on resume, so results match an uninterrupted run.
    """
    device = info.device
    scaler = scaler or make_grad_scaler(device, args.dtype)
    ckpt = resume_path(save_name, config.hidden_size, config.use_moe)
    start_epoch, start_step = 0, 0
    if resume_state is not None:
        unwrap_model(model).load_state_dict(resume_state["model"])
        optimizer.load_state_dict(resume_state["optimizer"])
        if resume_state.get("scaler"):
            scaler.load_state_dict(resume_state["scaler"])
        set_rng_states(resume_state.get("rng"))
        start_epoch, start_step = resume_state["epoch"], resume_state["step"]
    model = wrap_ddp(model, info, find_unused_parameters)
    autocast = autocast_context(device, args.dtype)
    params = [p for p in model.parameters() if p.requires_grad]
    iters = batches_per_epoch(len(dataset), args.batch_size, info.world_size)
    if start_step >= iters:  # the saved epoch was complete
        start_epoch, start_step = start_epoch + 1, 0
    if start_epoch >= args.epochs:
        log(f"Nothing to do: the resume state at {os.path.abspath(ckpt)} is already past epoch {args.epochs}")
        return
    wandb_id = tracker_run_id(tracker)

    def save(epoch, boundary_step):
        if is_main_process():
            save_fn(model)
            save_resume(ckpt, model=model, optimizer=optimizer, scaler=scaler, epoch=epoch, step=boundary_step,
                        world_size=info.world_size, global_step=epoch * iters + boundary_step, wandb_id=wandb_id)
            record_save(args, epoch, boundary_step, epoch * iters + boundary_step)

    stop.arm()
    model.train()
    for epoch in range(start_epoch, args.epochs):
        skip = start_step if epoch == start_epoch else 0
        loader = make_loader(dataset, args.batch_size, epoch, info, collate_fn, args.num_workers, skip)
        if skip:
            log(f"Epoch [{epoch + 1}/{args.epochs}]: skipping the first {skip} steps, starting at step {skip + 1}")
        start_time = time.time()
        boundary = skip  # last step whose gradients were applied
        for step, batch in enumerate(loader, start=skip + 1):
            batch = to_device(batch, device)
            lr = get_lr(epoch * iters + step, args.epochs * iters, args.learning_rate)
            for group in optimizer.param_groups:
                group["lr"] = lr
            is_boundary = step % args.accumulation_steps == 0 or step == iters
            # Without an optimizer step, skip DDP's gradient all-reduce: it happens once per boundary.
            sync = nullcontext() if is_boundary or not info.distributed else model.no_sync()
            with sync:
                with autocast:
                    loss, metrics = loss_fn(model, batch)
                scaler.scale(loss / args.accumulation_steps).backward()
            if is_boundary:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(params, args.grad_clip)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                boundary = step

            if step % args.log_interval == 0 or step == iters:
                spent = time.time() - start_time
                eta_min = spent / max(step - skip, 1) * (iters - step) // 60
                loss_value = loss.item()
                metrics = {name: float(value) for name, value in metrics.items()}
                log(format_progress(epoch, args.epochs, step, iters, loss_value, lr, eta_min, metrics))
                if tracker is not None:
                    tracker.log({"loss": loss_value, **metrics, "lr": lr, "epoch_Time": eta_min})

            if step % args.save_interval == 0 or step == iters:
                save(epoch, boundary)
            if stop.should_stop():
                save(epoch, boundary)
                if info.distributed:
                    dist.barrier()  # the other ranks wait for rank 0's save before tearing down
                log(stopped_message(epoch, args.epochs, step, iters, ckpt, resume_step=boundary))
                raise SystemExit(SIGTERM_EXIT)
        start_step = 0
    if info.distributed:
        dist.barrier()


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
