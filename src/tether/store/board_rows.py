"""The rows of boards: keyed, versioned state shared by runs and plain code.

:class:`BoardData` is the storage role that :mod:`tether.context.boards` depends on;
:class:`BoardRows` implements it once for both backends, on the store's own
``transaction()`` and the named queries of ``sql/<dialect>/boards.sql`` (the same names
in both dialects; only ``lock_row`` differs: PostgreSQL locks the key's row with ``FOR
UPDATE``, SQLite's ``BEGIN IMMEDIATE`` already holds the one writer lock).

A key's current value and version live in ``board_values``; every change, in
``board_changes``, with the version it made, the run and position that made it and who
(schema 15). Values arrive and leave as JSON text (:mod:`tether.model.codec`); a deleted
key is a change whose value is None. Tenants are a column: ``''`` outside tenants.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

_NO_LIMIT = 2**62


@dataclass(frozen=True, slots=True)
class BoardWrite:
    """A compare-and-set of one key: ``value`` JSON text (None: delete the key),
    ``expected`` the version it must be at (None: any), and who writes it: ``run_id`` and
    ``pos`` inside a run (the run's position writes once), ``actor`` a name."""

    tenant: str
    board: str
    key: str
    value: str | None
    expected: int | None
    now: float
    run_id: str | None = None
    pos: int | None = None
    actor: str | None = None


@dataclass(frozen=True, slots=True)
class BoardRow:
    """A key's value at one version (``value`` JSON text; None: deleted or never written;
    version 0: never written), who made it and when."""

    tenant: str
    board: str
    key: str
    version: int
    value: str | None
    run_id: str | None
    pos: int | None
    actor: str | None
    at: float


@dataclass(frozen=True, slots=True)
class BoardOutcome:
    """What a write did: ``written`` (the new ``version``), or not: a ``conflict`` (the
    key is at ``version``, not the expected one), or a delete of a key holding no value.
    ``replayed``: this run's position had written it before (the version it made)."""

    written: bool
    version: int
    conflict: bool = False
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class BoardSummary:
    """One board: its tenant (``''``: none), name, keys holding a value, last change."""

    tenant: str
    board: str
    keys: int
    updated_at: float


class BoardData(Protocol):
    """Boards (tether.context.boards): keys, versions, and every change kept."""

    def write_board(self, write: BoardWrite) -> BoardOutcome:
        """Set (or delete) one key if it is at ``write.expected`` (None: whatever its
        version), in one transaction: the new version is the key's last plus one (never
        a gap, whatever other writers do at once), the value row and the change record
        committed together. A write with ``run_id`` and ``pos`` whose position already
        changed the board writes nothing and returns that change's version
        (``replayed``). A delete of a key holding no value writes nothing."""
        ...

    def read_board(self, tenant: str, board: str, key: str | None) -> list[BoardRow]:
        """The current row of ``key`` (empty when it was never written; its value None
        when deleted), or with ``key`` None the keys of the board holding a value, by key."""
        ...

    def read_board_at(self, tenant: str, board: str, key: str | None, at: float) -> list[BoardRow]:
        """As :meth:`read_board` at time ``at``: the newest change of ``key`` (or of each
        key of the board, by key, deleted ones included) made at or before ``at``."""
        ...

    def board_history(
        self, tenant: str, board: str, key: str | None, *, after: int = 0, limit: int | None
    ) -> list[BoardRow]:
        """The changes of ``key`` after version ``after``, by version, or with ``key``
        None every change of the board, by time (then key, version); at most ``limit``."""
        ...

    def list_boards(self, tenant: str | None) -> list[BoardSummary]:
        """The boards of ``tenant`` (``''``: outside tenants; None: every tenant's), by
        tenant and name."""
        ...


def _row(r: Sequence[Any]) -> BoardRow:
    pos = None if r[6] is None else int(r[6])
    return BoardRow(r[0], r[1], r[2], int(r[3]), r[4], r[5], pos, r[7], float(r[8]))


class BoardRows:
    """:class:`BoardData` on a store's ``transaction()`` and ``dialect`` (a mixin of both
    backends)."""

    if TYPE_CHECKING:
        dialect: str

        def transaction(self) -> AbstractContextManager[Any]: ...

        def _rows_sql(self, file: str) -> dict[str, str]: ...

    def write_board(self, write: BoardWrite) -> BoardOutcome:
        q = self._rows_sql("boards")
        params: dict[str, Any] = {
            "tenant": write.tenant,
            "board": write.board,
            "key": write.key,
            "value": write.value,
            "run_id": write.run_id,
            "pos": write.pos,
            "actor": write.actor,
            "now": write.now,
        }
        with self.transaction() as conn:
            conn.execute(q["ensure_row"], params)
            version, held = conn.execute(q["lock_row"], params).fetchone()
            if write.run_id is not None:  # under the key's lock: a twin execution waits
                done = conn.execute(q["by_run"], params).fetchone()
                if done is not None:
                    return BoardOutcome(True, int(done[3]), replayed=True)
            if write.expected is not None and write.expected != version:
                return BoardOutcome(False, int(version), conflict=True)
            if write.value is None and not held:
                return BoardOutcome(False, int(version))
            params["version"] = version = int(version) + 1
            conn.execute(q["update_row"], params)
            conn.execute(q["insert_change"], params)
        return BoardOutcome(True, version)

    def read_board(self, tenant: str, board: str, key: str | None) -> list[BoardRow]:
        q = self._rows_sql("boards")
        params = {"tenant": tenant, "board": board, "key": key}
        with self.transaction() as conn:
            rows = conn.execute(q["board_values" if key is None else "get_value"], params)
            return [_row(r) for r in rows.fetchall()]

    def read_board_at(self, tenant: str, board: str, key: str | None, at: float) -> list[BoardRow]:
        q = self._rows_sql("boards")
        params = {"tenant": tenant, "board": board, "key": key, "at": at}
        with self.transaction() as conn:
            rows = conn.execute(q["values_at" if key is None else "value_at"], params)
            return [_row(r) for r in rows.fetchall()]

    def board_history(
        self, tenant: str, board: str, key: str | None, *, after: int = 0, limit: int | None
    ) -> list[BoardRow]:
        q = self._rows_sql("boards")
        cap = _NO_LIMIT if limit is None else limit
        params = {"tenant": tenant, "board": board, "key": key, "after": after, "limit": cap}
        with self.transaction() as conn:
            rows = conn.execute(q["board_history" if key is None else "key_history"], params)
            return [_row(r) for r in rows.fetchall()]

    def list_boards(self, tenant: str | None) -> list[BoardSummary]:
        with self.transaction() as conn:
            rows = conn.execute(self._rows_sql("boards")["list_boards"], {"tenant": tenant})
            return [BoardSummary(r[0], r[1], int(r[2]), float(r[3])) for r in rows.fetchall()]
