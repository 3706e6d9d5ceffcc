"""The executor: one path that creates, resumes and continues runs, sync or async.

Every entry point (``app.run``/``arun``, ``resume``/``aresume``, ``retry_run``, a
worker's claim) prepares a run (:meth:`Executor.create`, :meth:`Executor.prepare_resume`,
:meth:`Executor.prepare_claimed`), then carries it on the same way (:meth:`continue_run`,
or :meth:`acontinue_run` in an event loop): a finished run's handle, the end of an
interrupted compensation, or the agent executed to its end, pause, wait, block or failure.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Collection, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, NoReturn

from tether.context.conversation import Session
from tether.engine import births, compensation, gates, workspace
from tether.engine import tracing as traces
from tether.engine.calls import Cancelling, Core, Stopping, Suspended, agent_body, unwrapped
from tether.engine.children import Spawner
from tether.engine.deps import Deps
from tether.engine.journal import SECRET_TYPE, Journal, no_literal_secret
from tether.engine.leases import Active, Leases
from tether.engine.limits import meter
from tether.engine.policy import Policy
from tether.engine.registry import AgentDef, Registry
from tether.engine.retry import Retry
from tether.engine.runtime import AsyncRun, Run, adrive, close_unawaited, drive
from tether.engine.states import States
from tether.engine.tracing import Tracing
from tether.engine.workspace import Workspaces
from tether.errors import (
    EncodeError,
    InvalidState,
    LeaseLost,
    NondeterminismError,
    RunFailed,
    StoreUnavailable,
    TetherError,
)
from tether.model import codec
from tether.model import events as ev
from tether.model.budgets import Limits, Price, check_limits
from tether.model.clock import new_run_id
from tether.model.state import RunState
from tether.model.status import RunStatus
from tether.store import Lease, NewRun, RunRecord, Transition

log = logging.getLogger("tether")
CANCEL_REQUESTED = "cancel.requested"  # audit action: a cancel asked of a run executing elsewhere


@dataclass(frozen=True, slots=True)
class RunHandle:
    """What ``app.run``/``app.resume`` return: the run's id, status and output.

    ``reused`` and ``executed`` list the positions ``(position, name)`` this
    execution took from the log and the ones it ran.
    """

    id: str
    status: str
    output: Any = None
    error: dict[str, Any] | None = None
    reused: tuple[tuple[int, str], ...] = field(default=())
    executed: tuple[tuple[int, str], ...] = field(default=())
    waiting: dict[str, Any] | None = None  # what a waiting run waits for


# A run ready to execute here: its agent, journal (under a lease), run object and input.
Prepared = tuple[AgentDef, Journal, Run | AsyncRun, tuple[Any, ...], dict[str, Any]]


class Executor:
    """Executes runs in this process, under leases, with the App's registry and settings."""

    def __init__(
        self,
        deps: Deps,
        states: States,
        leases: Leases,
        registry: Registry,
        *,
        retry: Retry,
        policy: Policy,
        inline_sleep_max: float,
        approver_groups: Collection[str],
    ) -> None:
        self.deps = deps
        self.states = states
        self.leases = leases
        self.active: Active = leases.active
        self.registry = registry
        self.retry = retry
        self.policy = policy
        self.inline_sleep_max = inline_sleep_max
        self.approver_groups = approver_groups  # names recorded with approval requests
        self.tracing: Tracing | None = None  # tether.open(tracing=...): spans of executions
        self.prices: dict[str, Price] = {}  # model -> price (tether.open(prices=...))
        self.spawner: Spawner | None = None  # how run.child enqueues runs (the App's queues)
        self.workspaces: Workspaces | None = None  # working directories (engine.workspace)

    def create(
        self,
        d: AgentDef,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        session: Session | None = None,
        *,
        tenant: str | None = None,
        limits: Limits | None = None,
        run_id: str | None = None,
        queue: str | None = None,
        caller: dict[str, Any] | None = None,
        later: bool = False,
    ) -> Prepared:
        """Create a run of ``d`` (in ``session``, when given) under this process's lease,
        ready to execute here: nothing runs yet (see :meth:`continue_run`). Its owner (its
        tenant) is the session's, else ``tenant``. ``run_id``: its id (checked by the
        caller; Conflict when it exists), else a new one; ``queue``: the queue its row
        names (a worker would resume it from), else none; ``caller``: an inline child's;
        ``later``: written with its first append (engine.births), when it has no workspace."""
        self.leases.check_clock()
        self.policy.check_tools(self.registry.tools)  # a rule naming no tool: no run is made
        now = self.deps.clock.now()
        run_id = run_id or new_run_id(now)
        payload = {"args": list(args), "kwargs": kwargs}  # checked as it is encoded, below
        data = {"agent": d.name, "version": d.version, "input": payload, "code": d.code}
        data |= {"queue": queue} if queue is not None else {}
        data |= {"caller": caller} if caller is not None else {}
        if session is not None:
            data["session"] = session.id
        limits = check_limits(limits, "limits")  # before the span: a refusal leaves none open
        if limits is not None:
            data["limits"] = limits.data()
        trace = None
        if self.tracing is not None:  # the run's first execution: its span's context stored
            births.checked_input(d, args, kwargs)  # before the span: a refusal opens none
            sid = session.id if session is not None else None
            trace = traces.start_run(self.tracing, d.name, run_id, session=sid, version=d.version)
            traceparent = trace.traceparent()
            if traceparent is not None:
                data["trace"] = traceparent
        created = births.created(d, args, kwargs, data, now)
        started = ev.new(ev.RUN_STARTED, {"by": self.deps.owner, "epoch": 1}, now, self.deps.owner)
        sid, owner = (session.id, session.owner) if session is not None else (None, tenant)
        new = NewRun(
            run_id,
            d.name,
            d.version,
            RunStatus.RUNNING,
            code=d.code,
            session_id=sid,
            owner=owner,
            queue=queue,
        )
        holder, ttl = self.deps.owner, self.deps.lease_ttl
        later = later and not workspace.configured(self.workspaces, d)
        try:
            lease = (
                Lease(run_id, holder, 1, now + ttl)
                if later
                else self.deps.store.create_run(
                    new, [created, started], lease_owner=holder, now=now, ttl=ttl
                )
            )
        except BaseException as exc:  # no run (its id taken, the database gone): no span open
            if trace is not None:
                trace.refused(exc)
            raise
        assert lease is not None
        state = births.first_state(run_id, data, now)
        first = [created, started]
        birth = (
            births.Birth(self.deps.store, self.deps.clock, new, first, holder, ttl)
            if later
            else None
        )
        journal, run = self._journal(d, state, lease, birth=birth)
        journal.trace = trace
        if session is not None:
            run.bind_session(session)
        run._created(owner)  # known here: no read of a row that may not exist yet
        return d, journal, run, args, kwargs

    def check_input(self, d: AgentDef, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The run's input as stored (see births.checked_input), the policy checked first."""
        self.policy.check_tools(self.registry.tools)  # a rule naming no tool: no run is made
        return births.checked_input(d, args, kwargs)

    def _journal(
        self,
        d: AgentDef,
        state: RunState,
        lease: Lease,
        *,
        detached_end: bool = False,
        birth: births.Birth | None = None,
    ) -> tuple[Journal, Run | AsyncRun]:
        self.leases.keep()
        deps = self.deps
        journal = Journal(deps.store, deps.clock, state, lease, actor=lease.owner)
        journal.detached_end, journal.birth = detached_end, birth
        journal.meter = meter(d.limits, self.prices, state, self.deps.clock.now())
        journal.spawner = self.spawner
        cls = AsyncRun if d.is_async else Run
        workspace.attach(self.workspaces, d, state, journal)  # restored, or first checkpoint
        self.active.add(journal)
        groups = self.approver_groups
        return journal, cls(journal, d.name, self.retry, self.policy, self.inline_sleep_max, groups)

    def prepare_resume(self, run_id: str, *, retry: bool) -> RunHandle | Prepared:
        record = self.deps.store.get_run(run_id)
        if record.status in (RunStatus.COMPLETED, RunStatus.CANCELLED) or (
            record.status == RunStatus.FAILED and not retry
        ):
            return self.finished(record)
        if retry and record.status not in (RunStatus.FAILED, RunStatus.BLOCKED):
            raise InvalidState(
                f"run {run_id} is {record.status}, not failed or blocked; only those "
                f"can be retried (use resume)"
            )
        if retry and record.status == RunStatus.FAILED:
            self.check_retryable(self.states.load(run_id))
        if record.status == RunStatus.WAITING:
            blocked = gates.resumable(self.deps.store, self.deps.clock, self.states.load(run_id))
            if blocked is not None:
                raise InvalidState(blocked)
        d = self.registry.agent_for(record)
        return self.prepare_claimed(d, record, self.leases.claim(record), retry=retry)

    def prepare_claimed(
        self,
        d: AgentDef,
        record: RunRecord,
        lease: Lease,
        *,
        retry: bool = False,
        worker: bool = False,
    ) -> RunHandle | Prepared:
        """``worker``: a worker's claim, which already made the run's status running; and
        nothing waits for the run's end, so its final event need not wait for the commit
        (the worker goes on to its next run at once)."""
        state = self.states.load(record.id)
        if state.status in (
            RunStatus.COMPLETED,
            RunStatus.CANCELLED,
        ):  # finished while we were claiming
            self.deps.store.release(record.id, epoch=lease.epoch)
            return self.finished(record)
        journal, run = self._journal(d, state, lease, detached_end=worker)
        if self.tracing is not None:
            journal.trace = traces.resume_run(self.tracing, self.deps.store, d, record, state)
        started = {"by": lease.owner, "epoch": lease.epoch, "retry": retry}
        moved = None if worker else Transition(RunStatus.RUNNING)
        journal.defer([journal.event(ev.RUN_STARTED, started)], moved)
        args = tuple(state.input.get("args", ()))
        return d, journal, run, args, dict(state.input.get("kwargs", {}))

    def execute_claimed(self, record: RunRecord, lease: Lease) -> RunHandle:
        """Execute a run a worker claimed (``lease``): resume it, or finish its compensation.

        Raises RunFailed when the run fails (the failure is recorded first).
        """
        return self.continue_run(
            self.prepare_claimed(self.registry.agent_for(record), record, lease, worker=True)
        )

    def _continuation(self, prepared: RunHandle | Prepared) -> RunHandle | Core | Prepared:
        """What every entry point that continues a run does next, sync or async (resume,
        aresume, retry, a worker's claim): return a finished run's handle, finish an
        interrupted compensation (a core the caller drives), or execute the agent."""
        if isinstance(prepared, RunHandle):
            return prepared
        if prepared[1].compensating is not None:
            return self._end_compensation(prepared[1])
        return prepared

    def continue_run(self, prepared: RunHandle | Prepared) -> RunHandle:
        """:meth:`_continuation`, carried out in this thread; an ``async def`` agent's
        through :meth:`acontinue_run`, in an event loop of its own (its undo functions
        may be async too): the one path of sync and async entry points."""
        if not isinstance(prepared, RunHandle) and prepared[0].is_async:
            import asyncio  # only for async agents: keeps `import tether` fast

            with self._outage(prepared[1], InvalidState):  # refused in a running loop
                births.outside_loop(prepared[0], prepared[1].run_id)
            return asyncio.run(self.acontinue_run(prepared))
        trace = None if isinstance(prepared, RunHandle) else prepared[1].trace
        if trace is not None:
            return trace.traced(self._continue, prepared)
        return self._continue(prepared)

    def _continue(self, prepared: RunHandle | Prepared) -> RunHandle:
        step = self._continuation(prepared)
        if isinstance(step, RunHandle):
            return step
        if isinstance(step, tuple):
            return self._execute(*step)
        handle: RunHandle = drive(step, self.deps.clock)
        return handle

    async def acontinue_run(self, prepared: RunHandle | Prepared) -> RunHandle:
        """:meth:`_continuation`, carried out in the running event loop."""
        trace = None if isinstance(prepared, RunHandle) else prepared[1].trace
        if trace is not None:
            return await trace.atraced(self._acontinue, prepared)
        return await self._acontinue(prepared)

    async def _acontinue(self, prepared: RunHandle | Prepared) -> RunHandle:
        step = self._continuation(prepared)
        if isinstance(step, RunHandle):
            return step
        if isinstance(step, tuple):
            return await self._aexecute(*step)
        return await self._adrive_end(step)

    async def _adrive_end(self, core: Core) -> RunHandle:
        handle: RunHandle = await adrive(core, self.deps.clock)
        return handle

    def check_retryable(self, state: RunState) -> None:
        if state.compensating is not None:
            raise InvalidState(
                f"run {state.run_id} failed and its effects were compensated (undone); "
                f"retrying would reuse steps whose effects no longer exist. Start a new run, "
                f"or fork it before its first tool call."
            )

    def finished(self, record: RunRecord) -> RunHandle:
        state = self.states.load(record.id)
        if state.status == RunStatus.FAILED:
            raise InvalidState(
                f"run {record.id} failed ({(state.failure or {}).get('type')}: "
                f"{(state.failure or {}).get('message')}); `tether retry {record.id}` "
                + (
                    f"puts it back in queue {record.queue!r}, where a worker retries it from "
                    f"its failed step"
                    if record.queue is not None
                    else "executes it again from its failed step"
                )
            )
        return RunHandle(record.id, state.status, state.output, None)

    # -- executing --------------------------------------------------------

    def _execute(
        self,
        d: AgentDef,
        journal: Journal,
        run: Run | AsyncRun,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> RunHandle:
        with self._outage(journal):
            try:
                with agent_body(journal.run_id):
                    output = d.fn(run, *args, **kwargs)
                journal.raise_poison()
            except BaseException as exc:
                ended = self._ended(journal, exc)
                if isinstance(ended, RunHandle):
                    return ended
                self._failed(journal, drive(ended, self.deps.clock), exc)
            finally:
                self.active.remove(journal)
            return self._complete(journal, output)

    async def _aexecute(
        self,
        d: AgentDef,
        journal: Journal,
        run: Run | AsyncRun,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> RunHandle:
        import asyncio

        journal.agent_task = asyncio.current_task()  # its calls are in program order
        with self._outage(journal):
            try:
                with agent_body(journal.run_id):
                    result = d.fn(run, *args, **kwargs)
                    output = await result if inspect.isawaitable(result) else result
                journal.raise_poison()
            except BaseException as exc:
                if isinstance(run, AsyncRun):  # its calls left unawaited by the exception
                    close_unawaited(run)
                ended = self._ended(journal, exc)
                if isinstance(ended, RunHandle):
                    return ended
                self._failed(journal, await adrive(ended, self.deps.clock), exc)
            finally:
                self.active.remove(journal)
            return self._complete(journal, output)

    def _ended(self, journal: Journal, exc: BaseException) -> RunHandle | Core:
        """What the agent's exception makes of the run: waiting, cancelled, blocked (the
        code no longer matches its log: recorded, then NondeterminismError raised), or the
        core that records its failure (the caller drives it, sync or async). Re-raises
        ``exc`` for a pause (a crash-like exit, a lost lease, the database gone)."""
        exc = unwrapped(exc)  # tether's own, inside an asyncio.TaskGroup's group
        if isinstance(exc, Suspended):
            return self._waiting(journal, exc)
        fault = journal.fault(exc)
        with suppress(LeaseLost, StoreUnavailable):  # poisons the journal: a pause below
            journal.flush(born=True)  # the step before the exception: before the log is read
        if isinstance(exc, Cancelling):
            return self._cancel_inside(journal, exc)
        core = self._stopped(journal, exc, fault)
        if core is None:
            raise exc
        return core

    @contextmanager
    def _outage(
        self, journal: Journal, caught: type[BaseException] = StoreUnavailable
    ) -> Iterator[None]:
        """The database went away under the execution (``caught``; or an execution refused
        before it began): a pause, not the agent's failure. A worker puts the run back in
        its queue; executed here, its lease is given back, so that `tether resume` goes on
        from its log later, from any process (the heartbeat would extend it)."""
        try:
            yield
        except caught:
            if not journal.detached_end:
                self.active.remove(journal)
                self.leases.let_go(journal.run_id, journal.lease.epoch)
            raise

    def _complete(self, journal: Journal, output: Any) -> RunHandle:
        try:
            event = journal.event(ev.RUN_COMPLETED, {"output": output})
            no_literal_secret(event, output, f"run {journal.run_id}: the agent's return value")
        except EncodeError as e:
            err = (
                e
                if e.type_name == SECRET_TYPE
                else EncodeError(
                    f"run {journal.run_id}: the agent's return value cannot be "
                    f"stored: {e.type_name} at {e.path.replace('$.output', '$', 1)}. "
                    f"{codec.plain_hint(e.type_name)}",
                    path=e.path,
                    type_name=e.type_name,
                )
            )
            core = self._stopped(journal, err, err)
            assert core is not None
            self._failed(journal, drive(core, self.deps.clock), err)
        journal.append(
            [event], Transition(RunStatus.COMPLETED, release=True), wait=not journal.detached_end
        )
        return RunHandle(
            journal.run_id,
            RunStatus.COMPLETED,
            output,
            None,
            tuple(journal.reused),
            tuple(journal.executed),
        )

    def _waiting(self, journal: Journal, s: Suspended) -> RunHandle:
        state = self.states.load(journal.run_id)
        return RunHandle(
            journal.run_id,
            RunStatus.WAITING,
            None,
            None,
            tuple(journal.reused),
            tuple(journal.executed),
            dict(state.waiting or {"for": s.waiting_for}),
        )

    def _stopped(self, journal: Journal, exc: BaseException, fault: BaseException) -> Core | None:
        """Why execution stopped (``fault``: see :meth:`Journal.fault`): None for a pause
        (crash-like exit, lost lease), a block (raised), else the core that records the
        failure (compensating completed write tools first)."""
        if isinstance(fault, LeaseLost | StoreUnavailable):
            return None  # another worker owns the run now, or the database went away (a
            # pause, see _outage): write nothing
        if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: a pause
            why = "its worker is stopping" if isinstance(exc, Stopping) else type(exc).__name__
            self._suspend(journal, why)
            return None
        journal.poisoned = None
        if isinstance(fault, NondeterminismError):
            self._block(journal, fault)
        return self._fail_core(journal, journal.context_for(exc), RunStatus.FAILED)

    def _block(self, journal: Journal, err: NondeterminismError) -> NoReturn:
        """The code no longer matches the log: stop the run as ``blocked``, holding no
        lease and undoing nothing (a deploy is no failure of the work), then raise
        ``err``. It goes on once the code matches again (resume, retry)."""
        data = {
            "message": str(err),
            "position": err.position,
            "recorded": err.expected,
            "found": err.found,
        }
        journal.append(
            [journal.event(ev.RUN_BLOCKED, data)], Transition(RunStatus.BLOCKED, release=True)
        )
        log.warning("run %s is blocked: %s", journal.run_id, err)
        raise err

    def _fail_core(self, journal: Journal, ctx: dict[str, Any], reason: str) -> Core:
        state = self.states.load(journal.run_id)
        if state.compensating is None and compensation.compensable(state, self.registry.find_tool):
            compensation.start(journal, state, reason, ctx)
            state = self.states.load(journal.run_id)
        if state.compensating is not None:
            failures = yield from compensation.compensation_core(
                journal, state, self.registry.find_tool, self.retry
            )
            if failures:
                ctx = {**ctx, "compensation_failures": failures}
        return ctx

    def _failed(self, journal: Journal, ctx: dict[str, Any], exc: BaseException | None) -> NoReturn:
        journal.append(
            [journal.event(ev.RUN_FAILED, {"error": ctx})],
            Transition(RunStatus.FAILED, release=True),
        )
        raise RunFailed(journal.run_id, ctx) from exc

    def _end_compensation(self, journal: Journal) -> Core:
        """Finish a compensation that a crash interrupted, then end the run (blocked when its
        undos no longer match the log): a core returning its handle, driven sync or async."""
        assert journal.compensating is not None
        reason, error = journal.compensating["reason"], journal.compensating.get("error")
        with self._outage(journal):
            try:
                ctx = yield from self._fail_core(journal, dict(error or {}), reason)
                if reason == "cancelled":
                    return self._cancelled(journal, ctx)
                self._failed(journal, ctx, None)
            except NondeterminismError as err:  # deployed code undoes other calls than the log
                journal.poisoned = None  # (Journal._check's) so that the block is written
                self._block(journal, err)
            finally:
                self.active.remove(journal)

    def _cancel_inside(self, journal: Journal, c: Cancelling) -> RunHandle:
        """A cancel requested while the run executed here: compensate if asked, then end.
        The request is delivered again until the run ends (each heartbeat, each look for
        cancels): out of ``_active``, the compensation is not interrupted by it."""
        self.active.remove(journal)
        journal.interrupt(None)
        by, reason = c.by, c.reason
        if by is None and reason is None:  # asked from another process: its audit record
            asked = [
                r
                for r in self.deps.store.read_audit(journal.run_id)
                if r.action == CANCEL_REQUESTED
            ]
            if asked:
                by, reason = asked[-1].actor, codec.decode(asked[-1].detail).get("why")
        ctx = {"type": "cancelled", "message": reason or "cancel requested", "by": by}
        return self.cancel_with(journal, ctx, c.compensate)

    def cancel_with(self, journal: Journal, ctx: dict[str, Any], compensate: bool) -> RunHandle:
        if compensate and journal.compensating is None:
            state = self.states.load(journal.run_id)
            if compensation.compensable(state, self.registry.find_tool):
                compensation.start(journal, state, RunStatus.CANCELLED, ctx)
                journal.compensating = self.states.load(journal.run_id).compensating
        if journal.compensating is not None:
            ctx = drive(self._fail_core(journal, ctx, RunStatus.CANCELLED), self.deps.clock)
        return self._cancelled(journal, ctx)

    def _cancelled(self, journal: Journal, ctx: dict[str, Any]) -> RunHandle:
        data = {
            "by": ctx.get("by"),
            "reason": ctx.get("message"),
            "compensation_failures": ctx.get("compensation_failures"),
        }
        journal.append(
            [journal.event(ev.RUN_CANCELLED, data)], Transition(RunStatus.CANCELLED, release=True)
        )
        return RunHandle(
            journal.run_id,
            RunStatus.CANCELLED,
            None,
            ctx,
            tuple(journal.reused),
            tuple(journal.executed),
        )

    def _suspend(self, journal: Journal, reason: str) -> None:
        try:
            journal.poisoned = None
            journal.append(
                [journal.event(ev.RUN_SUSPENDED, {"reason": reason, "status": "queued"})],
                Transition(RunStatus.QUEUED, release=True),
            )
        except TetherError as e:  # best effort: the lease expires anyway
            log.warning("could not suspend run %s cleanly: %s", journal.run_id, e)
