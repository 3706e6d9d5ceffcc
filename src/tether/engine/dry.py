"""Dry replay: an agent's current code run against a run's log, executing nothing and
writing nothing.

The agent function is called as a resume calls it, on a :class:`DryJournal`: each call
takes its position and is checked against the log by the engine's own
:meth:`~tether.engine.journal.Journal.slot` (one comparison, :func:`tether.model.steps.differs`);
a recorded, completed position returns its recorded result, as on resume. The replay
stops at the first call the log cannot answer:

- ``continues``: a position with no completed record (the run's *frontier*: a resume
  would execute that call, or wait there);
- ``diverges``: a call that is not the step recorded at its position (another kind or
  name, a tool with other arguments): a resume would block the run;
- ``fails``: the agent raised (on a recorded result, or on a ``replace`` one);
- ``finished``: the agent returned, and a resume would complete the run with that output.

Nothing is appended (a write would be a bug here, refused as such), no lease is taken,
no snapshot is cached. ``replace`` gives chosen positions another result (a what-if: a
different model output at position N), recorded there or not: what the call returns
to the agent (a wait's: the signal's payload; an approval's: the decision, e.g.
``{"approved": True, "by": "ann"}``).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from dataclasses import replace as replace_
from typing import Any, NoReturn

from tether.engine import workspace
from tether.engine.calls import Slot, agent_body
from tether.engine.children import Spawner
from tether.engine.journal import Journal, error_info
from tether.engine.policy import Policy
from tether.engine.registry import AgentDef
from tether.engine.retry import Retry
from tether.engine.runtime import AsyncRun, Run
from tether.errors import InvalidState, NondeterminismError
from tether.model import inputs
from tether.model.clock import Clock
from tether.model.events import NewEvent
from tether.model.state import RunState
from tether.model.status import StepStatus
from tether.model.steps import StepState, differs
from tether.model.workspace import Workspace
from tether.store import EffectWrite, Lease, SignalTake, Store, Transition

FINISHED, CONTINUES, DIVERGES, FAILS = "finished", "continues", "diverges", "fails"
OUTCOMES = (FINISHED, CONTINUES, DIVERGES, FAILS)


@dataclass(frozen=True, slots=True)
class StepRef:
    """A step as replay compares it: kind, name and (a tool's) args digest."""

    kind: str
    name: str
    digest: str | None = None

    def __str__(self) -> str:
        args = f"(args {self.digest[:12]})" if self.digest else ""
        return f"{self.kind} {self.name}{args}"


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """What the current code would do with a run (see :mod:`tether.engine.dry`).

    ``outcome`` is ``finished``, ``continues``, ``diverges`` or ``fails``; ``position``
    is where it stopped (None when finished); ``recorded`` the step the log holds there
    (None at a position with no record), ``found`` the call the code made there;
    ``differs`` ``{field: (recorded, found)}`` (kind, name, args) when it diverges;
    ``output`` the agent's return value when finished (``continues`` with no position:
    a run whose compensation a resume finishes, without calling the agent); ``error``
    the exception's type, message and traceback when it fails; ``replayed`` how many
    positions the log (or ``replace``) answered; ``unreached`` the recorded positions
    past where it stopped (a finished replay that leaves some: the new code no longer
    makes those calls); ``patches`` the ``run.patched`` names the run relies on (``old
    path``: it takes the old one; ``recorded``: it recorded the new one), which retiring
    that patch would block."""

    run_id: str
    agent: str
    status: str  # the run's status in its log
    outcome: str
    position: int | None = None
    recorded: StepRef | None = None
    found: StepRef | None = None
    differs: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
    output: Any = None
    error: Mapping[str, Any] | None = None
    replayed: int = 0
    unreached: tuple[int, ...] = ()
    patches: Mapping[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether a resume would go on without blocking or failing (finished, continues)."""
        return self.outcome in (FINISHED, CONTINUES)

    def __str__(self) -> str:
        head = f"run {self.run_id} ({self.agent}, {self.status}): "
        if self.outcome == FINISHED:
            return head + f"would finish after {self.replayed} replayed positions"
        if self.outcome == CONTINUES and self.position is None:
            return head + "would finish its compensation (the agent is not called)"
        if self.outcome == CONTINUES:
            where = f" (recorded: {self.recorded})" if self.recorded else ""
            return head + f"would continue at position {self.position}: {self.found}{where}"
        if self.outcome == DIVERGES:
            return (
                head + f"would block at position {self.position}: recorded {self.recorded}, "
                f"found {self.found}"
            )
        err = self.error or {}
        return head + f"would fail: {err.get('type')}: {err.get('message')}"


class _Stop(BaseException):
    """Unwinds the agent where the dry replay stops (a BaseException: an agent's ``except
    Exception`` does not swallow it; the journal is poisoned too, so a later call or the
    agent's return still ends there)."""

    def __init__(self, outcome: str, pos: int, recorded: StepRef | None, found: StepRef) -> None:
        super().__init__(f"{outcome} at position {pos}")
        self.outcome, self.pos, self.recorded, self.found = outcome, pos, recorded, found
        self.differs: dict[str, tuple[Any, Any]] = {}


def _ref(rec: StepState | None) -> StepRef | None:
    """The step ``rec`` as replay compares it: the args digest only where it is compared."""
    if rec is None:
        return None
    return StepRef(rec.kind, rec.name, rec.input_digest if rec.kind in _ARGS_CHECKED else None)


_ARGS_CHECKED = ("tool", "compensate")  # the kinds whose args digest slot() compares


_NONE = object()


class DryJournal(Journal):
    """A :class:`Journal` that replays and stops where the log has no answer; it never
    appends (see the module docstring)."""

    def __init__(
        self, store: Store, clock: Clock, state: RunState, replace: Mapping[int, Any]
    ) -> None:
        super().__init__(store, clock, state, Lease(state.run_id, "replay", 0, math.inf))
        self.replace = dict(replace)
        self.patches: dict[str, str] = {}  # run.patched(name): the old path, or recorded

    def slot(self, kind: str, name: str, digest: str | None = None) -> Slot:
        try:
            slot = super().slot(kind, name, digest)
        except NondeterminismError as e:  # the engine's own check refused the call
            rec = self.recorded[e.position - 1]
            stop = _Stop(DIVERGES, e.position, _ref(rec), StepRef(kind, name, digest))
            stop.differs = differs(rec, kind, name, digest)
            self._stop(stop)
        value = self.replace.get(slot.pos, _NONE)
        if value is not _NONE:
            if kind == "wait":  # the log holds the signal; the agent gets its payload
                value = {"payload": value}
            base = slot.recorded or StepState(slot.pos, name, kind, StepStatus.COMPLETED)
            rec = dataclasses.replace(base, status=StepStatus.COMPLETED, output=value)
            if kind == "child":  # an inline child's: the value is its output (engine.inline)
                rec = dataclasses.replace(rec, detail=None)
            if not slot.done:
                self.reused.append((slot.pos, name))
            slot = Slot(slot.pos, kind, name, rec)
        if not slot.done:
            self._stop(_Stop(CONTINUES, slot.pos, _ref(slot.recorded), StepRef(kind, name, digest)))
        return slot

    def _stop(self, stop: _Stop) -> NoReturn:
        self.poisoned = stop
        raise stop

    def _append(
        self,
        events: list[NewEvent],
        transition: Transition | None,
        writes: Sequence[EffectWrite | SignalTake],
        wait: bool,
    ) -> None:
        if self.poisoned is not None:
            raise self.poisoned
        raise InvalidState(
            f"run {self.run_id}: a dry replay writes nothing, yet a call at position "
            f"{self.pos} tried to append {[e.type for e in events]} (a bug in tether: report it)"
        )


@dataclass(frozen=True, slots=True)
class Config:
    """What the agent's ``run`` object is made with (an App's settings, or the defaults)."""

    retry: Retry = field(default_factory=Retry)
    policy: Policy = field(default_factory=Policy)
    inline_sleep_max: float = 60.0
    approver_groups: frozenset[str] = frozenset()
    workspace: Workspace | None = None  # the App's default (an agent's own comes first)


def dry_replay(
    d: AgentDef,
    store: Store,
    clock: Clock,
    state: RunState,
    *,
    replace: Mapping[int, Any] | None = None,
    config: Config | None = None,
    resolve: Callable[[Any], AgentDef] | None = None,
) -> ReplayReport:
    """Replay ``state``'s run with agent ``d``'s current code (see the module docstring):
    reads ``store`` (a session's messages, a fork's effects), writes nothing. ``resolve``
    finds the agents its ``run.child`` and ``run.handoff`` name (an App's registry; by
    default a name stands for itself): a recorded start returns the recorded child, and
    an unrecorded one is where the replay stops, so no run is ever started."""
    c = config or Config()
    journal = DryJournal(store, clock, state, replace or {})
    journal.spawner = Spawner(resolve or _named, _never_started)
    journal.workspace = workspace.untouched(d.workspace or c.workspace, journal)
    cls = AsyncRun if d.is_async else Run
    run = cls(journal, d.name, c.retry, c.policy, c.inline_sleep_max, c.approver_groups)
    args = tuple(state.input.get("args", ()))
    kwargs = dict(state.input.get("kwargs", {}))
    base = ReplayReport(state.run_id, d.name, str(state.status), FINISHED)
    if state.compensating is not None:  # a resume finishes the compensation, not the agent
        return replace_(base, outcome=CONTINUES)
    try:
        output = _call(d, journal, run, args, kwargs)
    except _Stop:
        output = None
    except Exception as exc:
        if not isinstance(journal.poisoned, _Stop):
            error = error_info(exc, clock.now())
            return replace_(base, outcome=FAILS, error=error, replayed=len(journal.reused))
        output = None
    base = replace_(base, patches=dict(journal.patches))
    stop = journal.poisoned
    if isinstance(stop, _Stop):
        return replace_(
            base,
            outcome=stop.outcome,
            position=stop.pos,
            recorded=stop.recorded,
            found=stop.found,
            differs=stop.differs,
            replayed=len(journal.reused),
        )
    recorded = [s.position for s in state.steps if s.status != StepStatus.UNRECORDED]
    unreached = tuple(p for p in recorded if p > journal.pos)
    return replace_(base, output=output, replayed=len(journal.reused), unreached=unreached)


def _named(agent: Any) -> AgentDef:
    """A child's agent for a dry replay without an App: its definition, or its name."""
    found = getattr(agent, "__tether_agent__", None)
    if isinstance(found, AgentDef):
        return found
    name = inputs.name(agent, "run.child's agent")
    return AgentDef(name, None, _never_started, False, {})


def _never_started(*_args: Any, **_kwargs: Any) -> NoReturn:
    raise InvalidState("a dry replay starts no run (a bug in tether: report it)")


def _call(
    d: AgentDef, journal: Journal, run: Run | AsyncRun, args: tuple[Any, ...], kwargs: Any
) -> Any:
    if not d.is_async:
        with agent_body(journal.run_id):
            return d.fn(run, *args, **kwargs)
    import asyncio  # only for async agents: keeps `import tether` fast

    async def main() -> Any:
        journal.agent_task = asyncio.current_task()  # its calls are in program order
        with agent_body(journal.run_id):
            result = d.fn(run, *args, **kwargs)
            return await result if inspect.isawaitable(result) else result

    return asyncio.run(main())
