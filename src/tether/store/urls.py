"""Database URLs: what one names, and how it may be shown.

What it names: the embedded SQLite store (a path, ``sqlite:///rel.db``,
``sqlite:////abs.db``, ``file:///abs.db``) or PostgreSQL (``postgresql://…``,
``postgres://…``), and nothing else.

A URL written for SQLAlchemy (``postgresql+psycopg://``, ``sqlite+pysqlite:///``) names
the same database: its driver part is dropped. A path starting with ``~`` is the user's
home. A URL of another scheme (``mysql://``, ``redis://``) or a SQLite URL naming no file
(``sqlite://``, which sqlite3 would open as a temporary database, lost at close) is
refused: tether would otherwise create a file of that name, or keep nothing.

How it may be shown: without its password. Errors, log lines and the CLI's output name
the database they concern; a URL there is passed through :func:`redact` first (no driver
needed: the CLI uses it too).
"""

from __future__ import annotations

import os
import re

from tether.errors import InvalidInput

_PASSWORD_IN_URL = re.compile(r"(://[^:/?#@\s]*:)[^@/?#\s]*(@)")
_PASSWORD_PARAM = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'\"]+)", re.I)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9.+-]*)://")
_POSTGRES = ("postgres", "postgresql")


def _scheme(url: str) -> tuple[str, str] | None:
    """(the scheme without its driver part, the driver part with its '+') or None."""
    m = _SCHEME.match(url)
    if m is None:
        return None
    base, plus, driver = m.group(1).lower().partition("+")
    return base, plus + driver


def is_postgres(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL database (``postgresql[+driver]://…``)."""
    s = _scheme(url)
    return s is not None and s[0] in _POSTGRES


def postgres_url(url: str) -> str:
    """``url`` as psycopg takes it: ``postgresql+psycopg://`` is ``postgresql://``."""
    s = _scheme(url)
    if s is None or not s[1]:
        return url
    return s[0] + url[url.index("://") :]


def sqlite_path(url: str) -> str:
    """The file path of a SQLite URL: a plain path (``~`` expanded), ``sqlite:///rel.db``,
    ``sqlite:////abs.db`` or ``file:///abs.db`` (a query is dropped). InvalidInput for a
    URL of another scheme, or one naming no file."""
    url = os.fspath(url)
    s = _scheme(url)
    if s is None:
        return os.path.expanduser(url)
    if s[0] == "sqlite":
        rest = url[url.index("://") + 3 :]
        path = (rest[1:] if rest.startswith("/") else rest).split("?", 1)[0]
    elif s[0] == "file":
        path = url[url.index("://") + 3 :].split("?", 1)[0]
    else:
        raise InvalidInput(
            f"{s[0]}:// is not a database tether stores on: give a SQLite file (a path, or "
            f"sqlite:///path) or a PostgreSQL URL (postgresql://user@host/db)"
        )
    if not path:
        raise InvalidInput(
            f"{url!r} names no file: a SQLite store is a file that several processes share "
            f"(a temporary one would be lost at close); give "
            f"sqlite:///agent.db (relative) or sqlite:////abs/path/agent.db"
        )
    return os.path.expanduser(path)


def redact(text: str) -> str:
    """``text`` with the password of any URL in it (``scheme://user:PASSWORD@host``) and
    any ``password=`` parameter (a URL's query, a libpq keyword string) shown as ``***``."""
    return _PASSWORD_PARAM.sub(r"\1***", _PASSWORD_IN_URL.sub(r"\1***\2", text))
