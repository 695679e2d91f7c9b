"""Named saved views of the Logs page, per user and shareable, in the job store's SQLite file.

A view is the Logs page's URL state (`mmcore.logs.urlstate`: runs, metrics, smoothing, axes, ranges) under
a name its owner chose. Its owner sees it in the list; a view marked shared is listed for everyone
too, and any view can be opened by a link (`?view=<id>`), so a teammate gets the same charts. Saving
a view under a name the owner already used replaces that view (same id, so links to it follow).

The table lives in the job store's database file (backed up with it) and is created here on first
use; the store's own schema and migrations do not know it.
"""
import sqlite3
import time
import urllib.parse
from dataclasses import dataclass

from mmcore.base import sqlite_tables
from mmcore.base.i18n import t
from mmcore.logs import urlstate

NAME_MAX = 80
SCHEMA = """
CREATE TABLE IF NOT EXISTS saved_views (
    id INTEGER PRIMARY KEY AUTOINCREMENT, owner TEXT NOT NULL, name TEXT NOT NULL, query TEXT NOT NULL,
    shared INTEGER NOT NULL DEFAULT 0, saved_at REAL NOT NULL, UNIQUE (owner, name))
"""


class ViewRefused(ValueError):
    """A view that cannot be saved or deleted; the message says why, in the viewer's language."""


@dataclass(frozen=True)
class SavedView:
    id: int
    owner: str
    name: str
    params: dict  # the Logs page's query parameters (only those urlstate.LOGS knows)
    shared: bool
    saved_at: float


def view_params(query_params, fields=urlstate.LOGS):
    """The part of a page's query parameters that is its view (other parameters are left out)."""
    return {str(k): str(v) for k, v in dict(query_params).items() if k in fields}


class ViewStore(sqlite_tables.Tables):
    """The saved views of the job store at `path` (JobStore.path)."""
    SCHEMA = SCHEMA
    ROW_FACTORY = sqlite3.Row

    @staticmethod
    def _view(row):
        return SavedView(id=row["id"], owner=row["owner"], name=row["name"],
                         params=dict(urllib.parse.parse_qsl(row["query"], keep_blank_values=True)),
                         shared=bool(row["shared"]), saved_at=row["saved_at"])

    def save(self, owner, name, params, shared=False):
        """Save `params` (a view's query parameters) as `owner`'s view `name`; return its id."""
        name = (name or "").strip()
        if not name:
            raise ViewRefused(t("views.name_required"))
        if len(name) > NAME_MAX or "\n" in name or "\r" in name:
            raise ViewRefused(t("views.name_bad", n=NAME_MAX))
        query = urllib.parse.urlencode(view_params(params))
        with self.connection() as conn, conn:
            conn.execute("INSERT INTO saved_views (owner, name, query, shared, saved_at) VALUES (?, ?, ?, ?, ?) "
                         "ON CONFLICT (owner, name) DO UPDATE SET query = excluded.query, shared = excluded.shared, "
                         "saved_at = excluded.saved_at", (owner, name, query, int(bool(shared)), time.time()))
            return conn.execute("SELECT id FROM saved_views WHERE owner = ? AND name = ?", (owner, name)).fetchone()[0]

    def get(self, view_id, viewer=None):
        """The view `view_id`, or None. With `viewer`: only a view they may open (their own, or shared)."""
        with self.connection() as conn:
            row = conn.execute("SELECT * FROM saved_views WHERE id = ?", (int(view_id),)).fetchone()
        if row is None or (viewer is not None and row["owner"] != viewer and not row["shared"]):
            return None
        return self._view(row)

    def visible_to(self, viewer):
        """The views `viewer` may open: their own first, then the shared ones of others, by name."""
        with self.connection() as conn:
            rows = conn.execute("SELECT * FROM saved_views WHERE owner = ? OR shared = 1 "
                                "ORDER BY owner != ?, name COLLATE NOCASE, owner", (viewer, viewer)).fetchall()
        return [self._view(row) for row in rows]

    def delete(self, view_id, viewer, admin=False):
        """Delete a view: its owner's (or an admin's) to delete."""
        view = self.get(view_id)
        if view is None:
            raise ViewRefused(t("views.no_view", id=view_id))
        if view.owner != viewer and not admin:
            raise ViewRefused(t("views.not_yours", name=view.name, owner=view.owner))
        with self.connection() as conn, conn:
            conn.execute("DELETE FROM saved_views WHERE id = ?", (view.id,))


def label(view, viewer):
    """How a view reads in a list: its name, with its owner when it is someone else's."""
    if view.owner == viewer:
        return view.name + (t("views.shared_mark") if view.shared else "")
    return t("views.of", name=view.name, owner=view.owner)


OPEN_KEY = "views.open_id"  # session state: a view the viewer chose to open, applied on the next run


def open_requested(state, query_params, views, viewer):
    """At the start of a Logs run, before `urlstate.apply`: a view chosen in the list, or named by a
    `?view=<id>` link, replaces the URL's view state (so the page then shows it). Returns a problem
    message when the view cannot be opened, else None."""
    wanted = state.pop(OPEN_KEY, None)
    if wanted is None:
        wanted = query_params.get("view")
    if wanted is None:
        return None
    try:
        view = views.get(int(str(wanted).strip()), viewer)
    except ValueError:
        view = None
    if view is None:
        if "view" in query_params:
            del query_params["view"]
        return t("views.cannot_open", id=wanted)
    others = {k: v for k, v in dict(query_params).items() if k not in urlstate.LOGS and k != "view"}
    query_params.clear()
    query_params.update({**others, **view.params})
    return None
