"""A page's view in its URL: the Logs page's whole state (runs, metrics, smoothing, x axis, log
scale per chart, step range, tail length) as query parameters, so a link reproduces what a teammate
sees, and reloading or coming back keeps it.

`FIELDS` maps each query parameter to the session-state key of its widget and its kind. `decode`
turns query parameters into widget values (a value that cannot be read is left out and named in
the problems), `encode` does the reverse, leaving out what is at its default. `apply` and `publish`
are what a page calls at the start and the end of its run: the URL wins when it changed since the
page last wrote it (a link was opened, the browser went back), otherwise the widgets do.
"""
import math
from dataclasses import dataclass

from mmcore.base.i18n import t

APPLIED_KEY = "urlstate.applied"  # session state: page -> the query parameters it last applied or wrote


@dataclass(frozen=True)
class Field:
    key: str  # the widget's session-state key
    kind: str  # ints | strs | float | int | number | choice | smooth
    default: object = None
    choices: tuple = ()
    low: float = -math.inf
    high: float = math.inf


LOGS = {
    "job": Field("logs.jobs", "ints", ()),
    "file": Field("logs.files", "strs", ()),
    "folder": Field("logs.folders", "strs", ()),
    "m": Field("logs.metrics", "strs", None),  # None: the page's default choice of metrics
    # "auto": each chart's weight chosen from its noise; else one of the slider's stops.
    "smooth": Field("logs.smoothing", "smooth", "auto",
                    choices=("auto", *[round(0.05 * i, 2) for i in range(19)], 0.93, 0.95, 0.97, 0.99)),
    "x": Field("logs.x_axis", "choice", "step", choices=("step", "samples", "tokens", "time")),
    "log": Field("logs.log_metrics", "strs", ()),
    "from": Field("logs.x_from", "number", None, low=0),
    "to": Field("logs.x_to", "number", None, low=0),
    "tail": Field("logs.tail_lines", "choice", 200, choices=(50, 200, 1000)),
}


def _split(text):
    return [part.strip() for part in str(text).split(",") if part.strip()]


def _number(text):
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return int(value) if value == int(value) else value


def decode_value(name, field, text):
    """The widget value of one query parameter; ValueError (a sentence) when it cannot be read."""
    try:
        if field.kind == "ints":
            return [int(part) for part in _split(text)]
        if field.kind == "strs":
            return _split(text)
        if field.kind in ("float", "int"):
            value = float(text) if field.kind == "float" else int(text)
            if not field.low <= value <= field.high:
                raise ValueError
            return value
        if field.kind == "choice":
            for choice in field.choices:
                if str(choice) == str(text).strip():
                    return choice
            raise ValueError
        if field.kind == "number":
            value = _number(text)
            if not field.low <= value <= field.high:
                raise ValueError
            return value
        if field.kind == "smooth":
            if str(text).strip() == "auto":
                return "auto"
            value = float(text)
            if not 0 <= value <= 0.99:
                raise ValueError
            return min((c for c in field.choices if c != "auto"), key=lambda c: abs(c - value))
    except ValueError:
        pass
    expected = t(f"urlstate.expected.{field.kind}", low=f"{field.low:g}", high=f"{field.high:g}",
                 choices=", ".join(str(c) for c in field.choices))
    raise ValueError(t("urlstate.ignored", name=name, text=repr(text), expected=expected))


def encode_value(field, value):
    """The query text of a widget value, or None when it is unset or the default (left out of the URL)."""
    if value is None:
        return None
    if field.kind in ("ints", "strs"):
        value = list(value)
        if not value or (field.default is not None and value == list(field.default)):
            return None
        return ",".join(str(v) for v in value)
    if value == field.default:
        return None
    return _fmt(value) if field.kind in ("float", "number", "smooth") else str(value)


def _fmt(number):
    if isinstance(number, float) and number == int(number) and abs(number) < 1e15:
        return str(int(number))
    return f"{number:g}" if isinstance(number, float) else str(number)


def decode(params, fields=LOGS):
    """({state key: value} for each readable parameter, [problems]) of query parameters (name -> text)."""
    values, problems = {}, []
    for name, field in fields.items():
        if name in params and str(params[name]).strip() != "":
            try:
                values[field.key] = decode_value(name, field, params[name])
            except ValueError as exc:
                problems.append(str(exc))
    return values, problems


def encode(state, fields=LOGS, defaults=None):
    """The query parameters (name -> text) of the widget values in `state`, defaults left out
    (`defaults`: state key -> the page's own default where it depends on the data, e.g. the metrics)."""
    params = {}
    for name, field in fields.items():
        value = state.get(field.key)
        if defaults and field.key in defaults and value == defaults[field.key]:
            continue
        text = encode_value(field, value)
        if text:
            params[name] = text
    return params


def _plain(query_params):
    return {str(k): str(v) for k, v in dict(query_params).items()}


def apply(page, state, query_params, fields=LOGS):
    """At the start of a run: when the URL is not what the page last applied or wrote (a link was
    opened, the browser went back), set the widgets from it. Returns the problems found in it."""
    current = _plain(query_params)
    applied = state.setdefault(APPLIED_KEY, {})
    if applied.get(page) == current:
        return []
    values, problems = decode(current, fields)
    for name, field in fields.items():
        if field.key in values:
            state[field.key] = values[field.key]
        elif name not in current and page in applied:
            state.pop(field.key, None)  # the URL no longer sets it: back to the page's default
    applied[page] = current
    return problems


def publish(page, state, query_params, fields=LOGS, defaults=None):
    """At the end of a run: write the widgets' values into the URL (other parameters stay as they
    are; values equal to `defaults` are left out, see `encode`)."""
    current = _plain(query_params)
    wanted = {**{k: v for k, v in current.items() if k not in fields}, **encode(state, fields, defaults)}
    if wanted != current:
        query_params.clear()
        query_params.update(wanted)
    state.setdefault(APPLIED_KEY, {})[page] = wanted
    return wanted
