"""What a queued job asks for and what it writes: its resources, its command on the GPUs it
gets, and the weight and resume files that must not have two writers at once."""
from mmcore.base.paths import TRAINER_DIR
from mmcore.train import commandline, file_owners


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
        ids, problem = commandline._parse_gpus(gpus)
        if problem:
            raise QueueRefused(f"gpus {problem}")
        return {"gpu_ids": ids} if ids else {}
    ids, _ = commandline._parse_gpus(values.get("gpus"))
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
    """Paths of the files a job writes, its weights first, then its resume state, resolved the way
    its trainer opens them (`mmcore.train.file_owners.written_files`); () when its values cannot tell."""
    files = file_owners.written_files(job.train_type, job.params, job.cwd or TRAINER_DIR)
    return tuple(sorted((str(p) for p in files), key=lambda p: (p.endswith("_resume.pth"), p)))
