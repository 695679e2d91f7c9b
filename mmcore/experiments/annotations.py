"""Tags and a note on each run, kept in the job store's file (`run_annotations` table beside `jobs`).

A run's tags are short words (`baseline`, `lr-sweep`), its note free text; both are set through the act
`mmcore.actions.experiment_acts.annotate` (its owner or an admin, audited) and read everywhere a run is named
(the runs table, its search, the diff, the Jobs table's Tags column, the Logs page's run picker: `peek_tags`,
`tagged`). Rows of deleted jobs are harmless: they are never joined.
"""
import json
import re
import sqlite3
import time
from contextlib import closing
from pathlib import Path

from mmcore.base import sqlite_tables
from mmcore.base.i18n import MessageError, message

SCHEMA = """
CREATE TABLE IF NOT EXISTS run_annotations (
    job_id INTEGER PRIMARY KEY,
    tags TEXT NOT NULL DEFAULT '[]',
    note TEXT NOT NULL DEFAULT '',
    updated_by TEXT NOT NULL DEFAULT '',
    updated_at REAL NOT NULL
)
"""
TAG_PATTERN = re.compile(r"^[\w.:+-]{1,32}$")
MAX_TAGS = 16
NOTE_MAX = 2000


def clean_tags(tags):
    """`tags` (a list, or one comma-separated text) as a sorted list without repeats; MessageError for a
    tag that is not 1-32 letters, digits or `_ . : + -`, or for more than MAX_TAGS."""
    if isinstance(tags, str):
        tags = tags.split(",")
    found = sorted({str(tag).strip() for tag in tags or [] if str(tag).strip()})
    for tag in found:
        if not TAG_PATTERN.match(tag):
            raise MessageError(message("runs.tag_bad", tag=tag))
    if len(found) > MAX_TAGS:
        raise MessageError(message("runs.too_many_tags", n=MAX_TAGS))
    return found


def clean_note(note):
    """A note as stored: stripped; MessageError when longer than NOTE_MAX characters."""
    note = str(note or "").strip()
    if len(note) > NOTE_MAX:
        raise MessageError(message("runs.note_too_long", n=NOTE_MAX))
    return note


def _annotation(conn, job_id):
    """{"tags": [...], "note": str} of one run as stored through `conn` (empty when it has none)."""
    row = conn.execute("SELECT tags, note FROM run_annotations WHERE job_id = ?", (int(job_id),)).fetchone()
    return {"tags": json.loads(row[0]), "note": row[1]} if row else {"tags": [], "note": ""}


def _read_only(store_path):
    return sqlite3.connect(f"{Path(store_path).resolve().as_uri()}?mode=ro", uri=True, timeout=30)


def tagged(label, tags):
    """A run's name with its tags after it, as a picker shows it: "12 — runs-a [baseline, lr]"."""
    return f"{label} [{', '.join(tags)}]" if tags else label


class Annotations(sqlite_tables.Tables):
    """The tags and notes of the runs of the job store at `path` (JobStore.path)."""
    SCHEMA = SCHEMA

    def all(self):
        """{job_id: {"tags": [...], "note": str}} for every annotated run."""
        with self.connection() as conn:
            rows = conn.execute("SELECT job_id, tags, note FROM run_annotations").fetchall()
        return {job_id: {"tags": json.loads(tags), "note": note} for job_id, tags, note in rows}

    def get(self, job_id):
        """{"tags": [...], "note": str} of one run (empty when it has none)."""
        with self.connection() as conn:
            return _annotation(conn, job_id)

    @staticmethod
    def peek(store_path, job_id):
        """`get` without writing anything (no table made, the file opened read-only): for a page that only
        shows a run's tags, so that drawing it never changes the job store it follows."""
        try:
            with closing(_read_only(store_path)) as conn:
                return _annotation(conn, job_id)
        except sqlite3.Error:  # no table yet (nothing annotated), or no store
            return {"tags": [], "note": ""}

    @staticmethod
    def peek_tags(store_path):
        """{job_id: [tag, ...]} of every tagged run, read as `peek` reads (nothing written): for the pages that
        name runs (the Jobs table, the Logs page's run picker) while they draw."""
        try:
            with closing(_read_only(store_path)) as conn:
                rows = conn.execute("SELECT job_id, tags FROM run_annotations WHERE tags != '[]'").fetchall()
        except sqlite3.Error:  # no table yet (nothing annotated), or no store
            return {}
        return {job_id: json.loads(tags) for job_id, tags in rows}

    def set(self, job_id, user, tags=None, note=None):
        """Replace the run's tags and/or note (None leaves that one as it is); returns what is stored now.
        Values are checked first (`clean_tags`, `clean_note`): a bad one changes nothing."""
        current = self.get(job_id)
        tags = current["tags"] if tags is None else clean_tags(tags)
        note = current["note"] if note is None else clean_note(note)
        with self.connection() as conn, conn:
            conn.execute("INSERT INTO run_annotations (job_id, tags, note, updated_by, updated_at)"
                         " VALUES (?, ?, ?, ?, ?)"
                         " ON CONFLICT (job_id) DO UPDATE SET tags = excluded.tags, note = excluded.note,"
                         " updated_by = excluded.updated_by, updated_at = excluded.updated_at",
                         (int(job_id), json.dumps(tags), note, str(user), time.time()))
        return {"tags": tags, "note": note}
