"""What a training run writes: weight files and the resume state, always atomically.

- Weight files (`save_weights`): the model's state dict in half precision on the CPU, MiniMind's format,
  at `{save_dir}/{name}_{h}[_moe].pth` (`trainer.rules.specs.weight_file`).
- Resume state (`save_resume` / `load_resume`): full-precision model, optimizer, grad scaler, scheduler
  position, epoch and step, number of processes, random-number generators and the tracker run id, plus
  any further trained part (PPO's critic) or state (SPO's value tracker), at
  `<repo>/checkpoints/{name}_{h}[_moe]_resume.pth` (`resume_path`, named by `trainer.rules.specs.resume_file`).
"""
import os
import random

import torch

from trainer.rules import ownership, weight_meta
from trainer.trainer_utils import CHECKPOINT_DIR, SetupError, log, unwrap_model, warn


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


def resume_path(train_spec, values, directory=CHECKPOINT_DIR):
    """`<repo>/checkpoints/{name}_{hidden_size}[_moe]_resume.pth` of a run of `train_spec` with
    option values `values` (e.g. `vars(args)`)."""
    return os.path.join(directory, train_spec.resume_file(values))


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
    weight_meta.write_meta(path, weight_meta.resume_meta(path))  # whose state it is, readable without torch


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

