"""The Train page's form as plain functions: form state, defaults, presets and clones.

A form is a dict of strings (and, for the GPU choice, ints) keyed by parameter name, plus three
device fields and the job name (in session state, number fields hold numbers for their number
inputs: `store_form` and `read_form` convert):

- every parameter of the type but ``device`` (``train_monitor`` included), as text;
- ``device_mode``: ``cpu``, ``single`` (one GPU, ``gpu``) or ``multi`` (several GPUs, ``gpus``);
- ``gpu``: the GPU index of single mode; ``gpus``: the GPU indexes of multi mode;
- ``job_name``.

`command_values` turns a form into submitted values (see `mmcore.train.commandline`); those values are also
what a job stores as its params, so a job can be cloned back into a form (`form_from_params`).
`check_form` checks a form once per rerun (`mmcore.queue.launch.check`); the page shows that check and
launches from it (`launch.start`).
The page keeps a form in `st.session_state` under keys that include the training type
(`field_key`), so switching type shows that type's own fields, filled with its defaults.
"""
import datetime
import math

from mmcore.data import links
from mmcore.queue import launch
from mmcore.train import commandline, train_types
from mmcore.train.preset_table import demo_preset
from trainer.rules.args import CPU_DTYPE
from trainer.rules.messages import message

DEVICE_MODES = ("cpu", "single", "multi")
DEVICE_MODE_LABELS = {"cpu": "CPU", "single": "Single GPU", "multi": "Several GPUs"}

# Form fields that are not training parameters.
DEVICE_FIELDS = ("device_mode", "gpu", "gpus")
NAME_FIELD = "job_name"

# Session-state keys the Train and Jobs pages share.
TYPE_KEY = "train.type"
CLONE_KEY = "train.clone"  # {"train_type": ..., "params": {...}, "job_id": ...} set by Jobs' "Clone to Train"
LAUNCHED_KEY = "train.launched"  # id of the job the Train page launched last


# -- what the form shows ------------------------------------------------------------------------

def type_labels():
    """Training type key -> label, in display order."""
    return {key: t.label for key, t in train_types.TYPES.items()}


def field_key(train_type, name):
    """The session-state key of one form field; it includes the type, so each type has its own widgets."""
    return f"train.{train_type}.{name}"


def sections(train_type):
    """The form's sections in order: [(group, title, [Param, ...])], empty groups left out.

    The `devices` group holds no parameter fields (the device mode replaces `--device`), but it is
    always listed so the page knows where to put the device choice. The type's own parameters are
    titled after the type, e.g. "GRPO parameters".
    """
    t = train_types.get_type(train_type)
    result = []
    for group, params in train_types.params_by_group(train_type).items():
        params = [p for p in params if p.name != "device"]
        if not params and group != "devices":
            continue
        result.append((group, train_types.group_label(group, t.key), params))
    return result


def form_params(train_type):
    """The parameters that are form fields (every one but `device`), in command-line order."""
    return [p for p in train_types.get_type(train_type).params if p.name != "device"]


def param_help(train_type, p):
    """A parameter's help text in the viewer's language: the type's own text where the option means
    something else for it (`help.ppo.learning_rate`), else the option's (`help.learning_rate`). The
    English texts are trainer/rules/args.py's (a test keeps them equal)."""
    return train_types.param_help(train_type, p.name)


def select_options(p):
    """The options of a select field, as form strings."""
    if p.choices is not None:
        return [train_types.format_value(c) for c in p.choices]
    return ["0", "1"]  # an on/off flag


def number_step(p):
    """The +/- step of a number field: 1 for whole numbers; for a float, a tenth of its default's
    order of magnitude (0.0005 -> 1e-05, 0.8 -> 0.01), so a click nudges the value instead of
    jumping past it."""
    if p.type is int:
        return 1
    scale = abs(p.default) if isinstance(p.default, (int, float)) and p.default else 1.0
    return float(f"1e{math.floor(math.log10(scale)) - 1}")


def number_value(p, text):
    """A number field's widget value for a form string: a number of the parameter's type, or None
    (an empty field, which means the script's own default) for text that is empty or no number."""
    text = (text if isinstance(text, str) else _form_text(text)).strip()
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    if p.type is int:
        return int(value) if value.is_integer() else None
    return value


def number_text(value):
    """A number field's widget value as a form string ("" when the field is empty). Floats are cut to
    12 significant digits, so a value stepped in the browser (0.8 - 0.01 = 0.7900000000000001) reads
    as typed."""
    if value is None:
        return ""
    if isinstance(value, float):
        value = float(f"{value:.12g}")
    return train_types.format_value(value)


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
    """A fresh form of a type: every field at the training script's default, except that without a GPU
    dtype shows what a CPU job trains in (the value shown is the value used)."""
    values = {k: v for k, v in train_types.defaults(train_type).items() if k != "device"}
    if not list(gpu_ids) and "dtype" in values:
        values["dtype"] = CPU_DTYPE
    return {**values, **default_devices(gpu_ids), NAME_FIELD: default_job_name(train_type, now)}


def preset_form(train_type, gpu_ids=(), now=None):
    """A form filled with the type's demo preset (a tiny model on the bundled demo data)."""
    form = initial_form(train_type, gpu_ids, now)
    form.update({k: v for k, v in demo_preset(train_type).items() if k in form})
    form[NAME_FIELD] = f"demo-{form[NAME_FIELD]}"
    return form


def _form_text(value):
    if value is None:
        return ""
    return value if isinstance(value, str) else train_types.format_value(value)


def devices_from_params(params, gpu_ids=()):
    """The device fields that reproduce a job's device choice (its stored params), within the GPUs
    present now. A job that ran on GPUs this machine does not have comes back on the first GPU
    present, or on CPU when there is none."""
    gpu_ids = list(gpu_ids)
    fresh = default_devices(gpu_ids)
    device, gpus, _ = commandline.parse_devices(params)
    if len(gpus) >= 2 and all(g in gpu_ids for g in gpus):
        return {**fresh, "device_mode": "multi", "gpus": gpus}
    if device and device.startswith("cuda:") and int(device[5:]) in gpu_ids:
        return {**fresh, "device_mode": "single", "gpu": int(device[5:])}
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
            form[p.name] = _form_text(params[p.name])
    form.update(devices_from_params(params, gpu_ids))
    if name:
        form[NAME_FIELD] = name
    return form


# -- session state ------------------------------------------------------------------------------

def form_keys(train_type):
    """Every form field name of a type (parameters, device fields, job name)."""
    return [p.name for p in form_params(train_type)] + list(DEVICE_FIELDS) + [NAME_FIELD]


def _number_params(train_type):
    return {p.name: p for p in form_params(train_type) if p.widget == "number"}


def store_form(state, train_type, form):
    """Write a form into session state (only before the widgets are drawn, or from a callback).

    Number fields hold numbers there (their widgets are number inputs); the form keeps strings.
    """
    numbers = _number_params(train_type)
    for name in form_keys(train_type):
        if name in form:
            value = form[name]
            state[field_key(train_type, name)] = number_value(numbers[name], value) if name in numbers else value


def ensure_form(state, train_type, gpu_ids=(), now=None):
    """Fill the fields of a type that session state lacks with the defaults; fix impossible values.

    Streamlit drops a widget's state once it is not drawn, so a type that was switched away from
    comes back with its defaults.
    """
    fresh = initial_form(train_type, gpu_ids, now)
    store_form(state, train_type, {name: fresh[name] for name in form_keys(train_type)
                                   if field_key(train_type, name) not in state})
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
    """The form of a type as session state holds it (number fields back as strings)."""
    numbers = _number_params(train_type)
    form = {name: state.get(field_key(train_type, name)) for name in form_keys(train_type)}
    for name in numbers:
        form[name] = number_text(form[name]) if not isinstance(form[name], str) else form[name]
    return form


def take_clone(state, gpu_ids=(), now=None):
    """Apply a pending "Clone to Train" request: select its type and fill that type's form.

    Returns (train_type, job_id) of the clone, or None when there was none or it named an unknown type.
    """
    clone = state.pop(CLONE_KEY, None)
    if not clone or clone.get("train_type") not in train_types.TYPES:
        return None
    state.pop(LAUNCHED_KEY, None)  # "Launched job N" was about the form this one replaces
    train_type = clone["train_type"]
    name = f"{clone['name']}-copy" if clone.get("name") else None
    store_form(state, train_type, form_from_params(train_type, clone.get("params") or {}, gpu_ids, name, now))
    state[TYPE_KEY] = train_type
    return train_type, clone.get("job_id")


def take_data_link(state, query, gpu_ids=(), now=None):
    """Apply the Data page's "Train on this file" link once (query parameters `data`, `type`,
    `max_seq_len`, removed from the URL): select its type and set that form's data file and max_seq_len.
    A file of the bundled demo data opens the type's Demo preset (its tiny model and demo folders) under
    them. Returns the data path, or None when the URL holds no such link."""
    linked = links.read_train_params(query)
    for name in ("data", "type", "max_seq_len"):
        if name in query:
            del query[name]
    if linked is None:
        return None
    train_type, values = linked
    ensure_form(state, train_type, gpu_ids, now)
    base = preset_form(train_type, gpu_ids, now) if links.is_demo_file(values["data_path"]) else read_form(state, train_type)
    store_form(state, train_type, {**base, **values})
    state.pop(LAUNCHED_KEY, None)
    state[TYPE_KEY] = train_type
    return values["data_path"]


# -- from form to command -----------------------------------------------------------------------

def command_values(train_type, form):
    """The values `command.build_command` takes (and a job stores as its params) for a form."""
    values = {p.name: _form_text(form.get(p.name)) for p in form_params(train_type)}
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
        return {"device_mode": message("field.one_of", choices=", ".join(DEVICE_MODE_LABELS.values()))}
    if mode != "cpu" and gpu_count == 0:
        return {"device_mode": message("field.no_gpu")}
    if mode == "single" and form.get("gpu") is None:
        return {"gpu": message("field.choose_gpu")}
    if mode == "multi" and not form.get("gpus"):
        return {"gpus": message("field.choose_gpus")}
    return {}


def job_name(form):
    """The job name a form gives."""
    return _form_text(form.get(NAME_FIELD)).strip()


def check_form(train_type, form, gpu_count, store=None):
    """Validate a form and run the preflight checks -> launch.LaunchCheck (`launch.start` starts it).
    `store`: base weights its queued or running jobs will write are pending, not missing."""
    errors = _device_errors(form, gpu_count)
    if not job_name(form):
        errors[NAME_FIELD] = message("field.required")
    return launch.check(train_type, command_values(train_type, form), gpu_count, errors, store=store)


# -- clones -------------------------------------------------------------------------------------

def clone_request(job):
    """What the Train page needs to open prefilled with a job (stored under CLONE_KEY by the Jobs page)."""
    return {"train_type": job.train_type, "params": dict(job.params), "job_id": job.id, "name": job.name}
