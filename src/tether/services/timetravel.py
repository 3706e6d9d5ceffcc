"""Time travel: the log as a debugger. History, the state at any point, diffs and forks.

A *point* in a run is a seq of its log (``at=``) or a step (``step=``: its
position, or its name), taken ``when="after"`` (the default: the state once the
step completed) or ``when="before"`` (the state just before the step's first
event). The state at a point is :meth:`tether.App.load` with ``upto=seq``: the
newest snapshot at or before it plus a fold of the rest, so reading any point
costs the events since the nearest snapshot, not the whole log.

A fork is a new run whose log starts as a verbatim copy of the parent's events
``1..seq`` followed by one ``run.forked`` event (new input and edited task
variables, if any). Forks are self-contained: they share nothing with the parent,
so a parent may be deleted, exported or garbage-collected without harm to its
forks; forking a run that is executing right now copies a consistent prefix of an
append-only log and never touches the parent.

The diff compares plain-data views (:func:`view`) of two states; see :data:`IGNORED`
for the bookkeeping it leaves out.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from tether.engine import effects
from tether.engine.deps import Deps
from tether.engine.states import States
from tether.errors import EncodeError, InvalidInput, InvalidState, NotFound, TetherError
from tether.model import codec, inputs, integrity
from tether.model import events as ev
from tether.model.clock import new_run_id
from tether.model.events import Event, NewEvent
from tether.model.state import RunState, fold, to_data
from tether.model.status import RunStatus, StepStatus
from tether.model.steps import StepState
from tether.store import NewRun, RunRecord, Store, snapshots

log = logging.getLogger("tether")

When = Literal["before", "after"]
StepRef = int | str  # a step: its position (1-based) or its name ("name#2": the 2nd of that name)
PathKey = str | int


# -- history ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One event of a run's log, decoded: where it falls (position, step name) and its data."""

    seq: int
    type: str
    at: float
    actor: str | None
    position: int | None
    name: str | None
    data: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class History:
    """A run's row, every event with its seq, its steps (each with the seq that last
    changed it) and its reverts."""

    run: RunRecord
    entries: tuple[HistoryEntry, ...]
    steps: Sequence[StepState]
    reverts: tuple[StepState, ...] = ()  # its reverts (tether.engine.revert), by position


def history(store: Store, run_id: str) -> History:
    """The run's events and steps. Raises NotFound for an unknown run, RunDamaged for a
    log with gaps or a row it disagrees with."""
    record = store.get_run(run_id)
    events = store.read_events(run_id)
    integrity.check_events(run_id, events, 0)
    state = fold(events, run_id=run_id)
    integrity.check_row(run_id, record.status, state.status, state.seq)
    return History(record, tuple(_entry(e) for e in events), state.steps, state.reverts)


def _entry(e: Event) -> HistoryEntry:
    d = e.payload()
    pos = d.get("pos")
    return HistoryEntry(
        e.seq,
        e.type,
        e.at,
        e.actor,
        pos if isinstance(pos, int) else None,
        d.get("name") if isinstance(pos, int) else None,
        d,
    )


# -- points: a seq or a step, before or after ---------------------------------


def state_at(
    states: States,
    run_id: str,
    *,
    at: int | None = None,
    step: StepRef | None = None,
    when: When = "after",
) -> RunState:
    """The exact state at a point (the head when neither ``at`` nor ``step`` is given)."""
    _check_point(at, step, when)
    if step is None and at is None:
        return states.load(run_id)
    if step is None:
        assert at is not None
        return _state_upto(states, run_id, at - 1 if when == "before" else at)
    return states.load(run_id, upto=step_seq(states.load(run_id), step, when, states.store))


def _check_point(at: int | None, step: StepRef | None, when: str) -> None:
    if when not in ("before", "after"):
        raise InvalidInput(f"when is 'before' or 'after', not {when!r}")
    if at is not None and step is not None:
        raise InvalidInput("name one point: at=seq or step=position_or_name, not both")
    if at is not None:
        inputs.integer(at, "at= (a seq)", low=0)


def _state_upto(states: States, run_id: str, seq: int) -> RunState:
    if seq < 0:
        raise NotFound(f"run {run_id}: there is no point before seq 1")
    state = states.load(run_id, upto=seq)
    if state.seq != seq:
        raise NotFound(
            f"run {run_id}: its log has events 1..{state.seq}, not seq {seq}; "
            f"`tether history {run_id}` lists them"
        )
    return state


def find_step(state: RunState, step: StepRef) -> int:
    """The position ``step`` names in ``state``: a position, a name (its first match), or
    ``name#k`` (the k-th step of that name). Raises NotFound listing the steps."""
    if isinstance(step, bool) or not isinstance(step, (int, str)):
        raise InvalidInput(f"step= is a position (int) or a step name (str), not {step!r}")
    if isinstance(step, str):
        inputs.name(step, "step=")
    if isinstance(step, int):
        if 1 <= step <= len(state.steps):
            return step
        raise NotFound(f"run {state.run_id}: no step at position {step}; {_steps_hint(state)}")
    name, nth = _occurrence(state, step)
    found = [s.position for s in state.steps if s.name == name]
    if len(found) >= nth:
        return found[nth - 1]
    where = f"no step named {name!r}"
    if found:
        where = f"only {len(found)} step(s) named {name!r}, so no {name}#{nth}"
    raise NotFound(f"run {state.run_id}: {where}; {_steps_hint(state)}")


def _occurrence(state: RunState, step: str) -> tuple[str, int]:
    """``"plan#2"`` is the 2nd step named ``plan`` (unless a step is literally named so)."""
    name, sep, nth = step.rpartition("#")
    if not sep or not nth.isdigit() or int(nth) < 1 or any(s.name == step for s in state.steps):
        return step, 1
    return name, int(nth)


def _steps_hint(state: RunState) -> str:
    if not state.steps:
        return "it has no steps yet"
    if len(state.steps) <= 30:
        return "its steps are " + ", ".join(f"{s.position}:{s.name}" for s in state.steps)
    names = list(dict.fromkeys(s.name for s in state.steps))
    shown = ", ".join(names[:30]) + (f", … ({len(names)} names)" if len(names) > 30 else "")
    return f"it has positions 1..{len(state.steps)}, named {shown}"


def step_seq(head: RunState, step: StepRef, when: When, store: Store) -> int:
    """The seq of the point ``step``/``when`` in the run whose head state is ``head``.

    After: the event that completed the step. Before: the last event before the step's
    first event (its attempts, intents or waits all come after that point).
    """
    s = head.steps[find_step(head, step) - 1]
    if when == "after":
        if s.status != StepStatus.COMPLETED:
            raise InvalidState(
                f"run {head.run_id}: step {s.position} ({s.name}) is {s.status}, so there is no "
                f"point after it; use when='before' or at=seq"
            )
        return s.seq
    previous = head.steps[s.position - 2].seq if s.position > 1 else 0
    for e in store.read_events(head.run_id, after=previous, upto=s.seq):
        if e.payload().get("pos") == s.position:
            return e.seq - 1
    return s.seq - 1  # unreachable in a valid log: the step's last event carries its pos


# -- diff -------------------------------------------------------------------

# Bookkeeping the diff leaves out by default (``bookkeeping=True`` keeps it): fields
# that differ between any two runs, or any two executions, without saying anything
# about what the agent did. Run level: identity, the log's length, how many processes
# executed it, and lineage (``parent_id`` and every ``fork_*`` field; what a fork edited
# shows in the variables and input themselves). Step level: the seq that last changed
# it and its duration. Everywhere in tether's own records (the run, its steps,
# failures, errors, waits; never inside input, output or task variables): every
# timestamp (a name ending in ``_at``, or ``at``) and error tracebacks (their type and
# message stay).
IGNORED = {
    "run": frozenset({"run_id", "seq", "executions", "parent_id"}),  # and every fork_*
    "step": frozenset({"seq", "duration"}),
    "record": frozenset({"at", "traceback"}),
}
_USER_DATA = frozenset({"input", "output", "vars"})  # user values: compared verbatim


@dataclass(frozen=True, slots=True)
class Change:
    """One difference: at ``path``, ``kind`` is added | removed | changed.

    ``old`` and ``new`` are plain JSON data (tuples, sets, bytes… carry the codec's
    ``{"$t": …}`` tags); ``old`` is None when added, ``new`` is None when removed.
    """

    path: tuple[PathKey, ...]
    kind: str
    old: Any = None
    new: Any = None

    @property
    def where(self) -> str:
        """The path as text: ``steps[7].output``, ``vars.tone`` (steps are keyed by their
        1-based position; other lists by their 0-based index)."""
        return render_path(self.path)

    def inverse(self) -> Change:
        """The same change seen from the other side."""
        kind = {"added": "removed", "removed": "added"}.get(self.kind, self.kind)
        return Change(self.path, kind, self.new, self.old)


@dataclass(frozen=True, slots=True)
class Diff:
    """What differs between state ``a`` and state ``b`` (labels ``run@seq``)."""

    a: str
    b: str
    changes: tuple[Change, ...]

    def __bool__(self) -> bool:
        return bool(self.changes)

    def of(self, kind: str) -> tuple[Change, ...]:
        """The changes of one kind: added, removed or changed."""
        return tuple(c for c in self.changes if c.kind == kind)

    def inverse(self) -> Diff:
        """``diff(b, a)``, computed from this one."""
        return Diff(self.b, self.a, tuple(c.inverse() for c in self.changes))

    def to_data(self) -> dict[str, Any]:
        """Plain data for ``--json``: the labels and added / removed / changed lists."""
        out: dict[str, Any] = {"a": self.a, "b": self.b, "same": not self.changes}
        for kind in ("added", "removed", "changed"):
            out[kind] = [
                {"path": c.where, "keys": list(c.path), "old": c.old, "new": c.new}
                for c in self.of(kind)
            ]
        return out


def render_path(path: tuple[PathKey, ...]) -> str:
    """``("steps", 7, "output")`` -> ``steps[7].output``."""
    out = ""
    for key in path:
        if isinstance(key, int):
            out += f"[{key}]"
        elif key.isidentifier():
            out += f".{key}" if out else key
        else:
            out += f"[{key!r}]"
    return out or "$"


def view(state: RunState, *, bookkeeping: bool = False) -> dict[str, Any]:
    """The plain-data view a diff compares: ``to_data`` as JSON values, steps keyed by
    position, and without :data:`IGNORED` bookkeeping unless ``bookkeeping``."""
    data: dict[str, Any] = codec.to_json_value(to_data(state))
    steps = {s["position"]: s for s in data.pop("steps")}
    reverts = {r["position"]: r for r in data.pop("reverts")}  # by the reverted position
    if not bookkeeping:
        data = _strip({k: v for k, v in data.items() if not k.startswith("fork_")}, IGNORED["run"])
        steps = {p: _strip(s, IGNORED["step"]) for p, s in steps.items()}
        reverts = {p: _strip(r, IGNORED["step"]) for p, r in reverts.items()}
    data["steps"] = steps
    data["reverts"] = reverts
    return data


def _strip(record: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
    out = {}
    for key, value in record.items():
        if key in names or key.endswith("_at") or (key in IGNORED["record"]):
            continue
        out[key] = value if key in _USER_DATA else _strip_nested(value)
    return out


def _strip_nested(value: Any) -> Any:
    """Tether's own nested records (failure, errors, waits): drop their timestamps too."""
    if isinstance(value, dict) and codec.TAG not in value:
        return _strip(value, frozenset())
    if isinstance(value, list):
        return [_strip_nested(v) for v in value]
    return value


def compare(
    states: States, a: RunState | str, b: RunState | str, *, bookkeeping: bool = False
) -> Diff:
    """:func:`diff` of two states or runs' heads (a run id means its head's state)."""
    for x in (a, b):
        if not isinstance(x, RunState | str):
            raise InvalidInput(f"diff compares two states or two run ids, not {inputs.show(x)}")
    sa = states.load(a) if isinstance(a, str) else a
    sb = states.load(b) if isinstance(b, str) else b
    return diff(sa, sb, bookkeeping=bookkeeping)


def diff(a: RunState, b: RunState, *, bookkeeping: bool = False) -> Diff:
    """The structured difference from state ``a`` to state ``b`` (any runs, any points).

    ``diff(a, a)`` is empty and ``diff(b, a) == diff(a, b).inverse()``.
    """
    changes: list[Change] = []
    _walk(view(a, bookkeeping=bookkeeping), view(b, bookkeeping=bookkeeping), (), changes)
    return Diff(f"{a.run_id}@{a.seq}", f"{b.run_id}@{b.seq}", tuple(changes))


def _walk(a: Any, b: Any, path: tuple[PathKey, ...], out: list[Change]) -> None:
    if _is_map(a) and _is_map(b):
        for key in sorted(a.keys() | b.keys(), key=lambda k: (isinstance(k, str), k)):
            _walk_key(a, b, key, path, out)
    elif isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            _walk(x, y, (*path, i), out)
        out.extend(Change((*path, i), "removed", x, None) for i, x in enumerate(a) if i >= len(b))
        out.extend(Change((*path, i), "added", None, y) for i, y in enumerate(b) if i >= len(a))
    elif type(a) is not type(b) or _leaf(a) != _leaf(b):
        out.append(Change(path, "changed", a, b))


def _leaf(x: Any) -> Any:
    """A leaf as compared: a tagged value (a tuple, a set…) by its JSON text, so that
    False and 0 (or 1 and 1.0) inside it differ as they do everywhere else."""
    return json.dumps(x, sort_keys=True) if isinstance(x, dict | list) else x


def _walk_key(
    a: dict[Any, Any], b: dict[Any, Any], key: PathKey, path: tuple[PathKey, ...], out: list[Change]
) -> None:
    if key not in b:
        out.append(Change((*path, key), "removed", a[key], None))
    elif key not in a:
        out.append(Change((*path, key), "added", None, b[key]))
    else:
        _walk(a[key], b[key], (*path, key), out)


def _is_map(x: Any) -> bool:
    """A dict to walk into; a codec-tagged value (a tuple, a set…) is one leaf."""
    return isinstance(x, dict) and codec.TAG not in x


# -- fork -------------------------------------------------------------------


def fork(
    deps: Deps,
    states: States,
    run_id: str,
    *,
    at: int | None = None,
    step: StepRef | None = None,
    when: When = "after",
    input: Mapping[str, Any] | None = None,
    vars: Mapping[str, Any] | None = None,
    workspace: str | None = None,
) -> str:
    """Branch a new run off ``run_id`` at a point (its head when none is given).

    The new run's log is the parent's events ``1..seq`` verbatim, then ``run.forked``;
    it is created queued with no lease, on the parent's queue if it had one (so a worker
    of that queue may take it): ``app.resume(new_id)`` executes it, reusing
    every step completed at the fork point and running the rest afresh. ``input``
    (``{"args": [...], "kwargs": {...}}``) replaces the input, ``vars`` are task
    variables set once replay passes the fork point; ``workspace``, the directory the
    fork works in (absolute), recorded in ``run.forked``. Returns the new run's id.
    """
    record = deps.store.get_run(run_id)
    base = state_at(states, run_id, at=at, step=step, when=when)
    if base.seq < 1:
        raise NotFound(f"run {run_id}: a fork needs at least the run's first event (seq 1)")
    _refuse_undone(states, base)
    copies = [
        NewEvent(e.type, e.data, e.at, e.actor)
        for e in deps.store.read_events(run_id, upto=base.seq)
    ]
    if len(copies) != base.seq:
        raise InvalidState(f"run {run_id}: its log has a gap before seq {base.seq}; not forked")
    now = deps.clock.now()
    new_id = new_run_id(now)
    data = fork_data(base, input, vars) | ({"workspace": workspace} if workspace else {})
    forked = ev.new(ev.RUN_FORKED, data, now, deps.owner)
    deps.store.create_run(
        NewRun(
            new_id,
            record.agent,
            record.version,
            RunStatus.QUEUED,
            code=record.code,
            parent_id=run_id,
            fork_seq=base.seq,
            session_id=record.session_id,
            owner=record.owner,
            queue=record.queue,
            priority=record.priority,
            concurrency_key=record.concurrency_key,
        ),
        [*copies, forked],
        lease_owner=None,
        now=now,
        ttl=deps.lease_ttl,
    )
    head = fold(
        [Event(new_id, base.seq + 1, forked.type, forked.data, forked.at, forked.actor)],
        start=replace(base, run_id=new_id),
    )
    cache_snapshot(states, head)
    if record.queue is not None:
        deps.store.notify_work(record.queue)  # a worker of the queue takes it now
    return new_id


def _refuse_undone(states: States, base: RunState) -> None:
    """Refuse a fork whose copied prefix holds a write-tool call a compensation (or a
    revert) undid (or is undoing, or tried to undo), in this run or any run of its
    lineage: the fork would reuse an effect that no longer holds. Re-executing that one
    call instead would leave the copied steps after it built on the old result, so the
    fork must start before it."""
    head = states.load(base.run_id)  # undo steps come after every recorded one
    tried = {(s.detail or {}).get("of"): s.status for s in head.steps if s.kind == "compensate"}
    tried |= {r.position: r.status for r in head.reverts}  # tether revert's
    for s in base.steps:
        if s.kind != "tool" or s.status != StepStatus.COMPLETED or not s.key:
            continue
        if (s.detail or {}).get("risk") in (None, "read"):
            continue
        status = effects.undone(states.store, s.key) or tried.get(s.position)
        if status is not None:
            raise InvalidState(
                f"run {base.run_id}: step {s.position} ({s.name}) is a call whose effect a "
                f"compensation has undone (undo {status}), so a fork at seq {base.seq} would "
                f"reuse an effect that no longer holds. Fork before it: app.fork("
                f"{base.run_id!r}, step={s.position}, when='before') or `tether fork "
                f"{base.run_id} --step {s.position} --when before`; the call then runs again "
                f"with the fork's own idempotency key. Nothing was forked."
            )


def fork_data(
    base: RunState, input: Mapping[str, Any] | None, vars: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The ``run.forked`` event's data for a fork of ``base`` (the parent's state at seq).

    ``vars`` are only this fork's edits: the edits of the forks before it are in the
    copied prefix, and replay applies each at its own fork point.
    """
    edits = _check_vars(base.run_id, vars)
    data = {
        "parent": base.run_id,
        "seq": base.seq,
        "position": base.committed,
        "input": _check_input(base.run_id, input),
        "vars": edits or None,
    }
    try:
        codec.encode(data)
    except EncodeError as e:
        raise EncodeError(
            f"run {base.run_id}: the fork's input or vars cannot be stored: "
            f"{e.type_name} at {e.path}; pass plain data. Nothing was forked.",
            path=e.path,
            type_name=e.type_name,
        ) from None
    return data


def _check_vars(run_id: str, vars: Mapping[str, Any] | None) -> dict[str, Any]:
    if vars is None:
        return {}
    if not isinstance(vars, Mapping) or not all(isinstance(k, str) for k in vars):
        raise InvalidInput(  # a TypeError too, as before
            f"run {run_id}: fork vars= is a dict of str names to values, not {inputs.show(vars)}"
        )
    for k in vars:
        inputs.name(k, "fork vars=: a task variable's name")
    return dict(vars)


def _check_input(run_id: str, input: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if input is None:
        return None
    ok = isinstance(input, Mapping) and set(input) <= {"args", "kwargs"}
    args = input.get("args", []) if ok else None
    kwargs = input.get("kwargs", {}) if ok else None
    if not isinstance(args, (list, tuple)) or not isinstance(kwargs, Mapping):
        raise InvalidInput(  # a TypeError too, as before
            f"run {run_id}: fork input= is {{'args': [...], 'kwargs': {{...}}}} "
            f"(either may be left out), not {inputs.show(input)}"
        )
    return {"args": list(args), "kwargs": dict(kwargs)}


def cache_snapshot(states: States, state: RunState) -> None:
    """Cache ``state`` (the head of a run nobody executes yet) as a snapshot when its log
    is long enough to be worth it. Best effort: a snapshot is only a cache."""
    if state.seq < states.snapshot_every:
        return
    try:
        snapshots.save(states.store, state, states.clock.now())
    except TetherError as e:
        log.warning("run %s: could not cache a snapshot at seq %d: %s", state.run_id, state.seq, e)
