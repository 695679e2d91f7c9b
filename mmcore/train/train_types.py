"""Training types and their parameters: the one place the dashboard's forms read.

Names, types, defaults, choices, bounds and help texts come from `trainer/rules/args.py`, the same
definitions the training scripts parse, so a form's defaults are the scripts' defaults by
construction. This module only adds what a UI needs on top: a group and a widget kind. Labels are the
language tables' (`param.<name>`, `group.<group>`: `field_label`, `group_label`).

Two options are not plain form fields. `device` is chosen by the device mode (CPU, one GPU,
several GPUs; see `mmcore.train.commandline`), and the `--use_wandb` flag is replaced by `train_monitor`
(none / wandb / swanlab), which `mmcore.train.commandline` maps back to `--use_wandb [--wandb_project ...]`.
"""
import re
from dataclasses import dataclass
from types import MappingProxyType

from mmcore.base import i18n
from trainer.rules import args as trainer_args  # torch-free by design
from trainer.rules import specs

#: UI groups, in the order a form shows them.
GROUPS = ("training", "model", "save_load", "type_specific", "devices", "monitoring")

WIDGETS = ("number", "text", "select", "checkbox")

MONITORS = ("none", "wandb", "swanlab")

# Options shared by every trainer; anything else a script has is its own (group type_specific).
_GROUP_OF_COMMON = {
    "epochs": "training", "batch_size": "training", "learning_rate": "training",
    "accumulation_steps": "training", "grad_clip": "training", "log_interval": "training",
    "save_interval": "training", "dtype": "training", "num_workers": "training",
    "hidden_size": "model", "num_hidden_layers": "model", "max_seq_len": "model", "use_moe": "model",
    "tokenizer_path": "model", "keep_checkpoints": "save_load",
    "save_dir": "save_load", "save_weight": "save_load", "lora_name": "save_load", "data_path": "save_load",
    "from_weight": "save_load", "weight_dir": "save_load", "from_resume": "save_load",
    "device": "devices",
    "train_monitor": "monitoring", "wandb_project": "monitoring",
    "run_dir": "monitoring",  # the run's structured records (metrics stream, rollout store)
    "eval_data": "monitoring", "eval_holdout": "monitoring", "eval_interval": "monitoring",  # held-out evaluation
    "eval_rows": "monitoring",
    "seed": "training",  # a sweep's seeds; empty: upstream's fixed seed
}

# A run without data or without a place to save makes no sense, so these may not be left empty;
# any other empty field means "the script's own default".
REQUIRED = frozenset({"save_dir", "data_path"})


@dataclass(frozen=True)
class Param:
    """One parameter of a training type, as a form shows it."""
    name: str
    type: type  # int, float, str or bool
    default: object  # the script's default, typed (device: "auto" = cuda:0 when available, else cpu)
    help: str  # English: the script's own (trainer/rules/args.py); `param_help` in the viewer's language
    group: str
    widget: str
    choices: tuple | None = None
    min: float | None = None
    max: float | None = None
    gt_zero: bool = False
    kind: str | None = None  # "name", "read" or "write" (see trainer/rules/args.py KINDS)
    required: bool = False

    # The rule is written once, in trainer/rules/args.py: Arg.check reads only kind/choices/gt_zero/min/max.
    check = trainer_args.Arg.check

    @property
    def default_text(self):
        """The default as a form string."""
        return format_value(self.default)

    @property
    def label(self):
        """The field's label in the viewer's language."""
        return field_label(self.name)


@dataclass(frozen=True)
class TrainType:
    """A training type as a form shows it: its spec (trainer/rules/specs.py: label, script, data kind,
    file rules) and its parameters in command-line order (the common ones first, then the type's
    own, each in trainer/rules/args.py order)."""
    spec: specs.TypeSpec
    params: tuple

    @property
    def key(self):
        return self.spec.key

    @property
    def label(self):
        return self.spec.label

    @property
    def short(self):
        return self.spec.short

    @property
    def short_label(self):
        """The short name in the viewer's language ("预训练"); the same as `short` where both languages
        say it alike ("GRPO")."""
        key = f"type.short.{self.key}"
        return i18n.t(key) if key in i18n.table(i18n.DEFAULT) else self.spec.short

    @property
    def script(self):
        return self.spec.script

    def param(self, name):
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"training type {self.key!r} has no parameter {name!r}")

    @property
    def names(self):
        return tuple(p.name for p in self.params)


def format_value(value):
    """A typed value as a form string that reads naturally and parses back to the same value.

    Floats use Python's shortest round-trip form with a plain exponent: 0.02 -> "0.02",
    8e-08 -> "8e-8", 0.0005 -> "0.0005", 1.0 -> "1.0". Ints: "8". Flags: "1" / "0".
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return re.sub(r"e([+-])0*(\d)", lambda m: "e" + ("-" if m.group(1) == "-" else "+") + m.group(2), repr(value))
    return str(value)


def _widget(arg_type, choices):
    if choices is not None:
        return "select"
    if arg_type is bool:
        return "checkbox"
    if arg_type in (int, float):
        return "number"
    return "text"


def _param_from_arg(arg):
    group = _GROUP_OF_COMMON.get(arg.name, "type_specific")
    return Param(
        name=arg.name, type=arg.type, default=arg.default, help=arg.help, group=group,
        widget="text" if arg.name == "device" else _widget(arg.type, arg.choices),
        choices=arg.choices, min=arg.min, max=arg.max, gt_zero=arg.gt_zero, kind=arg.kind,
        required=arg.name in REQUIRED)


# The dashboard's own field, with no script option behind it: its English help is the language table's.
_TRAIN_MONITOR = Param(
    name="train_monitor", type=str, default="none", group="monitoring", widget="select", choices=MONITORS,
    help=i18n.table(i18n.DEFAULT)["help.train_monitor"])


def _build_type(key):
    params = []
    for arg in trainer_args.ARGS[key]:
        # The --use_wandb flag becomes the three-way monitor choice, at the same place.
        params.append(_TRAIN_MONITOR if arg.name == "use_wandb" else _param_from_arg(arg))
    # The type's own options follow the common ones (a stable sort keeps args.py order within each),
    # so a command line reads "common flags, then this type's flags", as upstream launchers wrote it.
    params.sort(key=lambda p: p.group == "type_specific")
    return TrainType(spec=specs.spec(key), params=tuple(params))


#: Every training type, in display order: key -> TrainType.
TYPES = MappingProxyType({key: _build_type(key) for key in trainer_args.TRAIN_TYPES})


def get_type(train_type):
    """The TrainType of a key, with a clear error for an unknown one."""
    try:
        return TYPES[train_type]
    except KeyError:
        raise KeyError(f"unknown training type {train_type!r}; known: {', '.join(TYPES)}") from None


def param(train_type, name):
    """One parameter of a training type."""
    return get_type(train_type).param(name)


# The Train page's own fields' keys in the language tables (parameters are under `param.<name>`).
_PAGE_FIELD_KEYS = {"device_mode": "train.device", "gpu": "train.gpu", "gpus": "train.gpus", "job_name": "train.job_name"}


def field_label(name, train_type=None):
    """A form field's label in the viewer's language, for forms and messages: "Learning rate", "GPUs";
    the name itself for an unknown field. The labels are the language tables' (`param.<name>`, the
    Train page's own fields under `train.`), the same for every type (`train_type` is accepted for
    callers that know it)."""
    key = _PAGE_FIELD_KEYS.get(name, f"param.{name}")
    return i18n.t(key) if key in i18n.table(i18n.DEFAULT) else name


def group_label(group, train_type):
    """A form section's title in the viewer's language: "Training", or "GRPO parameters" for the
    type's own parameters."""
    if group == "type_specific":
        return i18n.t("group.type_specific", type=get_type(train_type).short_label)
    return i18n.t(f"group.{group}")


def param_help(train_type, name):
    """An option's help text in the viewer's language: the type's own text where the option means
    something else for it (`help.ppo.learning_rate`), else the option's (`help.learning_rate`). The
    English texts are the scripts' (trainer/rules/args.py); the dashboard's own field's, en.json's."""
    if any(a.name == name for a in trainer_args.ARGS[get_type(train_type).key]):
        return i18n.t(trainer_args.help_key(train_type, name))
    return i18n.t(f"help.{name}")


def params_by_group(train_type):
    """Parameters of a type by UI group: {group: [Param, ...]} with every group of GROUPS, in order
    (a group the type does not use maps to an empty list)."""
    grouped = {g: [] for g in GROUPS}
    for p in get_type(train_type).params:
        grouped[p.group].append(p)
    return grouped


def defaults(train_type):
    """The type's defaults as form strings: {name: text}, in command-line order."""
    return {p.name: p.default_text for p in get_type(train_type).params}
