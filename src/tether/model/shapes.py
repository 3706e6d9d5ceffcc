"""The shape of each event type's data: what an event read from outside must hold.

:func:`check_event` checks one event of a run's log, as plain JSON (before the codec
decodes its tagged values): its type is one of :data:`tether.model.events.ALL_TYPES`, its
data an object whose fields have the types and bounds :func:`tether.model.state.fold`
relies on. Positions are bounded by the log (each position takes at least one event,
so a position above the log's length is forged), times are finite and plausible,
names follow :func:`tether.model.inputs.name`. Fields not listed here are carried as they
are (a newer tether may add some). :func:`tether.services.export.import_run` checks every
event this way before anything is written.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from tether.model import events as ev
from tether.model import inputs

EARLIEST = 946_684_800.0  # 2000-01-01: no tether event is older
LATEST_AHEAD = 366 * 86400.0  # a clock a year fast is still a clock; 1e308 is not
Check = Callable[[Any, "Bounds"], None]


class ShapeError(ValueError):
    """An event's data is not what its type needs; ``field`` names where."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"field {field!r}: {message}")
        self.field = field


class Bounds:
    """What an event's values are checked against: the log's length and the time now."""

    def __init__(self, events: int, now: float, seq: int) -> None:
        self.events = events
        self.now = now
        self.seq = seq


def _fail(message: str) -> None:
    raise ValueError(message)


def _int(value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(f"an int is needed, not {type(value).__name__}")
    if not low <= value <= high:
        _fail(f"{value} is outside {low}..{high}")


def pos(value: Any, b: Bounds) -> None:
    """A position: 1..the number of events (each position takes an event at least)."""
    _int(value, 1, b.events)


def count(value: Any, b: Bounds) -> None:
    """A count (attempts, epochs): 0..2^63-1."""
    _int(value, 0, inputs.INT64_MAX)


def name(value: Any, b: Bounds) -> None:
    """A name (step, agent, key): see tether.model.inputs."""
    inputs.name(value, "the value")


def text(value: Any, b: Bounds) -> None:
    """Free text (a reason, a digest, who): a str without NUL."""
    if not isinstance(value, str) or "\x00" in value:
        _fail(f"text without NUL is needed, not {type(value).__name__}")


def time(value: Any, b: Bounds) -> None:
    """A moment: finite, after 2000, at most a year past this machine's clock."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        _fail(f"a time (seconds since the epoch) is needed, not {type(value).__name__}")
    if not (math.isfinite(value) and EARLIEST <= value <= b.now + LATEST_AHEAD):
        _fail(f"{value!r} is not a plausible time (2000 .. a year from now)")


def seconds(value: Any, b: Bounds) -> None:
    """A duration in seconds: finite, not negative."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        _fail(f"seconds are needed, not {type(value).__name__}")
    if not (math.isfinite(value) and 0 <= value <= 1e10):
        _fail(f"{value!r} is not a plausible number of seconds")


def flag(value: Any, b: Bounds) -> None:
    """A bool."""
    if not isinstance(value, bool):
        _fail(f"true or false is needed, not {type(value).__name__}")


def obj(value: Any, b: Bounds) -> None:
    """A JSON object."""
    if not isinstance(value, dict):
        _fail(f"an object is needed, not {type(value).__name__}")


def anything(value: Any, b: Bounds) -> None:
    """Any JSON value (a step's output, a payload)."""


def prior_seq(value: Any, b: Bounds) -> None:
    """A seq before this event's (a fork's point)."""
    _int(value, 0, b.seq - 1)


def position_so_far(value: Any, b: Bounds) -> None:
    """A position the log may have reached (0: none)."""
    _int(value, 0, b.events)


def status(value: Any, b: Bounds) -> None:
    """A run status name."""
    inputs.name(value, "the status")


def risk(value: Any, b: Bounds) -> None:
    """A tool's risk."""
    if value not in ("read", "write", "irreversible"):
        _fail(f"read, write or irreversible is needed, not {value!r}")


def code(value: Any, b: Bounds) -> None:
    """Where code lives: module, qualname (and file) as strings; data, never executed."""
    obj(value, b)
    for key in ("module", "qualname", "file"):
        if key in value and not isinstance(value[key], str):
            _fail(f"{key} must be a str")


def run_input(value: Any, b: Bounds) -> None:
    """An agent's input: {"args": [...], "kwargs": {...}}."""
    obj(value, b)
    if not isinstance(value.get("args", []), list) or not isinstance(value.get("kwargs", {}), dict):
        _fail('{"args": [...], "kwargs": {...}} is needed')


def usage(value: Any, b: Bounds) -> None:
    """Model usage: token counts and a cost."""
    obj(value, b)
    for key in ("input_tokens", "output_tokens", "calls"):
        _int(value.get(key, 0), 0, inputs.INT64_MAX)
    cost = value.get("cost", 0.0)
    if isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost):
        _fail("cost must be a finite number")
    unknown = set(value) - {"input_tokens", "output_tokens", "calls", "cost"}
    if unknown:
        _fail(f"unknown usage fields {sorted(unknown)}")


def names(value: Any, b: Bounds) -> None:
    """A list of names (approvers)."""
    if not isinstance(value, list):
        _fail("a list of names is needed")
    for v in value:
        inputs.name(v, "each name")


def entries(value: Any, b: Bounds) -> None:
    """A list of objects."""
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        _fail("a list of objects is needed")


def stage(value: Any, b: Bounds) -> None:
    """What a contract's verdict judged: the arguments, the approval or the result."""
    if value not in ("args", "approval", "result"):
        _fail(f"args, approval or result is needed, not {value!r}")


def verdict(value: Any, b: Bounds) -> None:
    """What a contract decided of a call."""
    if value not in ("allow", "refuse", "escalate"):
        _fail(f"allow, refuse or escalate is needed, not {value!r}")


def texts(value: Any, b: Bounds) -> None:
    """A list of strings (a contract's shape problems)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        _fail("a list of strings is needed")


def opt(check: Check) -> Check:
    """``check``, or null."""

    def optional(value: Any, b: Bounds) -> None:
        if value is not None:
            check(value, b)

    return optional


STEP = {"pos": pos, "name": name}
# type -> (required fields, optional fields); every field a check of (value, bounds)
SHAPES: dict[str, tuple[Mapping[str, Check], Mapping[str, Check]]] = {
    ev.RUN_CREATED: (
        {"agent": name},
        {
            "version": opt(name),
            "input": run_input,
            "code": code,
            "queue": opt(name),
            "session": opt(name),
            "trace": opt(text),  # a W3C traceparent (tether.open(tracing=...))
            "limits": opt(obj),
            "caller": opt(obj),  # a child run's parent: {"run": id, "pos": position}
            "handoff": opt(obj),  # what a run handed off to got: from, pos, vars, …
        },
    ),
    ev.RUN_STARTED: ({}, {"by": opt(text), "epoch": count, "retry": flag}),
    ev.RUN_SUSPENDED: ({}, {"reason": opt(text), "status": status, "queue": opt(name)}),
    ev.RUN_COMPLETED: ({}, {"output": anything}),
    ev.RUN_FAILED: ({"error": obj}, {}),
    ev.RUN_FORKED: (
        {"parent": name, "seq": prior_seq, "position": position_so_far},
        {"input": opt(run_input), "vars": opt(obj)},
    ),
    ev.STEP_COMPLETED: (
        {**STEP, "kind": name},
        {
            "attempt": count,
            "digest": opt(text),
            "output": anything,
            "started": opt(time),
            "duration": opt(seconds),
            "usage": opt(usage),
            "key": opt(text),
            "why": opt(text),
            "detail": opt(obj),
        },
    ),
    ev.STEP_FAILED: (
        {**STEP, "kind": name, "attempt": count, "error": obj},
        {"retry_at": opt(time), "digest": opt(text), "key": opt(text)},
    ),
    ev.DECISION: (STEP, {"choice": anything, "why": anything, "details": opt(obj)}),
    ev.VAR_SET: ({**STEP, "key": name}, {"value": anything}),
    ev.VAR_DELETED: ({**STEP, "key": name}, {}),
    ev.TOOL_INTENT: (
        {**STEP, "kind": name, "key": text, "attempt": count},
        {
            "digest": opt(text),
            "risk": opt(risk),
            "of": opt(pos),
            "input": anything,
            "code": opt(code),
            "by": opt(text),  # a revert's: who reverted the call (tether.engine.revert)
            "reason": opt(text),
        },
    ),
    ev.TOOL_IN_DOUBT: ({**STEP, "key": text}, {}),
    ev.TOOL_PROPOSED: (
        {**STEP, "kind": name},
        {"digest": opt(text), "input": anything, "risk": opt(risk), "unstorable": opt(text)},
    ),
    ev.TOOL_VERDICT: (
        {**STEP, "on": stage, "verdict": verdict},
        {"rules": entries, "problems": texts, "message": opt(text), "by": opt(text)}
        | {"reason": opt(text), "key": opt(text)},
    ),
    ev.TOOL_RESOLVED: (
        {**STEP, "key": text, "happened": flag, "by": text},
        {"result": anything},
    ),
    ev.APPROVAL_REQUESTED: (
        STEP,
        {"payload": anything, "approvers": opt(names), "timeout_at": opt(time)},
    ),
    ev.APPROVAL_DECIDED: ({**STEP, "approved": flag, "by": text}, {"reason": opt(text)}),
    ev.TIMER_STARTED: ({**STEP, "until": time}, {"suspend": flag}),
    ev.WAIT_STARTED: (STEP, {"timeout_at": opt(time)}),
    ev.JOIN_STARTED: ({**STEP, "children": names}, {"kind": name, "inline": flag}),
    ev.RUN_COMPENSATING: (
        {"reason": text, "from_position": pos},
        {"error": opt(obj)},
    ),
    ev.BUDGET_EXCEEDED: (
        {**STEP, "limit": name, "on_exceeded": name},
        {"kind": name, "max": anything, "used": obj},
    ),
    ev.BUDGET_RAISED: ({"add": obj, "by": text}, {"reason": opt(text)}),
    ev.RUN_CANCELLED: (
        {},
        {"by": opt(text), "reason": opt(text), "compensation_failures": opt(entries)},
    ),
}
# a type of the vocabulary without a shape here (added by a newer change): its step
# fields, if any, are still checked, so a position cannot be forged through it
GENERIC: tuple[Mapping[str, Check], Mapping[str, Check]] = ({}, {"pos": pos, "name": name})


def check_event(type_: Any, data: Any, bounds: Bounds) -> None:
    """Raise ShapeError (naming the field) unless ``data`` fits event type ``type_``."""
    if not isinstance(type_, str) or type_ not in ev.ALL_TYPES:
        raise ShapeError("type", f"{type_!r} is not an event type of this tether")
    if not isinstance(data, dict):
        raise ShapeError("data", "an object is needed")
    required, optional = SHAPES.get(type_, GENERIC)
    for key, check in required.items():
        if key not in data:
            raise ShapeError(f"data.{key}", f"a {type_} event needs it")
        _check(key, check, data[key], bounds)
    for key, check in optional.items():
        if key in data:
            _check(key, check, data[key], bounds)


def _check(key: str, check: Check, value: Any, bounds: Bounds) -> None:
    try:
        check(value, bounds)
    except (ValueError, TypeError) as e:
        raise ShapeError(f"data.{key}", str(e)) from None
