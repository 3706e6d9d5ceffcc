"""Task variables (``run.vars``): a mapping whose reads are local and whose every write
and delete is journaled by position (``var.set``, ``var.deleted``)."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

from tether.engine.calls import Slot
from tether.engine.journal import Journal
from tether.errors import EncodeError
from tether.model import events as ev


class Vars(MutableMapping[str, Any]):
    """Task variables: reads are local, every write and delete is journaled by position."""

    def __init__(self, journal: Journal) -> None:
        self._j = journal
        self._data = journal.vars

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._data[key] = value  # before the write: a fork's edits applied at it win
        self._write(ev.VAR_SET, key, value)

    def __delitem__(self, key: str) -> None:
        if key not in self._data:
            raise KeyError(key)
        del self._data[key]
        self._write(ev.VAR_DELETED, key, None)

    def _write(self, type_: str, key: str, value: Any) -> None:
        if not isinstance(key, str) or not key:
            raise TypeError(
                f"run {self._j.run_id}: task variable names are non-empty str, not {key!r}"
            )
        slot = self._j.slot("var", f"vars.{key}")
        if self._j.trace is not None:  # a span (replayed: marked so)
            self._j.trace.gate(slot, lambda: self._record(slot, type_, key, value))
        else:
            self._record(slot, type_, key, value)

    def _record(self, slot: Slot, type_: str, key: str, value: Any) -> None:
        if slot.done:
            return
        data = {"pos": slot.pos, "name": slot.name, "key": key, "value": value}
        try:
            event = self._j.event(type_, data)
        except EncodeError as e:
            raise EncodeError(
                f"run {self._j.run_id}: task variable {key!r} (position {slot.pos}) cannot be "
                f"stored: {e.type_name} at {e.path.replace('$.value', '$', 1)}",
                path=e.path,
                type_name=e.type_name,
            ) from None
        self._j.append([event])
        self._j.executed.append((slot.pos, slot.name))

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"Vars({self._data!r})"
