"""What the Logs page shows of a run's held-out signals: the training reward beside every held-out
signal (held-out evaluation, rescores), one long table on one axis of steps, drawn as one figure
(`figure`); and the per-prompt table as shown (`prompt_rows`: the prompt beside its id, flags in the
viewer's language)."""
import pandas as pd
import plotly.colors
import plotly.graph_objects as go

from mmcore.base.i18n import t
from mmcore.runs.health import HELD_OUT_SIGNALS, RESCORE_PREFIX

TRAINING = "reward"
PALETTE = plotly.colors.qualitative.Plotly
#: The per-prompt table's columns in the order shown: what a prompt is and how it fared first.
PROMPT_COLUMNS = ("prompt_id", "prompt", "flag", "mean_reward", "pass_rate", "reference", "times_seen", "responses",
                  "zero_std_share", "no_advantage", "first_step", "last_step")
#: How much of a prompt the table shows: its end, where the question is (the chat template comes first).
PROMPT_SHOWN_CHARS = 80


def signal_columns(df):
    """The training reward and the held-out signals `df` (a metrics frame) has, in that order."""
    held = [c for c in HELD_OUT_SIGNALS if c in df.columns]
    held += [c for c in df.columns if c.startswith(RESCORE_PREFIX) and c.endswith("/mean")]
    return ([TRAINING] if TRAINING in df.columns else []) + held


def has_held_out(df):
    return len(signal_columns(df)) > (1 if TRAINING in df.columns else 0)


def signals(df):
    """Long table: `global_step`, `signal` (column name), `value`, one row per recorded value (a sparse
    held-out series keeps only its points, so each draws as a line of its own)."""
    columns = signal_columns(df)
    if not columns:
        return pd.DataFrame(columns=["global_step", "signal", "value"])
    long = df[["global_step", *columns]].melt(id_vars="global_step", var_name="signal", value_name="value")
    return long.dropna(subset=["value"]).reset_index(drop=True)


def figure(df, height=360):
    """One Plotly figure of `signals(df)` against the global step: a trace per signal, named by its column,
    the training reward a solid line, each held-out signal dashed with a marker at every evaluation (an
    evaluation or two would otherwise hardly show)."""
    fig = go.Figure()
    long = signals(df)
    for i, name in enumerate(dict.fromkeys(long["signal"])):
        rows = long[long["signal"] == name]
        training = name == TRAINING
        fig.add_trace(go.Scatter(
            x=rows["global_step"].to_numpy(), y=rows["value"].to_numpy(dtype=float), name=name,
            mode="lines" if training and len(rows) > 1 else "lines+markers", marker=dict(size=7),
            line=dict(color=PALETTE[i % len(PALETTE)], width=2.5 if training else 2,
                      dash="solid" if training else "dash"),
            hovertemplate="%{y:.4g} (" + t("logs.step") + " %{x})<extra>" + name + "</extra>"))
    fig.update_layout(height=height, hovermode="closest", margin=dict(l=10, r=10, t=10, b=10),
                      xaxis_title=t("logs.step"), yaxis_title=t("logs.heldout.value"),
                      legend=dict(orientation="h", yanchor="top", y=-0.2, xanchor="left", x=0))
    return fig


def prompt_rows(table):
    """The per-prompt table (`prompt_record.prompts`) as the page shows it, rows in the same order:
    `PROMPT_COLUMNS`, each prompt's last `PROMPT_SHOWN_CHARS` characters on one line, each flag in the
    viewer's language (`logs.prompts.flag.<flag>`)."""
    shown = table.assign(prompt=[" ".join(p.split())[-PROMPT_SHOWN_CHARS:] for p in table["prompt"]],
                         flag=[t(f"logs.prompts.flag.{f}") for f in table["flag"]])
    return shown[[c for c in PROMPT_COLUMNS if c in shown.columns]]
