"""Training-metric charts: TensorBoard-style smoothing, one Plotly figure per metric across runs,
the default choice and order of metrics, and CSV export of parsed logs.

Pure functions on the DataFrames `mmcore.logparse.parse_file` returns (x axis: `global_step`).
"""
import io
import re

import numpy as np
import pandas as pd
import plotly.colors
import plotly.graph_objects as go

from mmcore.loglines import INDEX_COLUMNS
from trainer.specs import RL_TYPES

PALETTE = plotly.colors.qualitative.Plotly  # run i keeps colour i in every chart
MAX_POINTS = 4000  # per trace: a browser draws a million-point line slowly and no better
UNSMOOTHED_KINDS = ("lr", "time")  # schedules and estimates, not noisy signals: an EMA would only make them lag

# Metric kinds, by words in the printed name; the order of kinds is the order of charts.
_KINDS = (
    ("reward", re.compile(r"reward", re.I)),
    ("loss", re.compile(r"loss", re.I)),
    ("kl", re.compile(r"(^|[\s_])kl($|[\s_])", re.I)),
    ("rl", re.compile(r"baseline|rho|adv|response len", re.I)),
    ("lr", re.compile(r"(^|[\s_])lr$|learning.?rate", re.I)),
    ("time", re.compile(r"time|eta", re.I)),
)
_ORDER = {
    True: ("reward", "loss", "kl", "rl", "other", "lr", "time"),  # PPO / GRPO / SPO: reward first
    False: ("loss", "reward", "kl", "other", "rl", "lr", "time"),
}


def ema(values, weight):
    """TensorBoard's debiased exponential moving average of `values` with smoothing `weight` (0..<1).

    smoothed_i = last_i / (1 - weight ** n_i) with last_i = weight * last_(i-1) + (1 - weight) * v_i,
    n_i counting finite values so far. Non-finite values (nan, inf) pass through unchanged and do
    not count; a constant series is returned as is. weight 0 returns the values.
    """
    if not 0 <= weight < 1:
        raise ValueError(f"smoothing weight must be in [0, 1), got {weight}")
    y = np.asarray(values, dtype=np.float64)
    out = y.copy()
    finite = np.isfinite(y)
    if weight == 0 or not finite.any() or (finite.all() and (y == y[0]).all()):
        return out
    # pandas' adjusted EWM is the same sum, sum_k w^k v_(i-k) / sum_k w^k, computed in C.
    out[finite] = pd.Series(y[finite]).ewm(alpha=1 - weight, adjust=True).mean().to_numpy()
    return out


def metric_kind(name):
    """The kind of a metric by its printed name: reward, loss, kl, rl, lr, time or other."""
    for kind, pattern in _KINDS:
        if pattern.search(name):
            return kind
    return "other"


def metric_columns(df):
    """The metric columns of a parsed table (every column but the index columns), in log order."""
    return [c for c in df.columns if c not in INDEX_COLUMNS and c != "run"]


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
    ordered = order_metrics(names, train_type)
    chosen = [n for n in ordered if metric_kind(n) != "time"]
    return chosen or ordered


def _thin(x, *ys, max_points=MAX_POINTS):
    """Every k-th point (the last one kept) so that at most about `max_points` remain."""
    n = len(x)
    if n <= max_points:
        return (x, *ys)
    index = np.unique(np.append(np.arange(0, n, int(np.ceil(n / max_points))), n - 1))
    return (x[index], *(y[index] for y in ys))


def _runs(runs):
    return list(runs.items()) if isinstance(runs, dict) else list(runs)


def metric_figure(metric, runs, smoothing=0.6, log_y=False, max_points=MAX_POINTS, height=340):
    """A Plotly figure of one metric against global step for one or more runs.

    `runs` is a dict or a list of (name, DataFrame). Each run gets one colour: its raw values drawn
    faintly and, with `smoothing` > 0, their EMA (see `ema`) drawn bold; the legend, under the plot,
    names the runs. Learning rates and time estimates are never smoothed. Runs without this metric are
    left out. `log_y` uses a logarithmic y axis (values <= 0 are not
    drawn there).
    """
    if metric_kind(metric) in UNSMOOTHED_KINDS:
        smoothing = 0
    fig = go.Figure()
    for i, (name, df) in enumerate(_runs(runs)):
        if metric not in df.columns:
            continue
        x = df["global_step"].to_numpy(dtype=np.float64)
        y = df[metric].to_numpy(dtype=np.float64)
        keep = np.isfinite(y)
        if log_y:
            keep &= y > 0
        if not keep.any():
            continue
        color = PALETTE[i % len(PALETTE)]
        smooth = ema(y[keep], smoothing) if smoothing > 0 else None
        xs, ys, *rest = _thin(x[keep], y[keep], *([smooth] if smooth is not None else []), max_points=max_points)
        label = str(name)
        if smooth is None:
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=label, legendgroup=label,
                                     line=dict(color=color, width=2)))
            continue
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=f"{label} (raw)", legendgroup=label,
                                 showlegend=False, opacity=0.25, line=dict(color=color, width=1),
                                 hovertemplate="%{y:.6g}<extra>" + label + " raw</extra>"))
        fig.add_trace(go.Scatter(x=xs, y=rest[0], mode="lines", name=label, legendgroup=label,
                                 line=dict(color=color, width=2.5),
                                 hovertemplate="%{y:.6g}<extra>" + label + "</extra>"))
    fig.update_layout(
        title=dict(text=metric, x=0, xanchor="left"), height=height, hovermode="x unified",
        margin=dict(l=10, r=10, t=40, b=10),
        # Under the plot: at the top right it would sit beneath Plotly's toolbar.
        legend=dict(orientation="h", yanchor="top", y=-0.22, xanchor="left", x=0),
        xaxis_title="global step", yaxis_type="log" if log_y else "linear")
    return fig


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
        stem = stem[:max_len].rstrip("-_.") + f"-and-more"
    return f"minimind-{stem}.csv"


def to_csv(runs):
    """CSV bytes (UTF-8) of one DataFrame, or of several runs (dict or list of (name, DataFrame))
    with a `run` column; numbers as printed by repr (exact), empty cells where a metric was not printed."""
    table = runs if isinstance(runs, pd.DataFrame) else combined_table(runs)
    buffer = io.StringIO()
    table.to_csv(buffer, index=False)
    return buffer.getvalue().encode("utf-8")
