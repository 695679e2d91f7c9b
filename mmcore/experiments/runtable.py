"""The runs table: every job as a run, with its parameters and its results, for comparing runs.

`runs(store)` gives one dict per job (newest first): `id`, `name`, `type`, `owner`, `status`, `tags`, `note`,
`created_at`, `params` (every parameter of its type, typed values as a form shows them: the script's default
where the job did not set one) and `results` (`mmcore.runs.runresults`). `frame(runs)` lays them out
one column per parameter and per result (and READING_COLUMN, "…" for each run whose results are still being
read, when any is), leaving out parameters on which every run agrees; `search`,
`filter_column` and `sort` narrow and order it; `csv` writes what is shown.
"""
import functools
import re

import pandas as pd

from mmcore.base.i18n import MessageError, message
from mmcore.runs import runresults, summary_worker
from mmcore.experiments.annotations import Annotations
from mmcore.jobs import jobnote
from mmcore.train import train_types

#: The columns every runs table starts with, before parameters and results.
BASE_COLUMNS = ("id", "name", "type", "owner", "status", "tags", "note")
READING_COLUMN, READING = "reading", "…"  # the column that marks runs whose results are still being read
PARAM_PREFIX = "p:"  # a parameter's column is "p:<name>", so that no parameter shadows a base or result column
_COMPARISON = re.compile(r"^\s*(<=|>=|!=|<|>|=)\s*(.*?)\s*$")


@functools.lru_cache(maxsize=None)
def _param_types(train_type):
    try:
        return {p.name: p.type for p in train_types.get_type(train_type).params}
    except KeyError:
        return {}


@functools.lru_cache(maxsize=None)
def _defaults(train_type):
    try:
        return train_types.defaults(train_type)
    except KeyError:
        return {}


@functools.lru_cache(maxsize=4096)
def normal_value(kind, value):
    """A parameter's value as one text, whatever way it was given: "2e-3" and 0.002 both read "0.002"."""
    text = "" if value is None else str(value).strip()
    if text == "" or kind is str or kind is None:
        return text
    try:
        if kind is bool:
            return "1" if text.lower() in ("1", "true", "yes", "on") else "0"
        return train_types.format_value(kind(float(text)) if kind is int else kind(text))
    except ValueError:
        return text


def params_of(job):
    """Every parameter of the job's type, as normalised text (the script's default where the job set none)."""
    kinds = _param_types(job.train_type)
    values = {**_defaults(job.train_type), **(job.params or {})}
    return {name: normal_value(kinds.get(name), value) for name, value in values.items()}


def run_of(job, home, notes=None, read=None, later=None):
    """One run as a dict (see the module's docstring); `read`, `later`: see `runresults.results`."""
    annotation = (notes or {}).get(job.id, {"tags": [], "note": ""})
    return {"id": job.id, "name": job.name, "type": job.train_type, "owner": job.user, "status": job.status,
            "tags": list(annotation["tags"]), "note": annotation["note"], "job_note": jobnote.english(job.note),
            "created_at": job.created_at, "params": params_of(job),
            "results": runresults.results(job, home, read, later)}


def runs(store, train_type=None, limit=None, pending=None):
    """Every run of the job store, newest first (of one type, at most `limit`), with complete results: every
    stream without a kept summary is read here. With `pending` (a set), what a page does that must not wait:
    past `runresults.INLINE_BYTES` the streams of finished runs that were never summarised are handed to the
    background worker (`summary_worker`) and those runs' ids go into `pending`, their results blank until it
    has kept them."""
    notes = Annotations(store.path).all()
    kept = runresults.SummaryStore(store.path)
    kept.load()
    read = set()
    later = None if pending is None else runresults.Later(inline=summary_worker.unfinished(store.path))
    found = [run_of(job, store.home, notes, read, later) for job in store.list(train_type=train_type, limit=limit)]
    kept.keep(read)  # the streams read here need not be read again by the next process
    if later is not None and later.paths:
        summary_worker.hand_over(store.path, later.paths)
        pending.update(later.jobs)
    return found


def varying(runs_, key="params"):
    """The names under `key` whose values are not the same in every run (absent counts as a value)."""
    names = {}
    for run in runs_:
        for name in run[key]:
            names.setdefault(name, None)
    return [name for name in names if len({run[key].get(name) for run in runs_}) > 1]


def frame(runs_, all_params=False, pending=()):
    """The runs as a table: the base columns, "p:<name>" for each parameter (only those that differ, unless
    `all_params`), then the results (`final_loss`, ..., `eval/...`) that any run has, preceded by READING_COLUMN
    when some runs' results are still being read (`pending`: their ids)."""
    params = list({n: None for r in runs_ for n in r["params"]}) if all_params else varying(runs_)
    result_keys = list(runresults.RESULT_KEYS) + sorted(
        {k for r in runs_ for k in r["results"] if k not in runresults.RESULT_KEYS})
    rows = [[r["id"], r["name"], r["type"], r["owner"], r["status"], ", ".join(r["tags"]), r["note"],
             *(r["params"].get(p, "") for p in params), *(r["results"].get(k) for k in result_keys)]
            for r in runs_]
    columns = [*BASE_COLUMNS, *(PARAM_PREFIX + p for p in params), *result_keys]
    df = pd.DataFrame(rows, columns=columns)
    if pending:
        df.insert(len(columns) - len(result_keys), READING_COLUMN,
                  [READING if r["id"] in pending else "" for r in runs_])
    for key in result_keys:
        df[key] = pd.to_numeric(df[key], errors="coerce")
    return df


def search(df, text):
    """Rows whose name, tags or note hold every word of `text` (any case); `df` itself when `text` is blank."""
    words = str(text or "").lower().split()
    if not words or df.empty:
        return df
    haystack = (df["name"].astype(str) + " " + df["tags"].astype(str) + " " + df["note"].astype(str)).str.lower()
    keep = pd.Series(True, index=df.index)
    for w in words:
        keep &= haystack.str.contains(w, regex=False)
    return df[keep]


def filter_column(df, column, expression):
    """Rows whose `column` matches `expression`: "<0.5", ">=100", "!=x", "=sft" (exact) or a text the value
    contains (any case). A numeric comparison on a column of numbers compares numbers. MessageError for an
    unknown column or a comparison of numbers with something that is not one."""
    expression = str(expression or "").strip()
    if not expression:
        return df
    if column not in df.columns:
        raise MessageError(message("runs.no_column", column=column))
    values = df[column]
    found = _COMPARISON.match(expression)
    if not found:
        return df[values.astype(str).str.lower().str.contains(expression.lower(), regex=False)]
    op, operand = found.groups()
    numbers = pd.to_numeric(values, errors="coerce")
    if op in ("<", ">", "<=", ">=") or numbers.notna().any():
        try:
            target = float(operand)
        except ValueError:
            if op in ("=", "!="):
                numbers = None
            else:
                raise MessageError(message("runs.not_a_number", value=operand)) from None
        else:
            values = numbers
            operand = target
    if op in ("=", "!=") and not isinstance(operand, float):
        values = values.astype(str)
    compare = {"<": values.lt, ">": values.gt, "<=": values.le, ">=": values.ge, "=": values.eq, "!=": values.ne}[op]
    return df[compare(operand).fillna(False).astype(bool)]


def sort(df, column, descending=False):
    """`df` ordered by `column` (numbers as numbers; empty values last)."""
    if column not in df.columns:
        raise MessageError(message("runs.no_column", column=column))
    values = df[column]
    blank = values.isna() | (values.astype(str).str.strip() == "")
    numbers = pd.to_numeric(values, errors="coerce")
    key = numbers if (~blank).any() and numbers[~blank].notna().all() else values.astype(str).where(~blank)
    order = key.sort_values(ascending=not descending, na_position="last", kind="stable").index
    return df.loc[order]


def csv(df):
    """The table as CSV text (UTF-8, a header row)."""
    return df.to_csv(index=False)
