"""Form values -> a validated training command: argv, working directory and environment.

The command line follows the seed's rules:

- CPU or one GPU: ``[python, ../trainer/train_X.py, ..., --device cpu|cuda:N, ...]``.
- Several GPUs: ``[torchrun, --nproc_per_node, N, ../trainer/train_X.py, ...]`` without --device,
  with ``CUDA_VISIBLE_DEVICES`` set to the chosen GPU ids (each process then uses cuda:LOCAL_RANK)
  and ``PET_STANDALONE=1`` (torchrun's --standalone: a free rendezvous port per job).
- Every parameter with a non-empty value is passed as ``--name value`` in registry order (the common
  options, then the type's own); an empty value is left out so the script's default applies.
- ``train_monitor`` none / wandb / swanlab -> nothing / ``--use_wandb --wandb_project P`` / ``--use_wandb``.

Jobs run in ``trainer/`` so that relative paths (../out, ../dataset/...) mean what they mean to
upstream MiniMind users. The command is always an argv list, never a shell string; `display` is a
quoted rendering for previews and log headers only.

`values` is what a form submits: parameter name -> text ('' = not given), plus
``device`` ('cpu', 'cuda:N', or '' / 'auto' to let the script choose), ``gpus`` (GPU ids, a list or
"0,1"; two or more ids launch torchrun and ``device`` is then ignored; a single id means
``cuda:N`` when ``device`` is not given) and ``train_monitor``. Keys that are not parameters of the
type (say, from_weight for GRPO) are ignored, so a page may submit one dict for every type.
"""
import math
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from mmcore import registry  # puts the repository root on sys.path, for `dataset`
from mmcore.paths import TRAINER_DIR
from dataset import formats  # torch-free

#: Lines of the data file that preflight checks: enough to catch a wrong format, fast on huge files.
PREFLIGHT_DATA_LINES = 50

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_CUDA_DEVICE = re.compile(r"cuda:[0-9]+")


class ValidationError(ValueError):
    """Bad form values. `errors` maps each bad field to a message meant for that field."""

    def __init__(self, errors):
        self.errors = dict(errors)
        super().__init__("; ".join(f"{name}: {message}" for name, message in self.errors.items()))


@dataclass(frozen=True)
class Command:
    """A training command ready for `subprocess.Popen(argv, cwd=cwd, env={**os.environ, **env})`."""
    argv: list
    cwd: str
    env: dict = field(default_factory=dict)  # only the variables to add to the inherited environment
    display: str = ""  # shell-quoted, for previews and log headers; never executed


def _text(value):
    """A submitted value as stripped text; widgets that return numbers or booleans are accepted too."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    return registry.format_value(value)


def _convert(p, text):
    """(typed value, None) or (None, message) for the non-empty `text` of parameter `p`."""
    if p.type is bool:
        if text.lower() in _TRUE:
            return True, None
        if text.lower() in _FALSE:
            return False, None
        return None, "must be 1 or 0"
    if p.type is int:
        try:
            value = int(text)
        except ValueError:
            return None, f"must be a whole number, got {text!r}"
    elif p.type is float:
        try:
            value = float(text)
        except ValueError:
            return None, f"must be a number, got {text!r}"
        if not math.isfinite(value):
            return None, f"must be a finite number, got {text!r}"
    else:
        value = text
        # argparse would read a leading '-' as another option, and argv cannot hold NUL.
        if text.startswith("-"):
            return None, "must not start with '-'"
        if any(c in text for c in "\0\n\r"):
            return None, "must be a single line"
    problem = p.check(value)
    return (None, problem) if problem else (value, None)


def _parse_gpus(raw):
    """GPU ids from a list or a "0,1" string -> (list of ints, error message or None)."""
    if raw is None or raw == "":
        return [], None
    if isinstance(raw, int):
        raw = [raw]
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    gpus = []
    for item in items:
        text = str(item).strip()
        if not (text.isascii() and text.isdigit()):
            return [], f"must be GPU ids 0, 1, ..., got {text!r}"
        gpus.append(int(text))
    if len(set(gpus)) != len(gpus):
        return [], "must not list a GPU twice"
    return gpus, None


def _check(train_type, values):
    """Parse every field -> (typed values, errors). Invalid fields are absent from the typed values."""
    tt = registry.get_type(train_type)
    typed, errors = {}, {}
    for p in tt.params:
        if p.name in ("device", "train_monitor"):
            continue
        text = _text(values.get(p.name))
        if not text:
            if p.required:
                errors[p.name] = "is required"
            else:
                typed[p.name] = None  # not given: the script's default applies
            continue
        value, problem = _convert(p, text)
        if problem:
            errors[p.name] = problem
        else:
            typed[p.name] = value

    monitor = _text(values.get("train_monitor")) or "none"
    if monitor in registry.MONITORS:
        typed["train_monitor"] = monitor
    else:
        errors["train_monitor"] = f"must be one of {', '.join(registry.MONITORS)}"

    gpus, problem = _parse_gpus(values.get("gpus"))
    if problem:
        errors["gpus"] = problem
    typed["gpus"] = gpus

    device = _text(values.get("device"))
    if device in ("", registry.param(train_type, "device").default):
        device = None  # the script picks cuda:0 when CUDA is available, else cpu
    elif _CUDA_DEVICE.fullmatch(device):
        device = f"cuda:{int(device[5:])}"
    elif device != "cpu":
        errors["device"] = f"must be cpu or cuda:N (N = GPU index), got {device!r}"
        device = None
    if device is None and len(gpus) == 1:
        device = f"cuda:{gpus[0]}"
    typed["device"] = None if len(gpus) >= 2 else device
    return typed, errors


def validate(train_type, values):
    """Typed values of every field (None = not given), plus device, gpus and train_monitor.

    Raises ValidationError listing every problem at once (field -> message); KeyError for an
    unknown training type.
    """
    typed, errors = _check(train_type, values)
    if errors:
        raise ValidationError(errors)
    return typed


def torchrun_argv():
    """How to start torchrun: the one installed next to this Python (so it uses the same torch),
    else the one on PATH, else the same program as `python -m torch.distributed.run`."""
    beside = Path(sys.executable).with_name("torchrun")
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    on_path = shutil.which("torchrun")
    if on_path:
        return [on_path]
    return [sys.executable, "-m", "torch.distributed.run"]


def _argv_from_typed(train_type, typed):
    tt = registry.get_type(train_type)
    script = f"../trainer/{tt.script}"
    gpus = typed["gpus"]
    if len(gpus) >= 2:
        argv = torchrun_argv() + ["--nproc_per_node", str(len(gpus)), script]
    else:
        argv = [sys.executable, script]
    for p in tt.params:
        if p.name == "device":
            if typed["device"] is not None:
                argv += ["--device", typed["device"]]
        elif p.name == "train_monitor":
            if typed["train_monitor"] != "none":
                argv.append("--use_wandb")
            project = typed.get("wandb_project")
            if typed["train_monitor"] == "wandb" and project:
                argv += ["--wandb_project", project]
        elif p.name == "wandb_project":
            continue  # passed with the monitor choice above
        elif p.type is bool:
            if typed[p.name]:
                argv.append(f"--{p.name}")
        elif typed[p.name] is not None:
            argv += [f"--{p.name}", registry.format_value(typed[p.name])]
    return argv


def build_argv(train_type, values):
    """The argv list of a training command (validated; raises ValidationError)."""
    return _argv_from_typed(train_type, validate(train_type, values))


def build_command(train_type, values, trainer_dir=TRAINER_DIR):
    """The full command: argv, working directory (trainer/) and extra environment."""
    typed = validate(train_type, values)
    argv = _argv_from_typed(train_type, typed)
    env = {}
    if len(typed["gpus"]) >= 2:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in typed["gpus"])
        # torchrun's --standalone, set through its environment so the argv keeps the seed's form: the
        # rendezvous takes a free port, so two multi-GPU jobs on one machine do not both claim 29500.
        env["PET_STANDALONE"] = "1"
    display = shlex.join([f"{k}={v}" for k, v in env.items()] + argv)
    return Command(argv=argv, cwd=str(trainer_dir), env=env, display=display)


def _resolve(trainer_dir, path):
    """A path as the trainer sees it: relative paths are relative to its working directory."""
    return Path(os.path.normpath(Path(trainer_dir) / path))


def _unwritable(folder):
    """Why `folder` cannot be written or created, or None when it can."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable" if existing == folder else f"it cannot be created in {existing} (not writable)"
    return None


def _label(train_type, name):
    try:
        return f"{registry.param(train_type, name).label} ({name})"
    except KeyError:
        return {"gpus": "GPUs (gpus)"}.get(name, name)


def preflight(train_type, values, gpu_count, trainer_dir=TRAINER_DIR):
    """Problems that would make the job fail at once, as clear messages; [] when none were found.

    Checks: invalid values, more GPUs than exist, the data file (exists, first lines in the type's
    format), the base weights the type loads, the reward model, and that save_dir and ../checkpoints
    are writable. Relative paths resolve against `trainer_dir`, the jobs' working directory.
    """
    typed, errors = _check(train_type, values)
    problems = [f"{_label(train_type, name)} {message}." for name, message in errors.items()]
    tt = registry.get_type(train_type)

    def value(name):
        """The value the script will use (the default when not given); None if invalid or unknown."""
        if name in errors or name not in tt.names:
            return None
        return tt.param(name).default if typed[name] is None else typed[name]

    # Devices.
    gpus = typed["gpus"]
    plural = "GPU" if gpu_count == 1 else "GPUs"
    if len(gpus) > gpu_count:
        problems.append(f"{len(gpus)} GPUs selected, but this machine has {gpu_count} {plural}.")
    else:
        asked = gpus if len(gpus) >= 2 else []
        device = typed["device"]
        if device and device.startswith("cuda:"):
            asked = [int(device.split(":")[1])]
        for index in asked:
            if gpu_count == 0:
                problems.append(f"GPU {index} selected, but this machine has no NVIDIA GPU: train on the CPU.")
            elif index >= gpu_count:
                problems.append(f"GPU {index} does not exist: this machine has {gpu_count} {plural} "
                                f"(ids 0 to {gpu_count - 1}).")

    # Training data: present, and its first lines in this type's format.
    data_path = value("data_path")
    if data_path:
        kind = formats.KIND_OF_TYPE[train_type]
        path = _resolve(trainer_dir, data_path)
        try:
            formats.validate_file(str(path), kind, max_lines=PREFLIGHT_DATA_LINES)
        except FileNotFoundError:
            problems.append(f"Data file not found: {path} (data_path {data_path!r}; relative paths start in "
                            f"{trainer_dir}).")
        except formats.DataFormatError as e:
            problems.append(f"Data file is not usable for {tt.label}: {e}.")
        except OSError as e:
            problems.append(f"Data file cannot be read: {path} ({e.strerror}).")

    # Base weights: {weight_dir}/{prefix}_{hidden_size}[_moe].pth.
    weight_dir = value("weight_dir")
    moe = "_moe" if value("use_moe") == 1 else ""
    needed = []  # (prefix, hidden size, why)
    if train_type in ("ppo", "grpo", "spo"):
        reasoning = value("reasoning")
        if reasoning is not None:
            prefix = "reason" if reasoning == 1 else "full_sft"
            needed.append((prefix, value("hidden_size"), f"reasoning={reasoning} starts from {prefix}"))
    elif train_type == "distillation":
        student, teacher = value("from_student_weight"), value("from_teacher_weight")
        if student and student != "none":
            needed.append((student, value("student_hidden_size"), f"student: from_student_weight={student}"))
        if teacher == "none":
            problems.append("Distillation needs a teacher: from_teacher_weight cannot be none.")
        elif teacher:
            needed.append((teacher, value("teacher_hidden_size"), f"teacher: from_teacher_weight={teacher}"))
    else:
        start = value("from_weight")
        if train_type == "lora" and start == "none":
            problems.append("LoRA trains on top of a base model: from_weight cannot be none (e.g. full_sft).")
        elif start and start != "none":
            needed.append((start, value("hidden_size"), f"from_weight={start}"))
    if weight_dir:
        reported = set()
        for prefix, hidden, why in needed:
            if hidden is None:
                continue
            path = _resolve(trainer_dir, weight_dir) / f"{prefix}_{hidden}{moe}.pth"
            if not path.is_file() and path not in reported:  # a student and teacher may share one file
                reported.add(path)
                problems.append(f"Base weight not found: {path} ({why}). Train that stage first, "
                                f"or point weight_dir at the folder that holds it.")

    # Reward model (PPO, GRPO, SPO).
    reward = value("reward_model_path")
    if reward and reward.lower() != "none":  # the trainers read "none" case-insensitively
        path = _resolve(trainer_dir, reward)
        if not path.is_dir():
            problems.append(f"Reward model not found: {path} (reward_model_path {reward!r}). Put the model "
                            f"folder there, or set reward_model_path to none to use rule rewards only.")
        elif not (path / "config.json").is_file():
            problems.append(f"Reward model folder {path} has no config.json: it must be a transformers model "
                            f"folder (or set reward_model_path to none).")

    # Where the job writes: its weights, and its resume state in ../checkpoints.
    save_dir = value("save_dir")
    if save_dir:
        why = _unwritable(_resolve(trainer_dir, save_dir))
        if why:
            problems.append(f"Cannot save to {_resolve(trainer_dir, save_dir)}: {why}.")
    checkpoints = _resolve(trainer_dir, "../checkpoints")
    why = _unwritable(checkpoints)
    if why:
        problems.append(f"Cannot write resume state to {checkpoints}: {why}.")
    return problems
