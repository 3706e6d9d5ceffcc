"""``run.board(name)``: a board (:mod:`tether.context.boards`) read and written from a run,
each call a journaled step.

``get``, ``items``, ``set`` and ``delete`` are steps named ``board NAME get KEY`` (…),
so a replay returns what the log recorded and never reads or writes the board again. A
write names the run and its position: when a crash comes after the board's commit and
before the step's record, the step runs again and the store finds the change that
position made (``replayed``) instead of writing a second one. A compare-and-set that
finds the key moved is recorded as such (the step's result, not a failure) and raised
as VersionConflict, on replay too: the agent catches it and re-reads, and every read
and retry is a step of its own::

    board = run.board("incident-42")
    while True:
        count, version = board.get("count")
        try:
            board.set("count", (count or 0) + 1, expected_version=version)
            break
        except tether.VersionConflict:
            continue  # someone wrote first: read again

An ``async def`` agent awaits each call.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from tether.context.boards import Board, BoardEntry
from tether.engine.calls import current_step
from tether.errors import InvalidInput, VersionConflict
from tether.model import codec, inputs


class Stepper(Protocol):
    """What a board needs of the run: its journaled step, and whether it is awaited."""

    awaited: bool

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...


def _step_name(board: str, op: str, key: str | None) -> str:
    name = f"board {board} {op}" + ("" if key is None else f" {key}")
    if len(name) <= inputs.NAME_MAX:
        return name
    short = hashlib.sha256(name.encode()).hexdigest()[:16]  # a long board or key name
    return f"board {board[:100]} {op} …{short}"


def _entry(data: dict[str, Any]) -> BoardEntry:
    return BoardEntry(**data)


class RunBoard:
    """A board as a run sees it (see the module docstring): ``get``, ``items``, ``set``
    and ``delete``, each a journaled step (an awaitable in an ``async def`` agent)."""

    def __init__(self, run: Stepper, board: Board) -> None:
        self._run = run
        self.board = board
        self.name = board.name

    def __repr__(self) -> str:
        return f"RunBoard({self.board!r})"

    def get(self, key: str) -> Any:
        """The key's :class:`BoardEntry` (value and version), as a step."""
        return self._call(_step_name(self.name, "get", key), self._get, (key,), _entry)

    def items(self) -> Any:
        """Every key holding a value: ``{key: BoardEntry}``, as a step."""
        return self._call(_step_name(self.name, "items", None), self._items, (), _entries)

    def set(self, key: str, value: Any, *, expected_version: int | None = None) -> Any:
        """Store ``value`` under ``key`` as a step; returns the new version. With
        ``expected_version``: a compare-and-set, VersionConflict when the key moved."""
        data = codec.encode(value, what=f"board {self.name!r} key {key!r}")
        name = _step_name(self.name, "set", key)
        return self._call(name, self._write, (key, data, expected_version), self._outcome)

    def update(self, key: str, fn: Callable[[Any], Any]) -> Any:
        """Read-modify-write (see :meth:`Board.update`): a ``get`` step, then a ``set`` step
        with compare-and-set of ``fn(value)``, again from the read when another writer came
        first. ``fn`` runs outside the steps, on the value the log recorded: keep it a pure
        function of the value, so that a replay computes what the first execution wrote."""
        if not callable(fn):
            raise InvalidInput(
                f"board {self.name!r}: update needs a function of the value, not {fn!r}"
            )
        if self._run.awaited:
            return self._aupdate(key, fn)
        while True:
            value, version = self.get(key)
            new = fn(value)
            try:
                return BoardEntry(key, new, self.set(key, new, expected_version=version))
            except VersionConflict:
                continue

    async def _aupdate(self, key: str, fn: Callable[[Any], Any]) -> BoardEntry:
        while True:
            value, version = await self.get(key)
            new = fn(value)
            try:
                return BoardEntry(key, new, await self.set(key, new, expected_version=version))
            except VersionConflict:
                continue

    def delete(self, key: str, *, expected_version: int | None = None) -> Any:
        """Delete ``key``'s value as a step; returns the new version (None: it held none)."""
        name = _step_name(self.name, "delete", key)
        return self._call(name, self._write, (key, None, expected_version), self._outcome)

    # -- the steps' functions (run once; their results are recorded) ------------------

    def _get(self, key: str) -> dict[str, Any]:
        return _plain(self.board.get(key))

    def _items(self) -> dict[str, dict[str, Any]]:
        return {k: _plain(e) for k, e in self.board.items().items()}

    def _write(self, key: str, data: str | None, expected: int | None) -> dict[str, Any]:
        step = current_step()
        try:
            outcome = self.board.write(
                key, data, expected, run_id=step.run_id, position=step.position
            )
        except VersionConflict as e:  # a result to record, raised by _outcome (on replay too)
            return {"key": key, "conflict": e.version, "expected": e.expected}
        return {"key": key, "version": outcome.version if outcome.written else None}

    def _outcome(self, recorded: dict[str, Any]) -> int | None:
        if "conflict" in recorded:
            raise self.board.conflict(recorded["key"], recorded["expected"], recorded["conflict"])
        version: int | None = recorded["version"]
        return version

    def _call(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        then: Callable[[Any], Any],
    ) -> Any:
        result = self._run.step(name, fn, *args)
        if self._run.awaited:
            return _then(result, then)
        return then(result)


async def _then(result: Awaitable[Any], then: Callable[[Any], Any]) -> Any:
    return then(await result)


def _plain(e: BoardEntry) -> dict[str, Any]:
    return {
        "key": e.key,
        "value": e.value,
        "version": e.version,
        "deleted": e.deleted,
        "run_id": e.run_id,
        "position": e.position,
        "by": e.by,
        "at": e.at,
    }


def _entries(data: dict[str, dict[str, Any]]) -> dict[str, BoardEntry]:
    return {k: _entry(v) for k, v in data.items()}
