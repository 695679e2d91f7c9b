"""Guards: rules a run is stopped by when its records say it went wrong, checked by its supervisor.

A launch sets them (`guards={...}`: the Train form, `mmcore.api.submit`, `python -m mmcore submit --guard
NAME=VALUE`); they are kept in the job store's file (`run_guards`, `save`/`load`), written in the transaction
that creates the job's row (`save_in`), and the job's supervisor
(`mmcore.jobs.runner`) follows the run's metrics stream with a `GuardWatch`, which reads only the lines
appended since its last look. The guards:

- `nonfinite` (on unless set to 0): the loss is NaN or infinite;
- `loss_above` = X: the loss stayed above X for `patience` logged steps in a row;
- `reward_below` = X: the reward stayed below X for `patience` logged steps in a row;
- `eval_patience` = N: the held-out metric (`eval/loss`, lower is better, else `eval/reward/mean`, higher is
  better) did not improve for N evaluations in a row.

A guard that fires stops the job as a stop request does (its trainer saves its resume state and exits), and
the job ends "stopped" with the guard and its reason in its note, and the audit trail has the stop (`record_stop`:
actor "system:guard", action "guard_stop"). Slurm jobs have no local supervisor;
their guards are for the supervisor that follows them.
"""
import json
import math
import os
import sqlite3
from contextlib import closing
from dataclasses import asdict, dataclass

from mmcore.access import audit
from mmcore.base import regular_file
from mmcore.base.i18n import MessageError, english, message
from mmcore.runs import metric_stream

SCHEMA = "CREATE TABLE IF NOT EXISTS run_guards (job_id INTEGER PRIMARY KEY, guards TEXT NOT NULL)"
EVAL_METRICS = (("eval/loss", min), ("eval/reward/mean", max))  # a held-out metric and which way is better
LOSS_KEY, REWARD_KEY = "loss", "reward"
CHECK_S = 2.0  # how often a supervisor looks at its run's new records
AUDIT_ACTOR = "system:guard"  # who stopped a run, in the audit trail


@dataclass(frozen=True)
class Guards:
    """A run's guards (see the module's docstring); None: that guard is off."""
    nonfinite: bool = True
    loss_above: float | None = None
    reward_below: float | None = None
    patience: int = 1
    eval_patience: int | None = None

    def as_dict(self):
        return asdict(self)


NAMES = tuple(Guards.__dataclass_fields__)


def parse(values):
    """Guards from {name: value} (texts or numbers, as a form, the API or `--guard NAME=VALUE` gives them);
    MessageError naming every bad one. Empty values leave a guard at its default."""
    if isinstance(values, Guards):
        return values
    problems, typed = [], {}
    for name, value in (values or {}).items():
        text = "" if value is None else str(value).strip()
        if name not in NAMES:
            problems.append(message("guard.unknown", name=name, names=", ".join(NAMES)))
            continue
        if text == "":
            continue
        try:
            if name == "nonfinite":
                if text.lower() not in ("1", "0", "true", "false", "on", "off"):
                    raise ValueError
                typed[name] = text.lower() in ("1", "true", "on")
            elif name in ("patience", "eval_patience"):
                number = int(text)
                if number < 1:
                    raise ValueError
                typed[name] = number
            else:
                number = float(text)
                if not math.isfinite(number):
                    raise ValueError
                typed[name] = number
        except ValueError:
            kind = "flag" if name == "nonfinite" else "count" if "patience" in name else "number"
            problems.append(message(f"guard.bad_{kind}", name=name, value=text))
    if problems:
        raise MessageError(problems)
    return Guards(**typed)


def _connect(store_path):
    conn = sqlite3.connect(str(store_path), timeout=30)
    conn.execute(SCHEMA)
    return conn


def save(store_path, job_id, guards):
    """Keep job `job_id`'s guards in the job store's file."""
    with closing(_connect(store_path)) as conn, conn:
        save_in(conn, job_id, guards)


def save_in(conn, job_id, guards):
    """Keep job `job_id`'s guards through `conn`, in its open transaction (the one that creates the job's row:
    `mmcore.queue.launch.start`), so that a job never exists without its guards."""
    conn.execute(SCHEMA)
    conn.execute("INSERT OR REPLACE INTO run_guards (job_id, guards) VALUES (?, ?)",
                 (int(job_id), json.dumps(guards.as_dict())))


def load(store_path, job_id):
    """Job `job_id`'s guards; the defaults (a non-finite loss stops it) when it was launched without any."""
    with closing(_connect(store_path)) as conn:
        row = conn.execute("SELECT guards FROM run_guards WHERE job_id = ?", (int(job_id),)).fetchone()
    if row is None:
        return Guards()
    kept = json.loads(row[0])
    return Guards(**{k: v for k, v in kept.items() if k in NAMES})


class GuardWatch:
    """Follows one run's metrics stream and says when a guard fires (`check`, or `feed` for records at hand)."""

    def __init__(self, metrics_path, guards):
        self.path = str(metrics_path)
        self.guards = guards
        self.offset = 0
        self.loss_streak = self.reward_streak = 0
        self.eval_name = None
        self.eval_best = None
        self.eval_stale = 0
        self.fired = None

    def check(self):
        """Read the records appended since the last look (whole lines only); the reason (a message) when a
        guard fires, else None. Once fired, it keeps answering the same reason."""
        if self.fired is not None:
            return self.fired
        try:
            with regular_file.open_regular(self.path) as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:  # no stream yet
            return None
        end = data.rfind(b"\n") + 1
        if end == 0:
            return None
        self.offset += end
        return self.feed(metric_stream.json_objects(data[:end]))

    def feed(self, records):
        """Look at `records` (dicts, in order); the reason when a guard fires, else None."""
        g = self.guards
        for record in records:
            if self.fired is not None:
                break
            step = record.get("global_step")
            loss, reward = _number(record.get(LOSS_KEY)), _number(record.get(REWARD_KEY))
            if loss is not None:
                if g.nonfinite and not math.isfinite(loss):
                    self.fired = message("guard.fired.nonfinite", step=step, value=loss)
                    break
                self.loss_streak = self.loss_streak + 1 if g.loss_above is not None and loss > g.loss_above else 0
                if g.loss_above is not None and self.loss_streak >= g.patience:
                    self.fired = message("guard.fired.loss_above", step=step, value=round(loss, 6), limit=g.loss_above,
                                         n=g.patience)
                    break
            if reward is not None and math.isfinite(reward):
                self.reward_streak = (self.reward_streak + 1 if g.reward_below is not None and reward < g.reward_below
                                      else 0)
                if g.reward_below is not None and self.reward_streak >= g.patience:
                    self.fired = message("guard.fired.reward_below", step=step, value=round(reward, 6),
                                         limit=g.reward_below, n=g.patience)
                    break
            if g.eval_patience is not None:
                self._evaluation(record, step)
        return self.fired

    def _evaluation(self, record, step):
        for name, better in EVAL_METRICS:
            value = _number(record.get(name))
            if value is None or not math.isfinite(value) or self.eval_name not in (None, name):
                continue
            self.eval_name = name
            if self.eval_best is None or better(value, self.eval_best) != self.eval_best:
                self.eval_best, self.eval_stale = value, 0
            else:
                self.eval_stale += 1
                if self.eval_stale >= self.guards.eval_patience:
                    self.fired = message("guard.fired.eval_patience", step=step, metric=name, n=self.eval_stale,
                                         best=round(self.eval_best, 6))
            return


def record_stop(home, job_id, reason):
    """The audit trail's entry of a guard's stop of job `job_id` (`reason`: the message `check` answered): who
    (`AUDIT_ACTOR`), which guard and why, in English as the trail keeps it. Returns the entry's id."""
    guard = str(getattr(reason, "key", "")).rpartition(".")[2] or None
    return audit.record_system(AUDIT_ACTOR, "guard_stop", int(job_id), {"guard": guard},
                               {"status": "stopping", "reason": english(reason)}, home=home)


def _number(value):
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def watch_for(store_path, job_id, run_dir, metrics_file="metrics.jsonl"):
    """The GuardWatch of job `job_id` (its guards from the store, its stream in `run_dir`)."""
    return GuardWatch(os.path.join(str(run_dir), metrics_file), load(store_path, job_id))
