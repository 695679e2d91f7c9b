"""Tables that one part of the dashboard keeps in a SQLite file of the home (usually the job store's file).

The file is made owner-only before SQLite opens it (`paths.private_db`), the part's tables are created on
first use, and each use opens a connection of its own (a connection is not shared between threads).
"""
import sqlite3
from contextlib import closing

from mmcore.base import paths

BUSY_TIMEOUT_S = 30  # how long a use waits for another process's write to end


class Tables:
    """The tables `SCHEMA` (SQL statements, set by a subclass) in the SQLite file at `path`; `ROW_FACTORY`,
    when set, is the rows' type on each connection."""
    SCHEMA = ""
    ROW_FACTORY = None

    def __init__(self, path):
        self.path = str(path)
        paths.private_db(self.path)
        with self.connection() as conn, conn:
            conn.executescript(self.SCHEMA)

    def connection(self):
        """A new connection that a `with` block closes at its end (`with tables.connection() as conn, conn:`
        also commits there, or rolls back on an error)."""
        return closing(self._connect())

    def _connect(self):
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)
        if self.ROW_FACTORY is not None:
            conn.row_factory = self.ROW_FACTORY
        return conn
