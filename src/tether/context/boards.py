"""Boards: keyed, versioned state that several runs and plain code share.

::

    board = app.board("incident-42")
    value, version = board.get("owner")                 # None, 0: never written
    board.set("owner", "alice", expected_version=version)   # 1, or VersionConflict
    board.history("owner")                              # every change, oldest first
    board.get("owner", at=yesterday)                    # the value it had then

Each key has a version: 0 before its first write, then 1, 2, 3… without a gap, one per
change (a delete is a change too: the key then holds no value, and its version goes
on). ``set`` and ``delete`` with ``expected_version`` are a compare-and-set: when the key
is at another version, someone wrote it first, and VersionConflict (a Conflict) is
raised with nothing written; read it again and retry. Every change is stored with its
version, the run and step position that made it (inside a run) and who, and is never
changed afterwards: a board's history is its audit trail, and reading it ``at`` a time
is one query.

Inside a run use ``run.board(name)`` (:mod:`tether.engine.boards`): each read and write
is a journaled step, replayed from the run's log. A tenant's view
(``app.for_tenant(t).board(name)``, ``run.board`` of a tenant's run) sees only that
tenant's boards: the tenant is part of the stored key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tether.errors import InvalidInput, VersionConflict
from tether.model import codec, inputs
from tether.model.clock import Clock
from tether.store.board_rows import BoardData, BoardOutcome, BoardRow, BoardWrite

Guard = Callable[[str], None]
"""``guard(action)``: raises when the caller may not ``"read"`` or ``"write"`` a board."""


@dataclass(frozen=True, slots=True)
class BoardEntry:
    """A key's value at one version: ``value`` (None when it holds none), ``version`` (0:
    never written), who made that version (``run_id`` and ``position`` inside a run;
    ``by``) and when (``at``; None: never written). Unpacks as ``value, version``."""

    key: str
    value: Any
    version: int
    deleted: bool = False
    run_id: str | None = None
    position: int | None = None
    by: str | None = None
    at: float | None = None

    @property
    def exists(self) -> bool:
        """Whether the key holds a value at this version."""
        return self.version > 0 and not self.deleted

    def __iter__(self) -> Iterator[Any]:
        yield self.value
        yield self.version


def _allow(action: str) -> None:
    """The unscoped board's guard: everything is allowed."""


class Board:
    """One board of a store (see the module docstring). Get it as ``app.board(name)``."""

    def __init__(
        self,
        store: BoardData,
        clock: Clock,
        name: str,
        *,
        tenant: str | None = None,
        by: str | None = None,
        guard: Guard = _allow,
    ) -> None:
        self.store = store
        self.clock = clock
        self.name = inputs.name(name, "the board name")
        self.tenant = inputs.optional_name(tenant, "the tenant")
        self.by = by
        self._guard = guard

    def __repr__(self) -> str:
        return f"Board({self.name!r}" + (f", tenant={self.tenant!r})" if self.tenant else ")")

    # -- reading --------------------------------------------------------------------

    def get(self, key: str, *, at: float | None = None) -> BoardEntry:
        """The key's value and version (now, or at time ``at``: the newest change made at
        or before it). A key never written is ``BoardEntry(key, None, 0)``."""
        self._guard("read")
        key = _key(key)
        if at is None:
            rows = self.store.read_board(self._tenant, self.name, key)
        else:
            rows = self.store.read_board_at(self._tenant, self.name, key, _time(at))
        return self._entry(rows[0]) if rows else BoardEntry(key, None, 0)

    def items(self, *, at: float | None = None) -> dict[str, BoardEntry]:
        """Every key holding a value (now, or at time ``at``), by key."""
        self._guard("read")
        if at is None:
            rows = self.store.read_board(self._tenant, self.name, None)
        else:
            rows = self.store.read_board_at(self._tenant, self.name, None, _time(at))
        return {r.key: self._entry(r) for r in rows if r.value is not None}

    def history(
        self, key: str | None = None, *, after: int = 0, limit: int | None = None
    ) -> list[BoardEntry]:
        """The changes of ``key`` after version ``after``, oldest first, or with ``key``
        None every change of the board, by time; at most ``limit``."""
        self._guard("read")
        name = None if key is None else _key(key)
        after = inputs.integer(after, "after", low=0)
        if limit is not None:
            limit = inputs.integer(limit, "limit", low=1)
        rows = self.store.board_history(self._tenant, self.name, name, after=after, limit=limit)
        return [self._entry(r) for r in rows]

    # -- writing --------------------------------------------------------------------

    def set(
        self, key: str, value: Any, *, expected_version: int | None = None, by: str | None = None
    ) -> int:
        """Store ``value`` under ``key`` and return its new version. With
        ``expected_version``, only if the key is at that version (0: never written), else
        VersionConflict and nothing written. ``by``: who writes (recorded)."""
        data = codec.encode(value, what=f"board {self.name!r} key {key!r}")
        outcome = self.write(key, data, expected_version, by=by)
        return outcome.version

    def update(self, key: str, fn: Callable[[Any], Any], *, by: str | None = None) -> BoardEntry:
        """Read-modify-write: store ``fn(value)`` (``value``: None when the key holds none)
        with compare-and-set, reading again and calling ``fn`` again whenever another
        writer came first; returns what was written (``value, version``). Each try is
        a change only when it succeeds. ``fn`` raising writes nothing."""
        if not callable(fn):
            raise InvalidInput(
                f"board {self.name!r}: update needs a function of the value, not {fn!r}"
            )
        while True:
            value, version = self.get(key)
            new = fn(value)
            try:
                return BoardEntry(key, new, self.set(key, new, expected_version=version, by=by))
            except VersionConflict:
                continue

    def delete(
        self, key: str, *, expected_version: int | None = None, by: str | None = None
    ) -> int | None:
        """Delete ``key``'s value (a change: its version goes on) and return the new
        version; None when it held no value (nothing written). ``expected_version``: as
        :meth:`set`."""
        outcome = self.write(key, None, expected_version, by=by)
        return outcome.version if outcome.written else None

    def write(
        self,
        key: str,
        data: str | None,
        expected_version: int | None,
        *,
        by: str | None = None,
        run_id: str | None = None,
        position: int | None = None,
    ) -> BoardOutcome:
        """The write under :meth:`set` and :meth:`delete`: ``data`` JSON text (None:
        delete); a run's writes name its ``run_id`` and ``position`` (written once).
        Raises VersionConflict on a conflict."""
        self._guard("write")
        key = _key(key)
        if expected_version is not None:
            expected_version = inputs.integer(expected_version, "expected_version", low=0)
        write = BoardWrite(
            self._tenant,
            self.name,
            key,
            data,
            expected_version,
            self.clock.now(),
            run_id=run_id,
            pos=position,
            actor=by if by is not None else self.by,
        )
        outcome = self.store.write_board(write)
        if outcome.conflict:
            raise self.conflict(key, expected_version or 0, outcome.version)
        return outcome

    def conflict(self, key: str, expected: int, version: int) -> VersionConflict:
        """The error of a compare-and-set that found ``key`` at ``version``."""
        return VersionConflict(
            f"board {self.name!r} key {key!r} is at version {version}, not {expected}: "
            f"someone wrote it first and nothing was written; read it again (get) and retry",
            board=self.name,
            key=key,
            expected=expected,
            version=version,
        )

    # -- rows -----------------------------------------------------------------------

    @property
    def _tenant(self) -> str:
        return self.tenant or ""

    def _entry(self, r: BoardRow) -> BoardEntry:
        value = None if r.value is None else codec.decode(r.value, where=self._where(r))
        at = r.at if r.version > 0 else None
        deleted = r.value is None and r.version > 0
        return BoardEntry(r.key, value, r.version, deleted, r.run_id, r.pos, r.actor, at)

    def _where(self, r: BoardRow) -> str:
        return f"board {self.name!r} key {r.key!r} version {r.version}"


def _key(key: Any) -> str:
    return inputs.name(key, "a board key")


def _time(at: Any) -> float:
    return inputs.seconds(at, "at")
