"""The Train page's logic as plain functions: form state, defaults, presets, clones and launching.

A form is a dict of strings (and, for the GPU choice, ints) keyed by parameter name, plus three
device fields and the job name:

- every parameter of the type but ``device`` (``train_monitor`` included), as text;
- ``device_mode``: ``cpu``, ``single`` (one GPU, ``gpu``) or ``multi`` (several GPUs, ``gpus``);
- ``gpu``: the GPU index of single mode; ``gpus``: the GPU indexes of multi mode;
- ``job_name``.

`command_values` turns a form into what `mmcore.command.build_command` takes; those values are also
what a job stores as its params, so a job can be cloned back into a form (`form_from_params`).
The page keeps a form in `st.session_state` under keys that include the training type
(`field_key`), so switching type shows that type's own fields, filled with its defaults.
"""
import datetime
from dataclasses import dataclass, field

from mmcore import command, registry
from mmcore.presets import demo_preset

DEVICE_MODES = ("cpu", "single", "multi")
DEVICE_MODE_LABELS = {"cpu": "CPU", "single": "Single GPU", "multi": "Several GPUs"}

# Form fields that are not training parameters.
DEVICE_FIELDS = ("device_mode", "gpu", "gpus")
NAME_FIELD = "job_name"

# Session-state keys the Train and Jobs pages share.
TYPE_KEY = "train.type"
CLONE_KEY = "train.clone"  # {"train_type": ..., "params": {...}, "job_id": ...} set by Jobs' "Clone to Train"
LAUNCHED_KEY = "train.launched"  # id of the job the Train page launched last


class LaunchRefused(Exception):
    """A launch that cannot start; `reasons` lists every problem, each a sentence for the user."""

    def __init__(self, reasons):
        self.reasons = list(reasons)
        super().__init__("; ".join(self.reasons))


@dataclass
class FormCheck:
    """What a form would launch and what stands in the way.

    `command` is None while any field is invalid; `errors` maps fields to messages (shown next to
    each field); `problems` are preflight findings (missing files and the like), shown above Launch.
    """
    command: command.Command | None
    errors: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)

    @property
    def ok(self):
        return self.command is not None and not self.errors and not self.problems

    @property
    def reasons(self):
        """Every problem as a sentence: field errors first, then preflight findings."""
        return [f"{field_label(name)}: {message}" for name, message in self.errors.items()] + list(self.problems)


# -- what the form shows ------------------------------------------------------------------------

def type_labels():
    """Training type key -> label, in display order."""
    return {key: t.label for key, t in registry.TYPES.items()}


def field_key(train_type, name):
    """The session-state key of one form field; it includes the type, so each type has its own widgets."""
    return f"train.{train_type}.{name}"


def field_label(name, train_type=None):
    """A field's label for messages: the parameter's label, or the device/name field's own."""
    labels = {"device_mode": "Device", "gpu": "GPU", "gpus": "GPUs", "device": "Device", NAME_FIELD: "Job name"}
    if name in labels:
        return labels[name]
    types = [registry.get_type(train_type)] if train_type else registry.TYPES.values()
    for t in types:
        if name in t.names:
            return t.param(name).label
    return name


def sections(train_type):
    """The form's sections in order: [(group, title, [Param, ...])], empty groups left out.

    The `devices` group holds no parameter fields (the device mode replaces `--device`), but it is
    always listed so the page knows where to put the device choice. The type's own parameters are
    titled after the type, e.g. "GRPO parameters".
    """
    t = registry.get_type(train_type)
    result = []
    for group, params in registry.params_by_group(train_type).items():
        params = [p for p in params if p.name != "device"]
        if not params and group != "devices":
            continue
        title = f"{t.short} parameters" if group == "type_specific" else registry.GROUP_LABELS[group]
        result.append((group, title, params))
    return result


def form_params(train_type):
    """The parameters that are form fields (every one but `device`), in command-line order."""
    return [p for p in registry.get_type(train_type).params if p.name != "device"]


def select_options(p):
    """The options of a select field, as form strings."""
    if p.choices is not None:
        return [registry.format_value(c) for c in p.choices]
    return ["0", "1"]  # an on/off flag


def device_modes(gpu_ids):
    """Device modes available with these GPUs: only CPU without GPUs."""
    if not gpu_ids:
        return ["cpu"]
    return ["single", "multi", "cpu"]


# -- building forms -----------------------------------------------------------------------------

def default_job_name(train_type, now=None):
    """A job name like "grpo-20260102-1530"."""
    now = now or datetime.datetime.now()
    return f"{train_type}-{now:%Y%m%d-%H%M}"


def default_devices(gpu_ids):
    """The device fields for a fresh form: the first GPU when there is one (like the scripts), else CPU."""
    gpu_ids = list(gpu_ids)
    if gpu_ids:
        return {"device_mode": "single", "gpu": gpu_ids[0], "gpus": gpu_ids}
    return {"device_mode": "cpu", "gpu": None, "gpus": []}


def initial_form(train_type, gpu_ids=(), now=None):
    """A fresh form of a type: every field at the training script's default."""
    values = {k: v for k, v in registry.defaults(train_type).items() if k != "device"}
    return {**values, **default_devices(gpu_ids), NAME_FIELD: default_job_name(train_type, now)}


def preset_form(train_type, gpu_ids=(), now=None):
    """A form filled with the type's demo preset (a tiny model on the bundled demo data)."""
    form = initial_form(train_type, gpu_ids, now)
    form.update({k: v for k, v in demo_preset(train_type).items() if k in form})
    form[NAME_FIELD] = f"demo-{form[NAME_FIELD]}"
    return form


def _text(value):
    if value is None:
        return ""
    return value if isinstance(value, str) else registry.format_value(value)


def devices_from_params(params, gpu_ids=()):
    """The device fields that reproduce a job's device choice, within the GPUs present now.

    A job that ran on GPUs this machine does not have comes back on the first GPU present, or on
    CPU when there is none.
    """
    gpu_ids = list(gpu_ids)
    fresh = default_devices(gpu_ids)
    raw = params.get("gpus") or []
    if isinstance(raw, str):
        raw = [g for g in raw.split(",") if g.strip()]
    try:
        wanted = [int(g) for g in raw]
    except (TypeError, ValueError):
        wanted = []
    device = _text(params.get("device"))
    if len(wanted) >= 2 and all(g in gpu_ids for g in wanted):
        return {**fresh, "device_mode": "multi", "gpus": wanted}
    if device.startswith("cuda:") and device[5:].isdigit() and int(device[5:]) in gpu_ids:
        return {**fresh, "device_mode": "single", "gpu": int(device[5:])}
    if len(wanted) == 1 and wanted[0] in gpu_ids:
        return {**fresh, "device_mode": "single", "gpu": wanted[0]}
    if device == "cpu" or not gpu_ids:
        return {**fresh, "device_mode": "cpu"}
    return fresh


def form_from_params(train_type, params, gpu_ids=(), name=None, now=None):
    """A form holding a job's params (Clone to Train): the type's defaults, overwritten by the job's.

    Keys that are not fields of the type are ignored; values are shown as text.
    """
    form = initial_form(train_type, gpu_ids, now)
    for p in form_params(train_type):
        if p.name in params:
            form[p.name] = _text(params[p.name])
    form.update(devices_from_params(params, gpu_ids))
    if name:
        form[NAME_FIELD] = name
    return form


# -- session state ------------------------------------------------------------------------------

def form_keys(train_type):
    """Every form field name of a type (parameters, device fields, job name)."""
    return [p.name for p in form_params(train_type)] + list(DEVICE_FIELDS) + [NAME_FIELD]


def store_form(state, train_type, form):
    """Write a form into session state (only before the widgets are drawn, or from a callback)."""
    for name in form_keys(train_type):
        if name in form:
            state[field_key(train_type, name)] = form[name]


def ensure_form(state, train_type, gpu_ids=(), now=None):
    """Fill the fields of a type that session state lacks with the defaults; fix impossible values.

    Streamlit drops a widget's state once it is not drawn, so a type that was switched away from
    comes back with its defaults.
    """
    fresh = initial_form(train_type, gpu_ids, now)
    for name in form_keys(train_type):
        key = field_key(train_type, name)
        if key not in state:
            state[key] = fresh[name]
    # Select widgets fail on values outside their options (a cloned job from another machine).
    for p in form_params(train_type):
        if p.widget in ("select", "checkbox") and state[field_key(train_type, p.name)] not in select_options(p):
            state[field_key(train_type, p.name)] = fresh[p.name]
    gpu_ids = list(gpu_ids)
    if state[field_key(train_type, "device_mode")] not in device_modes(gpu_ids):
        state[field_key(train_type, "device_mode")] = fresh["device_mode"]
    if state[field_key(train_type, "gpu")] not in gpu_ids:
        state[field_key(train_type, "gpu")] = fresh["gpu"]
    gpus = state[field_key(train_type, "gpus")]
    state[field_key(train_type, "gpus")] = [g for g in (gpus or []) if g in gpu_ids]


def read_form(state, train_type):
    """The form of a type as session state holds it."""
    return {name: state.get(field_key(train_type, name)) for name in form_keys(train_type)}


def take_clone(state, gpu_ids=(), now=None):
    """Apply a pending "Clone to Train" request: select its type and fill that type's form.

    Returns (train_type, job_id) of the clone, or None when there was none or it named an unknown type.
    """
    clone = state.pop(CLONE_KEY, None)
    if not clone or clone.get("train_type") not in registry.TYPES:
        return None
    train_type = clone["train_type"]
    name = f"{clone['name']}-copy" if clone.get("name") else None
    store_form(state, train_type, form_from_params(train_type, clone.get("params") or {}, gpu_ids, name, now))
    state[TYPE_KEY] = train_type
    return train_type, clone.get("job_id")


# -- from form to command -----------------------------------------------------------------------

def command_values(train_type, form):
    """The values `command.build_command` takes (and a job stores as its params) for a form."""
    values = {p.name: _text(form.get(p.name)) for p in form_params(train_type)}
    mode = form.get("device_mode") or "cpu"
    if mode == "multi":
        values["device"] = ""
        values["gpus"] = [int(g) for g in form.get("gpus") or []]
    elif mode == "single" and form.get("gpu") is not None:
        values["device"] = f"cuda:{int(form['gpu'])}"
        values["gpus"] = []
    else:
        values["device"] = "cpu"
        values["gpus"] = []
    return values


def _device_errors(form, gpu_count):
    mode = form.get("device_mode") or "cpu"
    if mode not in DEVICE_MODES:
        return {"device_mode": f"must be one of {', '.join(DEVICE_MODE_LABELS.values())}"}
    if mode != "cpu" and gpu_count == 0:
        return {"device_mode": "no GPU was found on this machine: choose CPU"}
    if mode == "single" and form.get("gpu") is None:
        return {"gpu": "choose a GPU"}
    if mode == "multi" and not form.get("gpus"):
        return {"gpus": "choose at least one GPU"}
    return {}


def check_values(train_type, values, gpu_count, extra_errors=None):
    """Validate command values, then run the preflight checks on valid ones -> FormCheck."""
    errors = dict(extra_errors or {})
    try:
        cmd = command.build_command(train_type, values)
    except command.ValidationError as exc:
        errors.update(exc.errors)
        return FormCheck(command=None, errors=errors)
    if errors:
        return FormCheck(command=None, errors=errors)
    try:
        problems = list(command.preflight(train_type, values, gpu_count))
    except OSError as exc:  # an unreadable file or folder is a problem to show, not a crash
        problems = [f"cannot check the files: {exc}"]
    return FormCheck(command=cmd, problems=problems)


def check_form(train_type, form, gpu_count):
    """Validate a form and run the preflight checks -> FormCheck."""
    errors = _device_errors(form, gpu_count)
    if not _text(form.get(NAME_FIELD)).strip():
        errors[NAME_FIELD] = "is required"
    return check_values(train_type, command_values(train_type, form), gpu_count, errors)


def _start(store, train_type, name, values, cmd, gpu_count=0, backend=None):
    """Put a checked job in the queue (it starts as soon as its resources are free); return its id."""
    from mmcore import jobqueue  # the queue imports command and scheduler, not this module

    return jobqueue.submit(store, train_type, values, name=name, backend=backend, gpu_count=gpu_count, check=False)


def launch(store, train_type, name, values, gpu_count, backend=None):
    """Check command values and queue the job (see `_start`); return the job id.

    Raises LaunchRefused with every reason when the values are invalid or preflight finds problems.
    """
    check = check_values(train_type, values, gpu_count)
    if not check.ok:
        raise LaunchRefused(check.reasons)
    return _start(store, train_type, name, values, check.command, gpu_count, backend)


def launch_form(store, train_type, form, gpu_count, backend=None):
    """Launch a form's job (the Train page's Launch button); return the job id or raise LaunchRefused."""
    check = check_form(train_type, form, gpu_count)
    if not check.ok:
        raise LaunchRefused(check.reasons)
    return _start(store, train_type, _text(form.get(NAME_FIELD)).strip(), command_values(train_type, form),
                  check.command, gpu_count, backend)


def resume_values(train_type, params):
    """A finished job's params for a resumed run: the same values with from_resume=1.

    Values the job does not have (a job written by another tool) take the script's defaults.
    """
    values = {**registry.defaults(train_type), **params}
    values["from_resume"] = "1"
    return values


def resume(store, job, gpu_count):
    """Queue a new job that resumes `job` from its last checkpoint, where it ran; return the new job's id."""
    name = f"{job.name}-resume" if job.name else f"{job.train_type}-resume"
    return launch(store, job.train_type, name, resume_values(job.train_type, job.params), gpu_count,
                  backend=job.backend)
