"""The embedded SQLite backend: :class:`SQLiteStore` on one file.

Modules: ``store`` (the store: schema, runs, queue, retention), ``writer`` (write
transactions and the group commit of appends: the hot path), ``connections``
(opening the file, SQLite's errors as tether's), ``locks`` (the writer lock across
processes, the WAL checkpoint thread). The cold-path methods are those of
:class:`tether.store.sqlbase.SqlStore`, shared with PostgreSQL.
"""

from __future__ import annotations

from tether.store.sqlite.locks import CHECKPOINT_EVERY, WAL_AUTOCHECKPOINT, WAL_RESTART
from tether.store.sqlite.store import SCHEMA_VERSION, SQLiteStore
from tether.store.urls import sqlite_path

__all__ = [
    "CHECKPOINT_EVERY",
    "SCHEMA_VERSION",
    "WAL_AUTOCHECKPOINT",
    "WAL_RESTART",
    "SQLiteStore",
    "sqlite_path",
]
