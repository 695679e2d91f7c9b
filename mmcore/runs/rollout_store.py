"""Read a run's rollout store (`rollouts.sqlite` in its run folder, written by `trainer/rules/records.py`).

`read(run_dir, step=None)` gives one row per stored response: `step` (global step), `group` (the
prompt's place in the batch), `sample` (the response's place in its group), `prompt_id`, `prompt`,
`response`, `reference`, `reward`, `advantage`, `length`, `truncated`, one `reward/<part>` column per
reward part (they add up to `reward`) and the extras the trainer stored (`kl`, `accuracy`,
`format_ok`, `rm/raw`, `baseline`, `rho`, ...). `query` filters in SQL, so a big store stays quick.
The store is read while the run writes it (WAL): only whole steps are ever visible.
"""
import json
import sqlite3
from pathlib import Path

import pandas as pd

from trainer.rules.records import PART_PREFIX, ROLLOUTS_FILE, prompt_key  # (torch-free)

_RENAME = {"grp": "group", "idx": "sample"}
_BASE = ("step", "group", "sample", "prompt_id", "prompt", "response", "reference", "reward", "advantage",
         "length", "truncated")


class NoRollouts(LookupError):
    """The run folder holds no rollout store."""


def store_path(run_dir):
    return Path(run_dir) / ROLLOUTS_FILE


def connect(run_dir):
    """A read-only connection to the run's store (raises NoRollouts when there is none)."""
    path = store_path(run_dir)
    if not path.is_file():
        raise NoRollouts(f"no rollout store in {run_dir}")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    conn.row_factory = sqlite3.Row
    return conn


def _value_columns(conn):
    """The stored per-response value columns beyond the fixed ones: reward parts first, then extras."""
    names = [row[1] for row in conn.execute("PRAGMA table_info(rollouts)")]
    fixed = {"id", "step", "grp", "idx", "prompt_id", "response", "reward", "advantage", "length", "truncated"}
    extra = [n for n in names if n not in fixed]
    return [n for n in extra if n.startswith(PART_PREFIX)] + [n for n in extra if not n.startswith(PART_PREFIX)]


def columns(run_dir):
    """Every column `read` returns, in order."""
    with connect(run_dir) as conn:
        return list(_BASE) + _value_columns(conn)


def part_names(run_dir):
    """The reward parts stored, without the `reward/` prefix (e.g. ['format', 'answer'])."""
    return [c[len(PART_PREFIX):] for c in columns(run_dir) if c.startswith(PART_PREFIX)]


def _frame(rows, cols):
    df = pd.DataFrame([tuple(r) for r in rows], columns=cols)
    if len(df):
        df["truncated"] = df["truncated"].astype(bool)
    return df


def query(run_dir, step=None, *, reward_min=None, reward_max=None, truncated=None, format_failures=False,
          text=None, prompt_id=None, limit=None):
    """Stored responses matching every given filter, ordered by step, group and sample.

    - `step`: one global step (None: every step); `prompt_id`: one prompt across steps.
    - `reward_min` / `reward_max`: inclusive bounds on the total reward.
    - `truncated`: True (only responses that hit max_gen_len) / False (none of them) / None.
    - `format_failures`: only responses that miss the reasoning format (`format_ok` = 0).
    - `text`: case-insensitive substring of the response, the prompt or the reference.
    """
    with connect(run_dir) as conn:
        values = _value_columns(conn)
        conditions = [("r.step = ?", step, int), ("r.prompt_id = ?", prompt_id, int),
                      ("r.reward >= ?", reward_min, float), ("r.reward <= ?", reward_max, float),
                      ("r.truncated = ?", truncated, lambda flag: 1 if flag else 0)]
        where = [sql for sql, value, _ in conditions if value is not None]
        params = [cast(value) for _, value, cast in conditions if value is not None]
        if format_failures:
            if "format_ok" not in values:
                return _frame([], list(_BASE) + values)  # no format is checked in this run: no failures
            where.append('r."format_ok" = 0')
        if text:
            pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            where.append("(r.response LIKE ? ESCAPE '\\' OR p.prompt LIKE ? ESCAPE '\\' "
                         "OR p.reference LIKE ? ESCAPE '\\')")
            params += [pattern] * 3
        sql = ("SELECT r.step, r.grp, r.idx, r.prompt_id, p.prompt, r.response, p.reference, r.reward, "
               "r.advantage, r.length, r.truncated" + "".join(f', r."{c}"' for c in values) +
               " FROM rollouts r JOIN prompts p ON p.id = r.prompt_id" +
               (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY r.step, r.grp, r.idx")
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return _frame(conn.execute(sql, params).fetchall(), list(_BASE) + values)


def read(run_dir, step=None):
    """Every stored response of the run (or of one global step): see the module docstring for the columns."""
    return query(run_dir, step)


def steps(run_dir):
    """The stored steps: step, epoch, time (unix seconds) and responses, in step order."""
    with connect(run_dir) as conn:
        rows = conn.execute("SELECT step, epoch, time, responses FROM steps ORDER BY step").fetchall()
    return pd.DataFrame([tuple(r) for r in rows], columns=["step", "epoch", "time", "responses"])


def meta(run_dir):
    """What the trainer recorded about the store: train_type, parts, group_size, reward_scale,
    full_at_step (set when the size bound stopped the storing of responses), ..."""
    with connect(run_dir) as conn:
        return {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta")}


def prompt_id_of(run_dir, prompt, reference):
    """The id a prompt (with its reference) has in this run's store, or None: how two runs' answers
    to the same prompt are matched."""
    with connect(run_dir) as conn:
        row = conn.execute("SELECT id FROM prompts WHERE key = ?", (prompt_key(prompt, reference),)).fetchone()
    return None if row is None else row[0]


def prompt_steps(run_dir, prompt_id):
    """The steps at which a prompt was sampled, in order."""
    with connect(run_dir) as conn:
        return [r[0] for r in conn.execute(
            "SELECT DISTINCT step FROM rollouts WHERE prompt_id = ? ORDER BY step", (int(prompt_id),))]


def counts(run_dir):
    """(stored steps, stored responses, distinct prompts)."""
    with connect(run_dir) as conn:
        return tuple(conn.execute(
            "SELECT (SELECT COUNT(*) FROM steps), (SELECT COUNT(*) FROM rollouts), (SELECT COUNT(*) FROM prompts)"
        ).fetchone())


PROBE_COLUMNS = ("step", "mode", "row", "prompt_id", "prompt", "response", "reference", "reward", "accuracy",
                 "length", "truncated")


def probes(run_dir, step=None, mode=None):
    """The answers to the held-out prompts of each evaluation (`--eval_data` / `--eval_holdout`, see
    trainer/held_out.py), one row per answer: step (0: before training), mode (`greedy`, `sampled`), row
    (the held-out row), prompt_id, prompt, response, reference, reward, accuracy, length, truncated and
    one `reward/<part>` column per reward part (weighted: they add up to `reward`). Empty for a run
    without held-out evaluation (or from before the store had them)."""
    with connect(run_dir) as conn:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'probes'").fetchone() is None:
            return pd.DataFrame(columns=list(PROBE_COLUMNS))
        where, params = [], []
        for sql, value in (("q.step = ?", step), ("q.mode = ?", mode)):
            if value is not None:
                where.append(sql)
                params.append(value)
        rows = conn.execute(
            "SELECT q.step, q.mode, q.idx, q.prompt_id, p.prompt, q.response, p.reference, q.reward, q.accuracy, "
            "q.length, q.truncated, q.parts FROM probes q JOIN prompts p ON p.id = q.prompt_id"
            + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY q.step, q.mode, q.idx", params).fetchall()
    df = pd.DataFrame([tuple(r)[:-1] for r in rows], columns=list(PROBE_COLUMNS))
    parts = [json.loads(r[-1]) for r in rows]
    for name in dict.fromkeys(name for p in parts for name in p):
        df[PART_PREFIX + name] = [p.get(name) for p in parts]
    if len(df):
        df["truncated"] = df["truncated"].astype(bool)
    return df
