"""Health checks on a run's metrics stream: the signs of an RL run going wrong, with what to try.

`evaluate(df, settings)` looks at a metrics frame (`mmcore.runs.metric_stream.read`, or the records parsed from
a log) and returns a `Finding` per rule that holds now: what, since which step, what to try. A rule
fires only when its condition has held for the last `window` logged steps, so one noisy step raises
nothing; a non-finite loss fires at once. The frame may be re-evaluated as records arrive: `HealthWatch`
does so for a running job's supervisor, reading only the appended records.

Rules: no learning signal (zero-std groups), length collapse, mostly truncated responses, KL past a
bound, reward-model scores pinned at the clip bound, NaN/inf loss, and reward hacking: the training
reward rising while every held-out signal (held-out evaluation's reward and accuracy, rescores by a
second reward) stays flat or falls. Thresholds are `HealthSettings`,
kept per dashboard home in `health.json`.
"""
import json
import math
import os
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np

from mmcore.base import paths
from mmcore.base import regular_file
from mmcore.base.i18n import MessageError, message, t

SETTINGS_FILE = "health.json"


@dataclass(frozen=True)
class HealthSettings:
    window: int = 10                   # logged steps a condition must hold before a rule fires
    zero_std_max: float = 0.9          # no signal: fraction of groups whose rewards are all equal, at least
    length_collapse: float = 0.25      # collapse: mean length below this share of the run's early mean length
    truncated_max: float = 0.8         # mostly truncated: share of responses that hit max_gen_len, at least
    kl_max: float = 1.0                # KL past this bound (per-token KL to the reference)
    rm_pinned_max: float = 0.8         # share of reward-model scores at the clip bound, at least
    hack_rise: float = 0.1             # reward hacking: training reward rise, at least, with no held-out gain


    def problems(self):
        """What is wrong with these values, as messages worded when shown (empty when they are usable)."""
        out = []

        def bad(rule, name):
            out.append(message(f"health.error.{rule}", name=name, label=message(f"health.label.{name}")))
        if not (isinstance(self.window, int) and self.window >= 1):
            bad("window", "window")
        for name in ("zero_std_max", "length_collapse", "truncated_max", "rm_pinned_max"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 < value <= 1):
                bad("share", name)
        for name in ("kl_max", "hack_rise"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
                bad("positive", name)
        return out


@dataclass(frozen=True)
class Finding:
    """A rule that holds now. Its texts are worded when read, in the reader's language (findings are
    computed once and shared by every viewer): `health.<rule>.title/message/advice` in the language
    files, filled with `values`."""
    rule: str          # stable id: no_signal, length_collapse, truncated, kl, rm_pinned, nonfinite_loss, reward_hacking
    since_step: int    # the first step of the streak that is still going on
    values: tuple = ()  # (name, value) pairs the message is filled with

    def _text(self, part):
        return t(f"health.{self.rule}.{part}", **dict(self.values))

    @property
    def title(self):
        """A few words, for a badge."""
        return self._text("title")

    @property
    def message(self):
        """What was seen."""
        return self._text("message")

    @property
    def advice(self):
        """What to try."""
        return self._text("advice")


def load_settings(home):
    """The home's saved thresholds, else the defaults (a broken or partial file falls back field by field)."""
    path = Path(home) / SETTINGS_FILE
    try:
        saved = json.loads(regular_file.read_text(path))
    except (OSError, ValueError):
        return HealthSettings()
    known = {f.name: f.type for f in fields(HealthSettings)}
    values = {k: v for k, v in saved.items() if k in known and isinstance(v, (int, float))}
    if "window" in values:
        values["window"] = int(values["window"])
    settings = replace(HealthSettings(), **values)
    return settings if not settings.problems() else HealthSettings()


def save_settings(home, settings):
    """Save thresholds for every page of this home. A bad value raises `MessageError` (a ValueError
    whose text is worded in the language of whoever reads it) and saves nothing."""
    problems = settings.problems()
    if problems:
        raise MessageError(problems)
    path = Path(home) / SETTINGS_FILE
    paths.private_dir(path.parent)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(settings), indent=1), encoding="utf-8")
    paths.private_file(tmp)
    os.replace(tmp, path)


def _steps(df):
    return df["global_step"] if "global_step" in df.columns else df["step"]


def _streak_start(df, column, condition, window):
    """The step where the trailing run of rows meeting `condition` began, when that run spans at least
    `window` logged rows that have the metric; else None."""
    if column not in df.columns:
        return None
    present = df[column].notna()
    values = df.loc[present, column].to_numpy(dtype=float)
    steps = _steps(df)[present].to_numpy()
    if len(values) < window:
        return None
    ok = condition(values)
    if not ok[-window:].all():
        return None
    broken = np.flatnonzero(~ok)
    start = broken[-1] + 1 if len(broken) else 0
    return int(steps[start])


def _loss_columns(df):
    return [c for c in df.columns if (c == "loss" or c.endswith("loss") or c.endswith("_loss") or c.endswith("/loss"))
            and not c.startswith(HELD_OUT_PREFIX)]


#: The held-out evaluation's records (trainer/held_out.py): rows of their own at steps without a progress
#: line (step 0, say), where no training metric is written.
HELD_OUT_PREFIX = "eval/"
#: What says whether a rising training reward is real: answers to held-out prompts (their reward and
#: whether they are right, greedy and sampled) and second opinions on the stored responses.
HELD_OUT_SIGNALS = ("eval/reward/mean", "eval/accuracy", "eval/sampled/reward/mean", "eval/sampled/accuracy")
RESCORE_PREFIX = "rescore/"
#: A held-out signal that moved up by no more than this is flat (64 held-out answers: one more right is 0.016).
HELD_OUT_FLAT = 0.02


def _held_out_columns(df):
    return [c for c in HELD_OUT_SIGNALS if c in df.columns] + [
        c for c in df.columns if c.startswith(RESCORE_PREFIX) and c.endswith("/mean")]


def _reward_hacking(df, s):
    """(since step, values) when the training reward rose by at least `hack_rise` between held-out
    observations while every held-out signal stayed flat or fell (each judged over its last two
    observations at least `window` logged training steps apart); else None."""
    if "reward" not in df.columns:
        return None
    steps = _steps(df).to_numpy()
    trained = df["reward"].notna().to_numpy()
    reward, train_steps = df["reward"].to_numpy(dtype=float)[trained], steps[trained]
    w = s.window
    if len(reward) < 2 * w:
        return None
    judged = []
    for column in _held_out_columns(df):
        present = df[column].notna().to_numpy()
        at, values = steps[present], df[column].to_numpy(dtype=float)[present]
        if len(values) < 2:
            continue
        end = len(values) - 1
        starts = [j for j in range(end) if ((train_steps > at[j]) & (train_steps <= at[end])).sum() >= w]
        if not starts:
            continue
        start = starts[-1]
        before = reward[train_steps <= at[start]][-w:]
        if len(before) < w:  # a baseline before training (step 0): the first window after it
            before = reward[train_steps > at[start]][:w]
        after = reward[train_steps <= at[end]][-w:]
        judged.append((column, int(at[start]), float(after.mean() - before.mean()), float(values[end] - values[start])))
    if not judged or not all(rise >= s.hack_rise and gain <= HELD_OUT_FLAT for _, _, rise, gain in judged):
        return None
    since = min(start for _, start, _, _ in judged)
    rise = min(rise for _, _, rise, _ in judged)
    gain = max(gain for _, _, _, gain in judged)
    return since, (("rise", rise), ("gain", gain), ("signals", ", ".join(c for c, _, _, _ in judged)))


def evaluate(df, settings=None):
    """The findings that hold at the end of the metrics frame `df` (see the module docstring)."""
    s = settings or HealthSettings()
    found = []
    if df is None or len(df) == 0:
        return found
    w = s.window

    step = _nonfinite_in_records(df)
    if step is not None:
        found.append(Finding("nonfinite_loss", step, (("step", step),)))

    start = _streak_start(df, "frac_reward_zero_std", lambda v: v >= s.zero_std_max, w)
    if start is not None:
        last = float(df["frac_reward_zero_std"].dropna().iloc[-1])
        found.append(Finding("no_signal", start, (("last", last), ("bound", s.zero_std_max), ("window", w))))

    if "length/mean" in df.columns:
        lengths = df["length/mean"].dropna().to_numpy(dtype=float)
        if len(lengths) >= 2 * w:
            early = float(np.mean(lengths[:w]))
            start = _streak_start(df, "length/mean", lambda v: v < s.length_collapse * early, w)
            if start is not None and early > 0:
                found.append(Finding("length_collapse", start, (("last", float(lengths[-1])),
                                                                ("bound", s.length_collapse), ("early", early))))

    start = _streak_start(df, "truncated_frac", lambda v: v >= s.truncated_max, w)
    if start is not None:
        found.append(Finding("truncated", start, (("last", float(df["truncated_frac"].dropna().iloc[-1])),
                                                  ("bound", s.truncated_max), ("window", w))))

    for column in ("kl", "kl_ref"):
        start = _streak_start(df, column, lambda v: v > s.kl_max, w)
        if start is not None:
            found.append(Finding("kl", start, (("column", column), ("last", float(df[column].dropna().iloc[-1])),
                                               ("bound", s.kl_max), ("window", w))))
            break

    hacking = _reward_hacking(df, s)
    if hacking is not None:
        found.append(Finding("reward_hacking", hacking[0], hacking[1]))

    start = _streak_start(df, "rm/clip_frac", lambda v: v >= s.rm_pinned_max, w)
    if start is not None:
        found.append(Finding("rm_pinned", start, (("last", float(df["rm/clip_frac"].dropna().iloc[-1])),
                                                  ("bound", s.rm_pinned_max), ("window", w))))
    return found


class HealthWatch:
    """The health checks of one run while it runs (its supervisor asks now and then, `check`): each look reads
    only the records appended since the last (`metric_stream.MetricsReader`) and evaluates again only when
    some came."""

    def __init__(self, run_dir, settings=None):
        from mmcore.runs.metric_stream import MetricsReader

        self.reader = MetricsReader(run_dir)
        self.settings = settings or HealthSettings()

    def check(self):
        """The findings that hold now; None when no record came since the last look (nothing new to judge)."""
        if not self.reader.update():
            return None
        return evaluate(self.reader.frame(), self.settings)

    def last_metrics(self):
        """The last logged step, loss and reward ({"step", "loss", "reward"}, those the run has): what a message
        about a run that is still running shows of it."""
        df = self.reader.frame()
        if not len(df):
            return {}
        row = df.iloc[-1]
        found = {"step": int(row["global_step"])} if "global_step" in df.columns else {}
        for column in ("loss", "reward"):
            try:
                value = float(row[column])
            except (KeyError, TypeError, ValueError):  # not a column of this run, or not a number
                continue
            if math.isfinite(value):
                found[column] = value
        return found


def _nonfinite_in_records(df):
    """The first step whose loss is NaN or infinite, or None. A metrics stream writes every loss at
    every logged step, so a missing value there is a NaN the trainer wrote, not a gap."""
    first = None
    if "lr" in df.columns:  # every training record has its learning rate; an evaluation's own has no loss
        df = df[df["lr"].notna()]
    for column in _loss_columns(df):
        values = df[column].to_numpy(dtype=float)
        bad = np.flatnonzero(~np.isfinite(values))
        if len(bad):
            step = int(_steps(df).iloc[bad[0]])
            first = step if first is None else min(first, step)
    return first


def badge(findings):
    """A short text for a table cell: '' when healthy, else the findings' titles."""
    return " · ".join(f.title for f in findings)
