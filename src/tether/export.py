"""Export a run to JSON lines and import it into any tether store.

The format, ``tether-run`` version 1, is one JSON object per line::

    {"format": "tether-run", "version": 1, "tether": "0.1.0", "events": 12,
     "run": {"id": …, "agent": …, "version": …, "status": …, "code": {…}, …}}
    {"seq": 1, "type": "run.created", "data": {…}, "at": 1700000000.0, "actor": null}
    {"seq": 2, …}

The first line is the header (the run's row; leases are not exported: they belong to
a process of the source store). Then every event of the run, in seq order, with its
data as JSON (exactly the stored text, re-read). Snapshots are not exported: they
are a cache, rebuilt from the events.

Import refuses, naming the line: a missing or foreign header, a newer format
version, a malformed event, a seq that does not follow the previous one, an event
count different from the header's. It refuses an id that already exists (import
with ``new_id=True`` to give the run a fresh id; the copy then drops the queue's dedup
key, as it is another run). The run row keeps its status, except that a run exported
while running or waiting is imported queued (no process of the new store executes
it; ``resume``, or a worker of its queue, replays it to where it was). The row's times
are both the export's ``updated_at`` (the last change, which ``gc --older-than``
counts from); the creation time stays in the run's first event, as in every run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, TextIO

from . import codec
from .clock import new_run_id
from .errors import Conflict
from .events import Event, NewEvent
from .state import RunState, fold
from .store import NewRun
from .timetravel import cache_snapshot

if TYPE_CHECKING:
    from .app import App

FORMAT = "tether-run"
FORMAT_VERSION = 1
_LEASE_FIELDS = ("epoch", "lease_owner", "lease_expires")
_ACTIVE = ("running", "waiting")
# Event data is stored as the codec writes it (codec.dumps); an export line is ASCII-only,
# so that no transport or line splitter (U+2028, U+0085…) can break a line.
_line = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode


def export_lines(app: App, run_id: str) -> Iterator[str]:
    """The run as ``tether-run`` JSON lines (without newlines): the header, then its events."""
    from . import __version__

    record = app.store.get_run(run_id)
    events = app.store.read_events(run_id)
    row = {k: v for k, v in asdict(record).items() if k not in _LEASE_FIELDS}
    yield _line(
        {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "tether": __version__,
            "events": len(events),
            "run": row,
        }
    )
    for e in events:
        yield _line(
            {"seq": e.seq, "type": e.type, "data": json.loads(e.data), "at": e.at, "actor": e.actor}
        )


def export_run(app: App, run_id: str, out: TextIO) -> int:
    """Write the run to ``out`` as ``tether-run`` JSON lines; return how many events."""
    written = 0
    for line in export_lines(app, run_id):
        out.write(line + "\n")
        written += 1
    return written - 1  # the header is not an event


def import_run(
    app: App, lines: Iterable[str], *, new_id: bool = False, source: str = "<input>"
) -> str:
    """Create a run from ``tether-run`` JSON lines; return its id.

    Raises ValueError (naming ``source`` and the line) for a malformed export, and
    Conflict when the id exists (unless ``new_id``). Nothing is written on error.
    """
    numbered = ((n, line) for n, line in enumerate(lines, 1) if line.strip())
    header = _header(source, next(numbered, (1, "")))
    events = [_event(source, n, line, expected) for expected, (n, line) in enumerate(numbered, 1)]
    if header.get("events", len(events)) != len(events):
        raise ValueError(
            f"{source}: the header announces {header['events']} events but the "
            f"file holds {len(events)}; the export is truncated or damaged"
        )
    run = _new_run(source, header["run"], new_id, app.clock.now())
    state = _fold(source, run.id, events)
    _create(app, run, events, header["run"].get("updated_at"))
    cache_snapshot(app, state)
    if run.queue is not None and run.status == "queued":
        app.store.notify_work(run.queue)  # a worker of its queue takes it now
    return run.id


def _header(source: str, numbered: tuple[int, str]) -> dict[str, Any]:
    n, line = numbered
    if not line:
        raise ValueError(f"{source} is empty; a tether run export starts with its header line")
    head = _json(source, n, line)
    if head.get("format") != FORMAT:
        raise ValueError(
            f"{source} line {n}: not a tether run export (its first line must be "
            f'the header with "format": "{FORMAT}"); make one with `tether export`'
        )
    version = head.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
        raise ValueError(
            f"{source} line {n}: export format version {version!r} is not one "
            f"this tether reads (1..{FORMAT_VERSION}); upgrade tether"
        )
    if not isinstance(head.get("run"), dict) or not isinstance(head["run"].get("id"), str):
        raise ValueError(f'{source} line {n}: the header has no "run" object with an "id"')
    return head


def _json(source: str, n: int, line: str) -> dict[str, Any]:
    try:
        value = json.loads(line, parse_constant=_no_constant)
    except ValueError as e:
        raise ValueError(f"{source} line {n}: not JSON ({e})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{source} line {n}: expected a JSON object, found {line[:60]!r}")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (an export never holds one)")


def _event(source: str, n: int, line: str, expected: int) -> NewEvent:
    d = _json(source, n, line)
    seq = d.get("seq")
    if seq != expected:
        raise ValueError(
            f"{source} line {n}: seq {seq!r} where seq {expected} was expected; "
            f"a run's events are contiguous from 1 (lines missing or reordered?)"
        )
    ok = (
        isinstance(d.get("type"), str)
        and isinstance(d.get("data"), dict)
        and isinstance(d.get("at"), (int, float))
        and not isinstance(d.get("at"), bool)
        and (d.get("actor") is None or isinstance(d.get("actor"), str))
    )
    if not ok:
        raise ValueError(
            f"{source} line {n}: an event needs seq (int), type (str), data "
            f"(object), at (number) and actor (str or null)"
        )
    return NewEvent(d["type"], codec.dumps(d["data"]), float(d["at"]), d.get("actor"))


def _new_run(source: str, row: dict[str, Any], new_id: bool, now: float) -> NewRun:
    fields = set(NewRun.__dataclass_fields__)
    values = {k: v for k, v in row.items() if k in fields}
    if values.get("status") in _ACTIVE:
        values["status"] = "queued"  # no process of this store executes it: resume does
    if new_id:
        values["id"] = new_run_id(now)
        values.pop("dedup_key", None)  # a copy is another run: it must not take the key
    try:
        return NewRun(**values)
    except TypeError as e:
        raise ValueError(f"{source} line 1: the header's run row is incomplete ({e})") from None


def _fold(source: str, run_id: str, events: list[NewEvent]) -> RunState:
    try:
        return fold(
            [Event(run_id, i, e.type, e.data, e.at, e.actor) for i, e in enumerate(events, 1)],
            run_id=run_id,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(
            f"{source}: the events do not fold into a run state "
            f"({type(e).__name__}: {e}); the export is damaged"
        ) from None


def _create(app: App, run: NewRun, events: list[NewEvent], updated_at: Any) -> None:
    at = float(updated_at) if isinstance(updated_at, (int, float)) else app.clock.now()
    try:
        app.store.create_run(run, events, lease_owner=None, now=at, ttl=app.lease_ttl)
    except Conflict:
        raise Conflict(
            f"run {run.id} already exists in this store; import it with --new-id "
            f"(new_id=True) to give the copy a fresh id"
        ) from None
