"""Load SQL kept as named blocks in ``sql/<dialect>/*.sql``.

A queries file holds blocks that start with ``-- name: <name>`` followed by a
one-line ``-- purpose`` comment and the statement. A block whose name starts with
``_`` is a fragment, not a query: ``{{_name}}`` in a later block is replaced by it
(two statements that share a long piece keep it in one place). Migrations are
the numbered files ``NNNN_<what>.sql`` of a dialect, applied in order.
"""

from __future__ import annotations

import re
from importlib import resources

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_FRAGMENT = re.compile(r"\{\{(_\w+)\}\}")


def load_queries(dialect: str, file: str = "queries") -> dict[str, str]:
    """The named queries of ``dialect`` (``sqlite`` or ``postgres``) in ``<file>.sql``."""
    text = resources.files(__package__).joinpath("sql", dialect, f"{file}.sql").read_text()
    parts = _NAME.split(text)
    out: dict[str, str] = {}
    fragments: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [ln for ln in body.strip().splitlines() if not ln.startswith("--")]
        statement = "\n".join(lines).strip().rstrip(";")
        statement = _FRAGMENT.sub(lambda m: fragments[m.group(1)], statement)
        (fragments if name.startswith("_") else out)[name] = statement
    return out


def migrations(dialect: str) -> list[tuple[int, str, str]]:
    """``(number, filename, sql)`` for every migration of ``dialect``, in order."""
    folder = resources.files(__package__).joinpath("sql", dialect)
    found = []
    for entry in folder.iterdir():
        m = re.match(r"^(\d{4})_\w+\.sql$", entry.name)
        if m:
            found.append((int(m.group(1)), entry.name, entry.read_text()))
    found.sort()
    return found
