"""The Logs page's RL views, as plain functions: panels of RL metrics from the metrics stream, and
the Rollouts view's groups, prompt history and run comparison from the rollout store.

Pages draw what these return; every text from a run (prompt, response, reference) stays data, to be
shown as plain text, never as markdown or HTML.
"""
import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.colors
import plotly.graph_objects as go

from mmcore.base.i18n import t
from mmcore.logs import series
from mmcore.runs import metric_stream, rollout_store

PALETTE = plotly.colors.qualitative.Plotly


@dataclass(frozen=True)
class Panel:
    """One RL chart: a title and the metrics it overlays (regular expressions over stable names)."""
    key: str
    title: str
    patterns: tuple

    def columns(self, names):
        """The metric names this panel draws, in the order of its patterns."""
        out = []
        for pattern in self.patterns:
            out += [n for n in names if re.fullmatch(pattern, n) and n not in out]
        return out


PANELS = (
    Panel("reward", "Reward and its parts (mean)", (r"reward", r"reward/.+/mean")),
    Panel("accuracy", "Answer accuracy (vs reference)", (r"accuracy",)),
    Panel("length", "Response length (tokens)", (r"length/mean", r"length/min", r"length/max",
                                                 r"length/terminated_mean")),
    Panel("truncated", "Truncated (hit max_gen_len)", (r"truncated_frac",)),
    Panel("zero_std", "Groups with all-equal rewards", (r"frac_reward_zero_std",)),
    Panel("kl", "KL", (r"kl", r"kl_ref")),
    Panel("entropy", "Entropy (sampled tokens)", (r"entropy",)),
    Panel("advantage", "Advantage", (r"advantage/mean", r"advantage/std")),
    Panel("clip", "Clipping", (r"clip_frac", r"rm/clip_frac")),
    Panel("timing", "Seconds per step", (r"time/.+_s",)),
    Panel("throughput", "Tokens per second", (r"tokens_per_s",)),
)


def panel_title(panel):
    """A panel's title in the viewer's language (`rl.panel.<key>`; its English is the panel's title)."""
    return t(f"rl.panel.{panel.key}")


def x_label(x):
    """An x axis of the RL charts (a column of metrics.X_AXES) in the viewer's language."""
    return t(f"rl.x.{x}") if x in metric_stream.X_AXES else x


def panels_for(df):
    """The panels a metrics frame has data for, with their columns: [(Panel, [column, ...])]."""
    names = [c for c in metric_stream.metric_columns(df) if df[c].notna().any()]
    return [(p, cols) for p in PANELS if (cols := p.columns(names))]


def panel_figure(panel, runs, x="global_step", smoothing=0.0, height=300):
    """A Plotly figure overlaying `panel`'s metrics for each (run name, metrics frame) in `runs`, against
    `x` (one of `metrics.X_AXES`). Each trace carries its rows' global steps as customdata, so a click
    on a point can open that step in the Rollouts view."""
    fig = go.Figure()
    names = panel.columns(list(dict.fromkeys(c for _, df in runs for c in df.columns)))  # pattern, then log order
    many = len(runs) > 1
    for r, (run_name, df) in enumerate(runs):
        if x not in df.columns:
            continue
        for m, metric in enumerate(names):
            if metric not in df.columns:
                continue
            rows = df[list(dict.fromkeys([x, "global_step", metric]))].dropna(subset=[metric])
            if not len(rows):
                continue
            y = rows[metric].to_numpy(dtype=float)
            if smoothing > 0 and not metric.startswith("time/"):
                y = series.ema(y, smoothing)
            label = f"{run_name} · {metric}" if many else metric
            fig.add_trace(go.Scatter(
                x=rows[x].to_numpy(), y=y, mode="lines+markers", name=label, marker=dict(size=4),
                line=dict(color=PALETTE[(r * len(names) + m) % len(PALETTE)], width=2,
                          dash=("solid", "dot", "dash", "dashdot")[r % 4]),
                customdata=rows["global_step"].to_numpy(),
                hovertemplate="%{y:.4g} (step %{customdata})<extra>" + label + "</extra>"))
    fig.update_layout(title=dict(text=panel_title(panel), x=0, xanchor="left"), height=height, hovermode="closest",
                      margin=dict(l=10, r=10, t=40, b=10), xaxis_title=x_label(x),
                      legend=dict(orientation="h", yanchor="top", y=-0.25, xanchor="left", x=0))
    return fig


def clicked_step(selection):
    """The global step of the point clicked in a panel (Streamlit's plotly selection state), or None."""
    try:
        points = selection["selection"]["points"]
    except (KeyError, TypeError):
        return None
    for point in points or []:
        step = point.get("customdata")
        if isinstance(step, (list, tuple)):
            step = step[0] if step else None
        if step is not None:
            return int(step)
    return None


def missing_records(run_dir, train_type):
    """What a run lacks for the RL views (a list of sentences; empty when it has everything)."""
    lacks = []
    if not metric_stream.has_metrics(run_dir):
        lacks.append(t("rl.no_metrics_stream"))
    if train_type in ("ppo", "grpo", "spo") and not metric_stream.has_rollouts(run_dir):
        lacks.append(t("rl.no_rollout_store"))
    return lacks


# -- the Rollouts view ---------------------------------------------------------------------------------


def advantage_colour(advantage, scale=1.0):
    """A Streamlit colour name for a response's advantage: green above zero, red below, grey near zero."""
    if advantage is None or (isinstance(advantage, float) and math.isnan(advantage)):
        return "gray"
    if abs(advantage) < 0.05 * max(scale, 1e-9):
        return "gray"
    return "green" if advantage > 0 else "red"


def value_columns(df):
    """The per-response value columns beyond reward and advantage: parts first, then extras."""
    fixed = set(rollout_store._BASE)
    return [c for c in df.columns if c not in fixed]


@dataclass
class Group:
    """One prompt's responses at one step."""
    step: int
    group: int
    prompt_id: int
    prompt: str
    reference: str
    responses: pd.DataFrame  # one row per response (sample order), the rollouts.read columns

    @property
    def rewards_equal(self):
        return len(self.responses) > 1 and self.responses["reward"].nunique() == 1


def groups_of(df):
    """Split rollout rows into `Group`s (by step, then group)."""
    out = []
    for (step, group), rows in df.groupby(["step", "group"], sort=True):
        first = rows.iloc[0]
        out.append(Group(int(step), int(group), int(first["prompt_id"]), first["prompt"], first["reference"],
                         rows.sort_values("sample").reset_index(drop=True)))
    return out


def filtered_groups(run_dir, step, *, reward_range=None, truncated=None, format_failures=False, text=""):
    """The groups of `step` with only the responses that pass the filters (groups left empty dropped).
    `truncated`: "only" / "none" / None."""
    lo, hi = reward_range if reward_range else (None, None)
    df = rollout_store.query(run_dir, step, reward_min=lo, reward_max=hi,
                        truncated={"only": True, "none": False}.get(truncated), format_failures=format_failures,
                        text=text.strip() or None)
    return groups_of(df)


def response_card(row, parts):
    """What a response's card shows above its text: reward, advantage and each part, as (label, value) pairs."""
    items = [("reward", row["reward"]), ("advantage", row["advantage"])]
    items += [(p, row.get(f"reward/{p}")) for p in parts]
    for extra in ("accuracy", "kl", "rm/raw", "value", "baseline", "rho"):
        if extra in row and row[extra] is not None and not (isinstance(row[extra], float) and math.isnan(row[extra])):
            items.append((extra, row[extra]))
    items += [("length", row["length"]), ("truncated", "yes" if row["truncated"] else "no")]
    return items


def format_value(value):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return f"{value:+.3f}" if value else "0"
    return str(value)


def prompt_history(run_dir, prompt_id):
    """One row per step at which the prompt was sampled: its responses' mean/max reward, accuracy,
    mean length and truncated share: does the model answer it better over time?"""
    return history_table(rollout_store.query(run_dir, prompt_id=prompt_id))


def history_table(df):
    """`prompt_history` of one prompt's rows (a `rollouts.query(..., prompt_id=...)` frame)."""
    if not len(df):
        return pd.DataFrame(columns=["step", "responses", "reward_mean", "reward_max", "accuracy", "length_mean",
                                     "truncated"])
    agg = {"responses": ("reward", "size"), "reward_mean": ("reward", "mean"), "reward_max": ("reward", "max"),
           "length_mean": ("length", "mean"), "truncated": ("truncated", "mean")}
    if "accuracy" in df.columns:
        agg["accuracy"] = ("accuracy", "mean")
    return df.groupby("step").agg(**agg).reset_index()


def prompt_choices(groups, limit=80):
    """(prompt_id, short label) of the groups' prompts, for a selectbox."""
    seen, out = set(), []
    for g in groups:
        if g.prompt_id in seen:
            continue
        seen.add(g.prompt_id)
        out.append((g.prompt_id, short_prompt(g.prompt, limit)))
    return out


def short_prompt(prompt, limit=80):
    """A prompt's last user turn (ChatML) on one line, cut to `limit` characters."""
    turns = re.findall(r"<\|im_start\|>user\s+(.*?)<\|im_end\|>", prompt, re.S)
    text = " ".join((turns[-1] if turns else prompt).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def same_prompt_in(run_dir, prompt, reference, step=None):
    """Another run's responses to the same prompt: at `step` when it sampled the prompt then, else at the
    last step it did. Returns (step, DataFrame) or (None, empty)."""
    pid = rollout_store.prompt_id_of(run_dir, prompt, reference)
    if pid is None:
        return None, pd.DataFrame()
    steps = rollout_store.prompt_steps(run_dir, pid)
    chosen = step if step in steps else steps[-1]
    df = rollout_store.query(run_dir, chosen, prompt_id=pid)
    return chosen, df
