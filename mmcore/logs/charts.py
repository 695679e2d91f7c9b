"""Training-metric charts: one chart per metric across runs (as plain data for a live chart, or a Plotly
figure), its traces smoothed and thinned by `mmcore.logs.series`, one name per metric across training
types, the default choice and order of metrics, and CSV export.

Pure functions on the DataFrames `mmcore.logs.log_parser.parse_file` returns (x axis: `global_step`, or
`samples`, `tokens`, `elapsed_s` where a run's records give them).
"""
import io
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.colors
import plotly.graph_objects as go

from mmcore.base.i18n import t
from mmcore.logs.loglines import INDEX_COLUMNS
from mmcore.logs.series import MAX_POINTS, auto_smoothing, ema, settled_length, thin_index, view_index
from trainer.rules.specs import RL_TYPES

PALETTE = plotly.colors.qualitative.Plotly  # run i keeps colour i in every chart
MARKER_POINTS = 300  # a trace of more points is drawn without markers (about 2 px apart at chart widths)
BAND_ALPHA = 0.2  # a std band's fill: the run's colour, faint enough that its line reads through it
UNSMOOTHED_KINDS = ("lr", "time")  # schedules and estimates, not noisy signals: an EMA would only make them lag

# One name per measured quantity, whatever the training type printed (its log line's label) or
# recorded (its metrics stream's name): the same quantity lands in one chart.
ALIASES = {
    "loss": "loss", "Loss": "loss", "Actor Loss": "loss", "actor_loss": "loss",
    "lr": "lr", "LR": "lr", "Actor LR": "lr", "learning_rate": "lr",
    "Reward": "reward", "Reward Std": "reward_std", "reward/std": "reward_std",
    "KL": "kl", "KL_ref": "kl_ref", "Avg Response Len": "response_len", "length/mean": "response_len",
    "Critic Loss": "critic_loss", "Critic LR": "critic_lr", "Baseline": "baseline", "Rho": "rho",
    "epoch_Time": "eta_min",
}
# What each chart shows, for its title (names not listed are titled as printed).
TITLES = {
    "loss": "Loss (training loss; the actor's loss for PPO, GRPO, SPO)",
    "lr": "Learning rate (the actor's for PPO)",
    "reward": "Reward (mean over a step's responses)",
    "reward_std": "Reward std (spread over a step's responses)",
    "kl": "KL divergence to the reference model",
    "kl_ref": "KL to the reference model (PPO's penalty term)",
    "response_len": "Response length (mean tokens)",
    "critic_loss": "Critic loss (PPO's value model)",
    "critic_lr": "Critic learning rate",
    "baseline": "Baseline (SPO's running value estimate)",
    "rho": "Rho (SPO's baseline decay)",
    "ce": "Cross-entropy to the labels (distillation)",
    "distill": "Distillation loss (KL to the teacher)",
    "aux_loss": "MoE load-balancing loss",
}
# A band around a metric where the trainer logs its spread: metric -> its std column.
BANDS = {"reward": "reward_std"}
# x axes: column -> label; a run charts on an axis only when its table has that column.
X_AXES = {"global_step": "step", "samples": "samples seen", "tokens": "tokens seen", "elapsed_s": "wall time (s)"}
X_CHOICES = {"step": "global_step", "samples": "samples", "tokens": "tokens", "time": "elapsed_s"}

# Metric kinds, by words in the printed name; the order of kinds is the order of charts.
_KINDS = (
    ("reward", re.compile(r"reward", re.I)),
    ("loss", re.compile(r"loss", re.I)),
    ("kl", re.compile(r"(^|[\s_])kl($|[\s_])", re.I)),
    ("rl", re.compile(r"baseline|rho|adv|response.len", re.I)),
    ("lr", re.compile(r"(^|[\s_])lr$|learning.?rate", re.I)),
    ("time", re.compile(r"time|eta", re.I)),
)
_ORDER = {
    True: ("reward", "loss", "kl", "rl", "other", "lr", "time"),  # PPO / GRPO / SPO: reward first
    False: ("loss", "reward", "kl", "other", "rl", "lr", "time"),
}


def metric_kind(name):
    """The kind of a metric by its printed name: reward, loss, kl, rl, lr, time or other."""
    for kind, pattern in _KINDS:
        if pattern.search(name):
            return kind
    return "other"


def canonical(name):
    """The one name of a metric across training types ("Actor Loss" and "loss" are both "loss")."""
    return ALIASES.get(name, name)


def chart_title(name):
    """What a chart of metric `name` shows, in the viewer's language (`chart.<name>` in the language
    files, whose English is TITLES)."""
    return t(f"chart.{name}") if name in TITLES else name


def axis_title(x):
    """The title of the x axis `x` (a column of X_AXES), in the viewer's language."""
    return t(f"chart.x.{x}") if x in X_AXES else x


def unify(df):
    """`df` with its metric columns renamed to their `canonical` names (the first column wins where
    two would get the same name)."""
    renames, taken = {}, set(df.columns)
    for column in df.columns:
        new = canonical(column)
        if new != column and new not in taken:
            renames[column] = new
            taken.add(new)
    return df.rename(columns=renames) if renames else df


def metric_columns(df):
    """The metric columns of a parsed table (every column but the index and position columns), in
    log order."""
    return [c for c in df.columns if c not in INDEX_COLUMNS and c not in X_AXES and c not in ("run", "time")]


def chartable(names):
    """Metric names worth a chart: time estimates (`epoch_Time`: minutes left) are shown as the ETA,
    not charted."""
    return [n for n in names if metric_kind(n) != "time"]


def comparable(tables):
    """(metrics every run has, {metric: [runs that lack it]} for the others): what mixed runs (say a
    pretrain log beside a GRPO one) can be compared on."""
    have = {name: set(chartable(metric_columns(df))) for name, df in _runs(tables)}
    every = set.intersection(*have.values()) if have else set()
    lacking = {}
    for metric in sorted(set().union(*have.values()) - every) if have else []:
        lacking[metric] = [name for name, metrics_ in have.items() if metric not in metrics_]
    return sorted(every), lacking


def x_choices(tables):
    """The x axes ("step", "samples", "tokens", "time") that at least one run's table can draw on."""
    return [key for key, column in X_CHOICES.items()
            if any(column in df.columns and df[column].notna().any() for _, df in _runs(tables))]


def order_metrics(names, train_type=None):
    """Metric names in chart order: loss-like and reward-like first (reward first for PPO, GRPO and
    SPO, or when the type is unknown and a reward was logged), learning rates and times last."""
    names = list(dict.fromkeys(names))
    rl = train_type in RL_TYPES if train_type else any(metric_kind(n) == "reward" for n in names)
    rank = {kind: i for i, kind in enumerate(_ORDER[rl])}
    return sorted(names, key=lambda n: rank[metric_kind(n)])  # stable: log order within a kind


def default_metrics(names, train_type=None):
    """The metrics charted unless the user chooses: all of them in `order_metrics` order, except
    time estimates (`epoch_Time` is minutes left, not a training signal) when there is anything else."""
    return chartable(order_metrics(names, train_type))


def _runs(runs):
    return list(runs.items()) if isinstance(runs, dict) else list(runs)


def _plain(value):
    """A number as JSON takes it (numpy scalars are not)."""
    value = float(value)
    return int(value) if value.is_integer() and abs(value) < 2 ** 53 else value


def _integer_ticks(low, high):
    """Axis settings that keep tick labels on whole numbers (steps, samples, tokens)."""
    if high - low < 10:
        return dict(tickformat=",d", dtick=1)
    return dict(tickformat=",d")


ARRAY_FIELDS = ("x", "y", "customdata")  # the trace fields a Chart holds as names of its arrays


@dataclass
class Chart:
    """A chart as plain data: `layout` and `traces` are what Plotly takes (JSON-ready), except that a
    trace names its `x` and `y` by keys of `arrays` (numpy arrays; a run's traces share its x), and
    `stable[key]` says how many leading values of each array stay as they are while the runs grow
    (`thin_index`): what a live chart need not send again. The arrays in `drawn_only` are only drawn
    (smoothed lines, band edges), never read as numbers: float32 is precise enough for them."""
    layout: dict
    traces: list
    arrays: dict
    stable: dict
    drawn_only: frozenset = frozenset()

    def figure(self):
        """The chart as a plotly Figure."""
        fig = go.Figure(layout=self.layout)
        for trace in self.traces:
            fig.add_trace(go.Scatter({k: self.arrays[v] if k in ARRAY_FIELDS else v for k, v in trace.items()}))
        return fig

    def points(self):
        """The number of points of each trace, in order."""
        return [len(self.arrays[trace["y"]]) for trace in self.traces]


@dataclass
class RunTraces:
    """One run's part of a metric chart (`run_traces`): its traces and arrays as `Chart` holds them
    (arrays named `<i>.<column>`, `i` the run's place in the chart) and the x range it covers."""
    traces: list
    arrays: dict
    stable: dict
    extent: tuple


def band_fill(color, alpha=BAND_ALPHA):
    """`color` ("#rrggbb") as the translucent "rgba(r, g, b, a)" a std band is filled with."""
    r, g, b = plotly.colors.hex_to_rgb(color)
    return f"rgba({r}, {g}, {b}, {alpha})"


def run_traces(i, name, df, metric, smoothing=0.6, log_y=False, max_points=MAX_POINTS, x="global_step",
               x_range=None, view=None):
    """Run `i`'s part (`RunTraces`) of `metric_chart`, None when it has nothing to draw there. It
    depends on this run alone, so a chart of many runs can keep the parts of runs that did not change.
    "auto" smoothing chooses its weight from the run's first `settled_length` points: a growing run
    keeps its weight, and the smoothed line drawn so far, until it has grown by about 1/32."""
    if metric not in df.columns or x not in df.columns:
        return None
    xv = df[x].to_numpy(dtype=np.float64)
    y = df[metric].to_numpy(dtype=np.float64)
    keep = np.isfinite(y) & np.isfinite(xv)
    if log_y:
        keep &= y > 0
    if x_range is not None:
        low, high = x_range
        keep &= (xv >= (-np.inf if low is None else low)) & (xv <= (np.inf if high is None else high))
    if not keep.any():
        return None
    xs, ys = xv[keep], y[keep]
    weight = smoothing
    if metric_kind(metric) in UNSMOOTHED_KINDS:
        weight = 0.0
    elif weight == "auto":
        weight = auto_smoothing(ys[:settled_length(len(ys))])
    color = PALETTE[i % len(PALETTE)]
    label = str(name)
    columns = {"x": xs, "y": ys}
    band = BANDS.get(metric)
    if band in df.columns:
        spread = df[band].to_numpy(dtype=np.float64)[keep]
        if np.isfinite(spread).any():
            columns["low"], columns["high"] = ys - spread, ys + spread
    if weight > 0:
        columns["smooth"] = ema(ys, weight)
    index, steady = view_index(xs, ys, view, max_points)
    arrays = {f"{i}.{column}": values[index] for column, values in columns.items()}
    stable = dict.fromkeys(arrays, steady)
    mode = "lines+markers" if len(index) == 1 else "lines"  # a single point would draw nothing as a line
    traces = []
    if "low" in columns:
        # Drawn before the run's lines so they lie over it, in a translucent fill so they read through it.
        edge = dict(x=f"{i}.x", mode="lines", line=dict(width=0, color=color), hoverinfo="skip",
                    showlegend=False, legendgroup=label)
        traces += [dict(edge, y=f"{i}.low", name=f"{label} (- std)"),
                   dict(edge, y=f"{i}.high", name=f"{label} ± std", fill="tonexty", fillcolor=band_fill(color),
                        showlegend=True)]
    if weight <= 0:
        traces.append(dict(x=f"{i}.x", y=f"{i}.y", mode=mode, name=label, legendgroup=label,
                           line=dict(color=color, width=2), marker=dict(size=8)))
    else:
        traces.append(dict(x=f"{i}.x", y=f"{i}.y", mode=mode, name=f"{label} (raw)", legendgroup=label,
                           showlegend=False, opacity=0.25, line=dict(color=color, width=1),
                           hovertemplate="%{y:.6g}<extra>" + label + " raw</extra>"))
        traces.append(dict(x=f"{i}.x", y=f"{i}.smooth", mode=mode, name=label, legendgroup=label,
                           line=dict(color=color, width=2.5), marker=dict(size=8),
                           hovertemplate="%{y:.6g}<extra>" + label + "</extra>"))
    return RunTraces(traces, arrays, stable, (float(xs.min()), float(xs.max())))


def metric_chart(metric, runs, smoothing=0.6, log_y=False, max_points=MAX_POINTS, height=340, x="global_step",
                 y_range=None, x_range=None, marks=(), view=None, parts=run_traces):
    """A `Chart` of one metric for one or more runs.

    `runs` is a dict or a list of (name, DataFrame). Each run gets one colour: its raw values drawn
    faintly and, with `smoothing` > 0 (or "auto": chosen per run by `auto_smoothing`), their EMA (see
    `ema`) drawn bold; a run with a single point is drawn as a marker. Where the table holds the
    metric's spread (`BANDS`), a band of mean ± std is shaded (a lower edge, then an upper edge filled
    down to it in the run's colour at `BAND_ALPHA`, under the lines, named "<run> ± std" in the legend).
    Learning rates and time estimates are never smoothed. Runs without this metric or without the `x`
    column are left out. `log_y` uses a logarithmic y axis (values <= 0 are not drawn
    there); `y_range` (low, high) fixes the y axis (either may be None); `x_range` (low, high) keeps
    only points in it; `marks` are (x, text) lines drawn across the plot (resume points). Each trace
    holds at most `max_points` points (`view_index`): of the whole run, or, for a chart zoomed to the
    x range `view`, mostly of that range (every point of a window of up to 80% of `max_points`).

    Each run's part comes from `parts`, called as `run_traces` is (a cache of parts may stand in).
    """
    traces, arrays, stable, extent = [], {}, {}, []
    for i, (name, df) in enumerate(_runs(runs)):
        part = parts(i, name, df, metric, smoothing=smoothing, log_y=log_y, max_points=max_points, x=x,
                     x_range=x_range, view=view)
        if part is None:
            continue
        traces += part.traces
        arrays.update(part.arrays)
        stable.update(part.stable)
        extent += part.extent
    yaxis = dict(type="log" if log_y else "linear")
    if y_range is not None and any(v is not None for v in y_range):
        low, high = y_range
        if log_y:  # plotly takes a log axis's range in powers of ten
            low = np.log10(low) if low is not None and low > 0 else None
            high = np.log10(high) if high is not None and high > 0 else None
        yaxis["range"] = [None if low is None else _plain(low), None if high is None else _plain(high)]
        yaxis["autorange"] = False if low is not None and high is not None else (
            "min" if high is not None else "max")
    xaxis = dict(title=dict(text=axis_title(x)))
    if x != "elapsed_s" and extent:
        xaxis.update(_integer_ticks(min(extent), max(extent)))
    layout = dict(
        title=dict(text=chart_title(metric), x=0, xanchor="left"), height=height, hovermode="x unified",
        margin=dict(l=10, r=10, t=40, b=10),
        # Under the plot: at the top right it would sit beneath Plotly's toolbar.
        legend=dict(orientation="h", yanchor="top", y=-0.22, xanchor="left", x=0),
        xaxis=xaxis, yaxis=yaxis)
    if marks:
        layout["shapes"] = [dict(type="line", xref="x", yref="paper", x0=_plain(at), x1=_plain(at), y0=0, y1=1,
                                 line=dict(dash="dot", width=1, color="gray")) for at, _ in marks]
        layout["annotations"] = [dict(x=_plain(at), xref="x", y=1, yref="paper", text=str(text), showarrow=False,
                                      xanchor="right", yanchor="top", font=dict(size=10)) for at, text in marks]
    drawn_only = frozenset(key for key in arrays if key.endswith((".smooth", ".low", ".high")))
    return Chart(layout, traces, arrays, stable, drawn_only)


def _json_ready(value):
    """`value` with numpy scalars and arrays as plain numbers and lists (what JSON takes)."""
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_json_ready(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def chart_of(fig, max_points=MAX_POINTS, marker_points=MARKER_POINTS):
    """A plotly Figure of line traces (such as `mmcore.runs.rlview.panel_figure`'s) as a `Chart`, each
    trace held to `max_points` points (`thin_index` on its y; its x and customdata follow). A trace of
    more than `marker_points` points is drawn as a line alone: markers that close together only thicken
    the line, and each one costs the browser an element to draw (a click still picks the nearest point)."""
    layout = {k: v for k, v in fig.layout.to_plotly_json().items() if k != "template"}
    traces, arrays, stable = [], {}, {}
    for i, trace in enumerate(fig.data):
        spec = trace.to_plotly_json()
        index, steady = thin_index(np.asarray(spec.get("y", ()), dtype=np.float64), max_points)
        style = {}
        for field, value in spec.items():
            if field in ARRAY_FIELDS:
                arrays[f"{i}.{field}"] = np.asarray(value, dtype=np.float64)[index]
                stable[f"{i}.{field}"] = steady
                style[field] = f"{i}.{field}"
            elif field != "type":
                style[field] = value
        if len(index) > marker_points and "markers" in str(style.get("mode", "")):
            style["mode"] = "lines"
        traces.append(style)
    return Chart(_json_ready(layout), _json_ready(traces), arrays, stable)


def joined(parts):
    """One `Chart` of the traces of `parts` (`chart_of` charts of one layout, say one per run), in
    order: the first one's layout, and the arrays named as one `chart_of` of all their traces would."""
    layout, traces, arrays, stable = parts[0].layout if parts else {}, [], {}, {}
    for part in parts:
        offset = len(traces)
        names = {key: f"{offset + int(key.split('.', 1)[0])}.{key.split('.', 1)[1]}" for key in part.arrays}
        for trace in part.traces:
            traces.append({k: names[v] if k in ARRAY_FIELDS and isinstance(v, str) and v in names else v
                           for k, v in trace.items()})
        for key, new in names.items():
            arrays[new], stable[new] = part.arrays[key], part.stable[key]
    return Chart(layout, traces, arrays, stable)


def metric_figure(metric, runs, **options):
    """`metric_chart(metric, runs, **options)` as a plotly Figure."""
    return metric_chart(metric, runs, **options).figure()


def combined_table(runs):
    """One table of several runs' records, with a leading `run` column."""
    frames = [df.assign(run=str(name)) for name, df in _runs(runs)]
    if not frames:
        return pd.DataFrame(columns=["run", *INDEX_COLUMNS])
    table = pd.concat(frames, ignore_index=True, sort=False)
    return table[["run", *[c for c in table.columns if c != "run"]]]


def csv_file_name(runs, max_len=120):
    """The CSV download's file name, after the runs it holds: "minimind-12-sft-tiny_13-grpo.csv"
    (characters other than letters, digits, '.', '-' and '_' become '-'; long lists are cut)."""
    names = [str(name) for name, _ in _runs(runs)]
    parts = [re.sub(r"-{2,}", "-", re.sub(r"[^\w.-]+", "-", n, flags=re.ASCII)).strip("-.") for n in names]
    stem = "_".join(p for p in parts if p) or "metrics"
    if len(stem) > max_len:
        stem = stem[:max_len].rstrip("-_.") + "-and-more"
    return f"minimind-{stem}.csv"


def to_csv(runs):
    """CSV bytes (UTF-8) of one DataFrame, or of several runs (dict or list of (name, DataFrame))
    with a `run` column; numbers as printed by repr (exact), empty cells where a metric was not printed."""
    table = runs if isinstance(runs, pd.DataFrame) else combined_table(runs)
    buffer = io.StringIO()
    table.to_csv(buffer, index=False)
    return buffer.getvalue().encode("utf-8")
