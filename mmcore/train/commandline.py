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

`check` parses them once into `CheckedValues`; the command (`command_of`) and the file checks
(`mmcore.train.preflight`) both read that.
"""
import math
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from mmcore.access import dashboard_roots
from mmcore.base.paths import TRAINER_DIR
from mmcore.train import train_types
from trainer.rules import args as trainer_args
from trainer.rules.messages import message

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


def _submitted_text(value):
    """A submitted value as stripped text; widgets that return numbers or booleans are accepted too."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    return train_types.format_value(value)


def _convert(p, text):
    """(typed value, None) or (None, message) for the non-empty `text` of parameter `p`."""
    if p.type is bool:
        if text.lower() in _TRUE:
            return True, None
        if text.lower() in _FALSE:
            return False, None
        return None, message("field.flag")
    if p.type is int:
        try:
            value = int(text)
        except ValueError:
            return None, message("field.not_whole", got=repr(text))
    elif p.type is float:
        try:
            value = float(text)
        except ValueError:
            return None, message("field.not_number", got=repr(text))
        if not math.isfinite(value):
            return None, message("field.not_finite", got=repr(text))
    else:
        value = text
        # argparse would read a leading '-' as another option, and argv cannot hold NUL.
        if text.startswith("-"):
            return None, message("field.dash")
        if any(c in text for c in "\0\n\r"):
            return None, message("field.one_line")
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
            return [], message("field.gpu_ids", got=repr(text))
        gpus.append(int(text))
    if len(set(gpus)) != len(gpus):
        return [], message("field.gpu_twice")
    return gpus, None


@dataclass(frozen=True)
class CheckedValues:
    """Submitted values parsed once: what every later step (command, preflight) reads.

    `typed` holds each valid parameter's typed value (None = not given: the script's default
    applies), plus `device` (None = the script chooses, or torchrun), `gpus` (list of ints) and
    `train_monitor`; a field with a problem is absent from it and has a message in `errors`.
    """
    train_type: str
    typed: dict
    errors: dict

    @property
    def ok(self):
        return not self.errors

    def effective(self):
        """Option name -> the value the script will use (its default where none was given), for
        every valid option of the type; an invalid option is absent."""
        tt = train_types.get_type(self.train_type)
        return {p.name: p.default if self.typed[p.name] is None else self.typed[p.name]
                for p in tt.params if p.name in self.typed and p.name not in ("device", "train_monitor")}


def check(train_type, values, trainer_dir=TRAINER_DIR):
    """Parse every submitted field -> CheckedValues (KeyError for an unknown training type).

    Relative paths are checked as the job sees them, from `trainer_dir` (its working directory)."""
    tt = train_types.get_type(train_type)
    typed, errors = {}, {}
    for p in tt.params:
        if p.name in ("device", "train_monitor"):
            continue
        text = _submitted_text(values.get(p.name))
        if not text:
            if p.required:
                errors[p.name] = message("field.required")
            else:
                typed[p.name] = None  # not given: the script's default applies
            continue
        value, problem = _convert(p, text)
        if problem:
            errors[p.name] = problem
        else:
            typed[p.name] = value

    monitor = _submitted_text(values.get("train_monitor")) or "none"
    if monitor in train_types.MONITORS:
        typed["train_monitor"] = monitor
    else:
        errors["train_monitor"] = message("field.one_of", choices=", ".join(train_types.MONITORS))

    device, gpus, device_errors = parse_devices(values)
    errors.update(device_errors)
    typed["gpus"], typed["device"] = gpus, device
    # Rules over several fields and over the file system, on the values the script would use: sizes
    # the model can build, paths inside the allowed folders (an outside path is reported as such and
    # never looked at further, so a form cannot probe which files exist elsewhere).
    checked = CheckedValues(train_type, typed, errors)
    effective = checked.effective()
    for found in (trainer_args.cross_errors(train_type, effective), dashboard_roots.path_errors(train_type, effective, base=trainer_dir)):
        for name, problem in found.items():
            errors.setdefault(name, problem)
            typed.pop(name, None)
    return checked


def parse_devices(values):
    """(device, gpus, errors) of submitted values: `device` is "cpu", "cuda:N" or None (the script
    chooses; always None with two or more GPUs, which run torchrun), `gpus` a list of ints."""
    errors = {}
    gpus, problem = _parse_gpus(values.get("gpus"))
    if problem:
        errors["gpus"] = problem
    device = _submitted_text(values.get("device"))
    if device in ("", trainer_args.AUTO_DEVICE):
        device = None  # the script picks cuda:0 when CUDA is available, else cpu
    elif _CUDA_DEVICE.fullmatch(device):
        device = f"cuda:{int(device[5:])}"
    elif device != "cpu":
        errors["device"] = message("field.device", got=repr(device))
        device = None
    if device is None and len(gpus) == 1:
        device = f"cuda:{gpus[0]}"
    return (None if len(gpus) >= 2 else device), gpus, errors


def validate(train_type, values):
    """Typed values of every field (None = not given), plus device, gpus and train_monitor.

    Raises ValidationError listing every problem at once (field -> message); KeyError for an
    unknown training type.
    """
    checked = check(train_type, values)
    if checked.errors:
        raise ValidationError(checked.errors)
    return checked.typed


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


#: The held-out evaluation's options (trainer/held_out.py): on the command line only when it is on (a
#: held-out file or rows), so a job without it keeps the command it always had.
EVAL_OPTIONS = ("eval_data", "eval_holdout", "eval_interval", "eval_rows")


def _argv_from_typed(train_type, typed):
    tt = train_types.get_type(train_type)
    evaluating = bool(typed.get("eval_data")) or bool(typed.get("eval_holdout"))
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
        elif p.name in EVAL_OPTIONS and not evaluating:
            continue
        elif p.type is bool:
            if typed[p.name]:
                argv.append(f"--{p.name}")
        elif typed[p.name] is not None:
            argv += [f"--{p.name}", train_types.format_value(typed[p.name])]
    return argv


def build_argv(train_type, values):
    """The argv list of a training command (validated; raises ValidationError)."""
    return _argv_from_typed(train_type, validate(train_type, values))


def build_command(train_type, values, trainer_dir=TRAINER_DIR):
    """The full command: argv, working directory (trainer/) and extra environment (validated)."""
    checked = check(train_type, values)
    if checked.errors:
        raise ValidationError(checked.errors)
    return command_of(checked, trainer_dir)


def command_of(checked, trainer_dir=TRAINER_DIR):
    """The command of values that `check` found valid."""
    typed = checked.typed
    argv = _argv_from_typed(checked.train_type, typed)
    env = {}
    if len(typed["gpus"]) >= 2:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in typed["gpus"])
        # torchrun's --standalone, set through its environment so the argv keeps the seed's form: the
        # rendezvous takes a free port, so two multi-GPU jobs on one machine do not both claim 29500.
        env["PET_STANDALONE"] = "1"
    display = shlex.join([f"{k}={v}" for k, v in env.items()] + argv)
    return Command(argv=argv, cwd=str(trainer_dir), env=env, display=display)
