"""Runs grouped by a parameter: runs that differ only in that parameter (a seed, by default) drawn as one line,
the mean of their curves with a band from the lowest to the highest value at each step.

`groups(jobs, by)` gathers jobs whose parameters agree on everything but `by` (and what names a run's own files:
its weight name, its records folder); `band(frames, metric)` is one group's mean/min/max per step;
`figure(...)` draws every group of a metric.
"""
import pandas as pd
import plotly.graph_objects as go

from mmcore.experiments import runtable

#: What names a run's own files: never a reason to keep two runs apart.
OWN_NAMES = ("save_weight", "lora_name", "run_dir")
DEFAULT_BY = "seed"
_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def groups(jobs, by=DEFAULT_BY):
    """[(label, [job, ...])] in the order of each group's first job: jobs of one type whose parameters agree on
    everything but `by`. A job alone in its group is a group of one."""
    found = {}
    for job in jobs:
        params = runtable.params_of(job)
        key = (job.train_type, tuple(sorted((k, v) for k, v in params.items() if k != by and k not in OWN_NAMES)))
        found.setdefault(key, []).append(job)
    out = []
    for members in found.values():
        values = ", ".join(dict.fromkeys(runtable.params_of(j).get(by, "") or "-" for j in members))
        out.append((f"{members[0].name} ×{len(members)} ({by}: {values})", members))
    return out


def band(frames, metric, x="global_step"):
    """One group's curve of `metric`: a table with `x`, `mean`, `low`, `high` and `n` (runs with a value there),
    from the members' metrics tables; empty when none has the metric."""
    series = [df.set_index(x)[metric].dropna() for df in frames if metric in df.columns and x in df.columns]
    series = [s[~s.index.duplicated(keep="last")] for s in series if len(s)]
    if not series:
        return pd.DataFrame(columns=[x, "mean", "low", "high", "n"])
    table = pd.concat(series, axis=1).sort_index()
    return pd.DataFrame({x: table.index, "mean": table.mean(axis=1).to_numpy(), "low": table.min(axis=1).to_numpy(),
                         "high": table.max(axis=1).to_numpy(), "n": table.count(axis=1).to_numpy()})


def figure(curves, metric, x="global_step"):
    """A plotly Figure of `curves` ([(label, band table)]): per group its band (min to max, shaded) and its
    mean (a line)."""
    fig = go.Figure()
    for i, (label, table) in enumerate(curves):
        if table.empty:
            continue
        colour = _COLOURS[i % len(_COLOURS)]
        xs = table[x].tolist()
        fig.add_trace(go.Scatter(x=xs, y=table["high"].tolist(), mode="lines", line={"width": 0}, showlegend=False,
                                 hoverinfo="skip", legendgroup=label, name=f"{label} max"))
        fig.add_trace(go.Scatter(x=xs, y=table["low"].tolist(), mode="lines", line={"width": 0}, fill="tonexty",
                                 fillcolor=_rgba(colour, 0.2),
                                 showlegend=False, hoverinfo="skip", legendgroup=label, name=f"{label} min"))
        fig.add_trace(go.Scatter(x=xs, y=table["mean"].tolist(), mode="lines", line={"color": colour, "width": 2},
                                 name=label, legendgroup=label))
    fig.update_layout(title={"text": metric}, height=340, margin={"l": 50, "r": 20, "t": 40, "b": 40},
                      legend={"orientation": "h"})
    return fig


def _rgba(colour, alpha):
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r}, {g}, {b}, {alpha})"
