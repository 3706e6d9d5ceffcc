"""The PostgreSQL backend: :class:`PostgresStore` on one schema of a database.

Modules: ``store`` (the store: schema, the hot path through the group commit, the
queue), ``statements`` (the hot statements as the group commit sends them), ``notify``
(LISTEN/NOTIFY for waiting workers), ``pool`` (the URL, the connection pool, PostgreSQL's
errors as tether's). The cold-path methods are those of
:class:`tether.store.sqlbase.SqlStore`, shared with SQLite.
"""

from __future__ import annotations

from tether.store.postgres.pool import DEFAULT_SCHEMA, RECONNECT_EVERY, SCHEMA_VERSION, split_url
from tether.store.postgres.store import AUTO_LANES, LINGER, PostgresStore

__all__ = [
    "AUTO_LANES",
    "DEFAULT_SCHEMA",
    "LINGER",
    "RECONNECT_EVERY",
    "SCHEMA_VERSION",
    "PostgresStore",
    "split_url",
]
