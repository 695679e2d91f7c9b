"""What a queued job asks for and what it writes: its resources, its command on the GPUs it
gets, and the weight and resume files that must not have two writers at once."""
import os
from pathlib import Path

from mmcore import command
from mmcore.paths import ensure_root_on_path

ensure_root_on_path()
from trainer import specs  # noqa: E402  (torch-free)


class QueueRefused(ValueError):
    """A submission or queue change that cannot be made; `reasons` lists every problem."""

    def __init__(self, reasons):
        self.reasons = [reasons] if isinstance(reasons, str) else list(reasons)
        super().__init__("; ".join(self.reasons))


def resources_for(values, gpus=None, gpu_count=0):
    """The `resources` a job asks for: {} (a CPU slot), {"gpus": N} or {"gpu_ids": [...]}.

    `gpus` (the API's argument) wins: an int asks for that many GPUs (any), a list for those GPUs.
    Otherwise the command values decide: several `gpus`, or `device` cuda:N; `device` auto/empty
    means one GPU when the machine has one, like the trainers' own default.
    """
    if gpus is not None:
        if isinstance(gpus, bool):
            raise QueueRefused("gpus must be a number of GPUs or a list of GPU ids")
        if isinstance(gpus, int):
            if gpus < 0:
                raise QueueRefused("gpus must be 0 or more")
            return {"gpus": gpus} if gpus else {}
        ids, problem = command._parse_gpus(gpus)
        if problem:
            raise QueueRefused(f"gpus {problem}")
        return {"gpu_ids": ids} if ids else {}
    ids, _ = command._parse_gpus(values.get("gpus"))
    if len(ids) >= 2:
        return {"gpu_ids": ids}
    device = str(values.get("device") or "").strip()
    if device.startswith("cuda:") and device[5:].isdigit():
        return {"gpu_ids": [int(device[5:])]}
    if len(ids) == 1:
        return {"gpu_ids": ids}
    if device in ("", "auto") and gpu_count:
        return {"gpus": 1}
    return {}


def values_for_gpus(values, assigned):
    """Command values that run on the assigned GPUs (none: on the CPU)."""
    values = dict(values)
    if not assigned:
        values["device"], values["gpus"] = "cpu", []
    elif len(assigned) == 1:
        values["device"], values["gpus"] = f"cuda:{assigned[0]}", []
    else:
        values["device"], values["gpus"] = "", list(assigned)
    return values


def values_on(values, resources):
    """Command values that ask for `resources` (from `resources_for`): any N GPUs are checked as
    GPUs 0..N-1 (the queue names the ones the job gets when it starts)."""
    if resources.get("gpu_ids"):
        return values_for_gpus(values, resources["gpu_ids"])
    if resources.get("gpus"):
        return values_for_gpus(values, list(range(resources["gpus"])))
    return values_for_gpus(values, [])


def output_paths(job):
    """Absolute paths of the weight files, then the resume file, a job writes (() when it cannot tell)."""
    try:
        checked = command.check(job.train_type, job.params)
        spec = specs.spec(job.train_type)
    except (ValueError, KeyError):
        return ()
    if checked.errors:
        return ()
    values = checked.effective()
    cwd = Path(job.cwd or ".")
    try:
        save_dir = Path(os.path.normpath(cwd / values["save_dir"]))
        found = [str(save_dir / name) for name in spec.weight_files(values)]
        found.append(os.path.normpath(cwd / specs.CHECKPOINT_DIR / spec.resume_file(values)))
    except (KeyError, TypeError):
        return ()
    return tuple(found)
