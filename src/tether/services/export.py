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

An export file is data from outside: import checks all of it before it writes
anything, and refuses (ValueError naming the line, the seq and the field) what a
genuine export never holds:

- the header: the format and a version this tether reads, an event count of 1 to
  :data:`MAX_EVENTS`, a run row of known fields with values of the right types
  (names and ids follow :mod:`tether.model.inputs`: no NUL, no newline, no ``../``, no
  1 MB id);
- every event: contiguous seqs from 1, as many as announced; a type of the
  vocabulary and data of its shape (:mod:`tether.model.shapes`: positions bounded by the
  log's length, finite and plausible times, names as the API takes them); values
  that decode (a tagged Decimal, bytes or date that does not is refused) and hold no
  unpaired surrogate; one ``run.created``, first; and a log that folds;
- the row against the log: the header's agent, version, code and lineage must be
  what the log says, and its status must agree with the log's (a ``completed`` row
  over a ``running`` log is refused).

The new row is derived from the log, never taken from the file: agent, version, code
and lineage from the events; status from the fold (a finished run keeps its status;
any other is imported ``queued``: no process of this store executes it, and
``resume``, or a worker of its queue, replays it to where it was); its queue from its
``run.created``. From the header come only the id (refused if it exists: import with
``new_id=True`` for a fresh one, which also drops the queue's dedup key, as the copy
is another run), its priority, dedup and concurrency keys, and its last change
(``updated_at``, which ``gc --older-than`` counts from) when that is a plausible
time, else the last event's. An imported run belongs to no session and no owner
(tenant) of this store: a file cannot place a run in someone's conversation. The
run and its events are written in one transaction of the store, or nothing is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import asdict, replace
from typing import Any, TextIO

from tether.engine.deps import Deps
from tether.engine.states import States
from tether.errors import Conflict
from tether.model import codec, inputs, integrity, shapes
from tether.model import events as ev
from tether.model.clock import new_run_id
from tether.model.events import Event, NewEvent
from tether.model.state import RunState, fold
from tether.model.status import FINISHED, RunStatus
from tether.services.timetravel import cache_snapshot
from tether.store import NewRun, Store
from tether.version import __version__

FORMAT = "tether-run"
FORMAT_VERSION = 1
MAX_EVENTS = 10_000_000  # events in one run's export
MAX_LINE = 64 * 2**20  # characters in one line (a large value belongs in an artifact)
_LEASE_FIELDS = ("epoch", "lease_owner", "lease_expires")
_ACTIVE = (RunStatus.RUNNING, RunStatus.WAITING)
# Event data is stored as the codec writes it (codec.dumps); an export line is ASCII-only,
# so that no transport or line splitter (U+2028, U+0085…) can break a line.
_line = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode


def export_lines(store: Store, run_id: str) -> Iterator[str]:
    """The run as ``tether-run`` JSON lines (without newlines): the header, then its events."""
    record = store.get_run(run_id)
    events = store.read_events(run_id)
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


def export_run(store: Store, run_id: str, out: TextIO) -> int:
    """Write the run to ``out`` as ``tether-run`` JSON lines; return how many events."""
    written = 0
    for line in export_lines(store, run_id):
        out.write(line + "\n")
        written += 1
    return written - 1  # the header is not an event


def import_run(
    deps: Deps,
    states: States,
    lines: Iterable[str],
    *,
    new_id: bool = False,
    source: str = "<input>",
    secret_env: Collection[str] = (),
) -> str:
    """Create a run from ``tether-run`` JSON lines; return its id.

    Everything is checked before anything is written (see the module docstring);
    raises ValueError naming ``source``, the line and the field, and Conflict when the
    id exists (unless ``new_id``). Nothing is written on error. A ``Secret.env``
    reference in the file is refused unless ``secret_env`` names its variable: the file
    would otherwise choose which of this process's environment variables the run's
    code is given (the file is data; what it may read is the operator's choice).
    """
    numbered = ((n, line) for n, line in enumerate(_bounded(source, lines), 1) if line.strip())
    header = _header(source, next(numbered, (1, "")))
    now = deps.clock.now()
    raw = _raw_events(source, numbered, header["events"])
    events = _checked_events(source, raw, now)
    _allowed_secret_env(source, raw, frozenset(secret_env))
    state = _fold(source, header["run"]["id"], events)
    run = _derived_run(source, header["run"], raw, state, new_id, now)
    _create(deps, run, events, _updated_at(header["run"], events, now))
    cache_snapshot(states, replace(state, run_id=run.id))
    if run.queue is not None and run.status == RunStatus.QUEUED:
        deps.store.notify_work(run.queue)  # a worker of its queue takes it now
    return run.id


def _allowed_secret_env(
    source: str, raw: list[tuple[int, dict[str, Any]]], allowed: frozenset[str]
) -> None:
    """Refuse a ``Secret.env`` marker naming a variable not in ``allowed``. The codec
    stores a plain mapping with a ``$t`` key under its own ``dict`` tag, so every
    ``{"$t": "secret"}`` mapping in a file is a marker the codec would decode."""
    for n, d in raw:
        for var in _env_references(d.get("data")):
            if var not in allowed:
                raise ValueError(
                    f"{source} line {n} (seq {d['seq']}): a Secret.env reference to the "
                    f"environment variable {var!r}: imported, the run would be given this "
                    f"process's value of it. If you trust the file, name the variables it "
                    f"may read: `tether import --secret-env {var}` "
                    f"(app.import_run(..., secret_env=[{var!r}])); nothing was written"
                )


def _bounded(source: str, lines: Iterable[str]) -> Iterator[str]:
    """``lines``, read from a file at most MAX_LINE characters at a time: a file's own
    iteration reads a line whole, and a stream with no newline (``/dev/zero``, a binary
    file) would be read until memory runs out."""
    read = getattr(lines, "readline", None)
    if read is None:  # lines already in memory: _json checks each one's length
        yield from lines
        return
    n = 0
    while line := read(MAX_LINE + 1):
        n += 1
        if len(line) > MAX_LINE:
            raise ValueError(
                f"{source} line {n}: more than {MAX_LINE} characters; a line holds {MAX_LINE} "
                f"at most (is it a tether run export? `tether export` makes one)"
            )
        yield line


def _env_references(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        inner = value.get("v")
        if value.get("$t") == "secret" and isinstance(inner, dict) and "env" in inner:
            yield str(inner["env"])
        for item in value.values():
            yield from _env_references(item)
    elif isinstance(value, list):
        for item in value:
            yield from _env_references(item)


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
    if (
        isinstance(version, bool)
        or not isinstance(version, int)
        or not 1 <= version <= FORMAT_VERSION
    ):
        raise ValueError(
            f"{source} line {n}: export format version {version!r} is not one "
            f"this tether reads (1..{FORMAT_VERSION}); upgrade tether"
        )
    if not isinstance(head.get("run"), dict) or not isinstance(head["run"].get("id"), str):
        raise ValueError(f'{source} line {n}: the header has no "run" object with an "id"')
    count = head.get("events")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_EVENTS:
        raise ValueError(
            f'{source} line {n}: field "events": the header announces {count!r} events; a '
            f"run has 1..{MAX_EVENTS}"
        )
    _check_row_fields(source, head["run"])
    return head


def _check_row_fields(source: str, row: dict[str, Any]) -> None:
    """The header's row: known fields of the right types (its values are checked
    against the log, or replaced by what the log says, later)."""
    unknown = sorted(set(row) - set(_ROW_FIELDS))
    if unknown:
        raise ValueError(f"{source} line 1: the header's run has unknown fields {unknown}")
    for key, check in _ROW_FIELDS.items():
        if row.get(key) is None:
            continue
        try:
            check(row[key], f"run.{key}")
        except (ValueError, TypeError) as e:
            raise ValueError(f"{source} line 1: field 'run.{key}': {e}") from None


def _json(source: str, n: int, line: str) -> dict[str, Any]:
    if len(line) > MAX_LINE:
        raise ValueError(
            f"{source} line {n}: {len(line)} characters; a line holds {MAX_LINE} at most"
        )
    try:
        value = json.loads(line, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError(f"{source} line {n}: JSON nested too deep to read") from None
    except ValueError as e:
        raise ValueError(f"{source} line {n}: not JSON ({e})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{source} line {n}: expected a JSON object, found {line[:60]!r}")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (an export never holds one)")


def _raw_events(
    source: str, numbered: Iterator[tuple[int, str]], announced: int
) -> list[tuple[int, dict[str, Any]]]:
    """The event lines as JSON objects with contiguous seqs, as many as announced."""
    out: list[tuple[int, dict[str, Any]]] = []
    for expected, (n, line) in enumerate(numbered, 1):
        if expected > announced:
            raise ValueError(
                f"{source}: the header announces {announced} events but the file holds "
                f"more (line {n}); the export is damaged"
            )
        d = _json(source, n, line)
        if d.get("seq") != expected or isinstance(d.get("seq"), bool):
            raise ValueError(
                f"{source} line {n}: seq {d.get('seq')!r} where seq {expected} was expected; "
                f"a run's events are contiguous from 1 (lines missing or reordered?)"
            )
        out.append((n, d))
    if len(out) != announced:
        raise ValueError(
            f"{source}: the header announces {announced} events but the "
            f"file holds {len(out)}; the export is truncated or damaged"
        )
    return out


def _checked_events(
    source: str, raw: list[tuple[int, dict[str, Any]]], now: float
) -> list[NewEvent]:
    events = []
    for n, d in raw:
        try:
            events.append(_event(d, shapes.Bounds(len(raw), now, d["seq"])))
        except ValueError as e:
            raise ValueError(f"{source} line {n} (seq {d['seq']}): {e}") from None
    first = raw[0][1]["type"]
    if first != ev.RUN_CREATED or any(d["type"] == ev.RUN_CREATED for _, d in raw[1:]):
        raise ValueError(
            f"{source}: a run's log starts with its one run.created event (seq 1 is {first!r})"
        )
    return events


def _event(d: dict[str, Any], bounds: shapes.Bounds) -> NewEvent:
    unknown = sorted(set(d) - {"seq", "type", "data", "at", "actor"})
    if unknown:
        raise ValueError(f"unknown fields {unknown}; an event has seq, type, data, at, actor")
    shapes.check_event(d.get("type"), d.get("data"), bounds)
    try:
        shapes.time(d.get("at"), bounds)
        if d.get("actor") is not None:
            shapes.text(d["actor"], bounds)
            inputs.text(d["actor"], "actor")
    except (ValueError, TypeError) as e:
        raise shapes.ShapeError("at" if "time" in str(e) else "actor", str(e)) from None
    _no_surrogates(d["data"])
    text = codec.dumps(d["data"])
    try:
        codec.decode(text)
    except Exception as e:  # a tagged value that does not decode: any error is the file's
        raise shapes.ShapeError(
            "data", f"a tagged value does not decode ({type(e).__name__}: {e})"
        ) from None
    return NewEvent(d["type"], text, float(d["at"]), d.get("actor"))


def _no_surrogates(data: Any) -> None:
    """Refuse unpaired surrogates anywhere in ``data`` (no database can store them)."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise shapes.ShapeError(
                    "data", "holds an unpaired surrogate (not valid Unicode)"
                ) from None


def _fold(source: str, run_id: str, events: list[NewEvent]) -> RunState:
    try:
        return fold(
            [Event(run_id, i, e.type, e.data, e.at, e.actor) for i, e in enumerate(events, 1)],
            run_id=run_id,
        )
    except Exception as e:  # checked shapes fold; anything left is the file's, never a crash
        raise ValueError(
            f"{source}: the events do not fold into a run state "
            f"({type(e).__name__}: {e}); the export is damaged"
        ) from None


def _derived_run(
    source: str,
    row: dict[str, Any],
    raw: list[tuple[int, dict[str, Any]]],
    state: RunState,
    new_id: bool,
    now: float,
) -> NewRun:
    """The run's row as its log says: agent, version, code, status and lineage from the
    events; from the header only its id and its queue placement."""
    created = raw[0][1]["data"]
    forks = [d["data"] for _, d in raw if d["type"] == ev.RUN_FORKED]
    derived = {
        "agent": created["agent"],
        "version": created.get("version"),
        "code": created.get("code") or {},
        "parent_id": forks[-1]["parent"] if forks else None,
        "fork_seq": forks[-1]["seq"] if forks else None,
    }
    for key, value in derived.items():
        if key in row and row[key] != value:
            raise ValueError(
                f"{source} line 1: field 'run.{key}' is {_cut(row[key])} but the log says "
                f"{_cut(value)}; the export was altered"
            )
    status = str(row.get("status") or state.status)
    if not integrity.agrees(status, state.status):
        raise ValueError(
            f"{source} line 1: field 'run.status' is {status!r} but the log says the run is "
            f"{state.status}; the export was altered or is incomplete"
        )
    try:
        run_id = new_run_id(now) if new_id else inputs.run_id(row["id"], "run.id")
    except ValueError as e:
        raise ValueError(f"{source} line 1: field 'run.id': {e}") from None
    return NewRun(
        run_id,
        status=state.status if state.status in FINISHED else RunStatus.QUEUED,
        queue=created.get("queue"),
        priority=int(row.get("priority") or 0),
        dedup_key=None if new_id else row.get("dedup_key"),
        concurrency_key=row.get("concurrency_key"),
        **derived,
    )


def _updated_at(row: dict[str, Any], events: list[NewEvent], now: float) -> float:
    """The row's last change: the header's, if plausible, else the last event's time."""
    at, last = row.get("updated_at"), events[-1].at
    if isinstance(at, bool) or not isinstance(at, float | int):
        return last
    return float(at) if last <= at <= now + shapes.LATEST_AHEAD else last


def _cut(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 60 else text[:57] + "..."


def _create(deps: Deps, run: NewRun, events: list[NewEvent], at: float) -> None:
    try:
        deps.store.create_run(run, events, lease_owner=None, now=at, ttl=deps.lease_ttl)
    except Conflict:
        raise Conflict(
            f"run {run.id} already exists in this store; import it with --new-id "
            f"(new_id=True) to give the copy a fresh id"
        ) from None


def _seconds(value: Any, what: str) -> None:
    inputs.seconds(value, what)


def _mapping(value: Any, what: str) -> None:
    if not isinstance(value, dict):
        raise TypeError(f"{what} must be an object")


_ROW_FIELDS: dict[str, Callable[[Any, str], Any]] = {
    "id": inputs.lookup_id,
    "agent": inputs.name,
    "version": inputs.name,
    "status": inputs.name,
    "code": _mapping,
    "created_at": _seconds,
    "updated_at": _seconds,
    "epoch": lambda v, w: inputs.integer(v, w, low=0),
    "lease_owner": inputs.name,
    "lease_expires": _seconds,
    "parent_id": inputs.lookup_id,
    "fork_seq": lambda v, w: inputs.integer(v, w, low=0),
    "session_id": inputs.name,
    "owner": inputs.name,
    "queue": inputs.name,
    "priority": inputs.integer,
    "available_at": _seconds,
    "waiting_for": inputs.name,
    "cancel_requested": lambda v, w: inputs.integer(v, w, low=0, high=2),
    "dedup_key": inputs.name,
    "concurrency_key": inputs.name,
    "claimed_at": _seconds,
}
