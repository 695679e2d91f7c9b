"""What the Logs page shows of a run's held-out signals: the training reward beside every held-out
signal (held-out evaluation, rescores), one long table on one axis of steps."""
import pandas as pd

from mmcore.runs.health import HELD_OUT_SIGNALS, RESCORE_PREFIX

TRAINING = "reward"


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
