"""Queues: their flow control, and runs enqueued for the workers.

Declared with ``app.queue(...)`` (see :class:`QueueConfig`); a queue not declared has no
limits. ``app.start`` enqueues a run (:meth:`Queues.start`): the store tells the queue's
waiting workers in the same commit (PostgreSQL: NOTIFY).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tether.context.conversation import Session
from tether.engine import tracing as traces
from tether.engine.children import Spawner
from tether.engine.deps import Deps
from tether.engine.executor import Executor, Prepared, RunHandle
from tether.engine.registry import AgentDef, Registry
from tether.errors import Conflict, EncodeError, InvalidInput, NondeterminismError, RunFailed
from tether.model import events as ev
from tether.model import inputs
from tether.model.budgets import Limits, check_limits
from tether.model.clock import new_run_id
from tether.model.durations import Duration, parse_duration
from tether.model.status import RunStatus
from tether.services import sessions
from tether.store import NewRun, QueueLimits


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """Flow control of one queue (see :meth:`tether.App.queue`)."""

    name: str
    concurrency: int | None = None  # at once, all workers together
    worker_concurrency: int | None = None  # at once, in one worker
    per_key: int | None = None  # at once, per concurrency_key (one tenant cannot take all)
    rate: tuple[int, float] | None = None  # at most N starts per period (seconds)
    max_depth: int | None = None  # queued runs beyond this are refused (QueueFull)

    def __post_init__(self) -> None:
        for name in ("concurrency", "worker_concurrency", "per_key", "max_depth"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(
                    f"queue {self.name!r}: {name} must be a positive int, not {value!r}"
                )
        if self.rate is not None and (len(self.rate) != 2 or self.rate[0] < 1 or self.rate[1] <= 0):
            raise ValueError(
                f"queue {self.name!r}: rate is (starts, period_seconds), "
                f"e.g. (100, 60), not {self.rate!r}"
            )

    def limits(self) -> QueueLimits:
        return QueueLimits(self.name, self.concurrency, self.per_key, self.rate)

    @property
    def limited(self) -> bool:
        """Whether any limit applies, across workers or in one."""
        return self.worker_concurrency is not None or self.limits().limited


class Queues:
    """The queues declared on an App, and the runs it enqueues."""

    def __init__(self, deps: Deps, registry: Registry, executor: Executor) -> None:
        self.deps = deps
        self.registry = registry
        self.executor = executor  # checks a run's input as app.run does
        self._queues: dict[str, QueueConfig] = {}

    def declare(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        worker_concurrency: int | None = None,
        per_key: int | None = None,
        rate: tuple[int, float] | None = None,
        max_depth: int | None = None,
    ) -> QueueConfig:
        """Declare a queue's flow control (see :meth:`tether.App.queue`)."""
        inputs.name(name, "queue")
        for what, value in (
            ("concurrency", concurrency),
            ("worker_concurrency", worker_concurrency),
            ("per_key", per_key),
            ("max_depth", max_depth),
        ):
            if value is not None:
                inputs.integer(value, f"queue {name!r}: {what}", low=1)
        if rate is not None:
            _check_rate(name, rate)
        config = QueueConfig(name, concurrency, worker_concurrency, per_key, rate, max_depth)
        self._queues[name] = config
        return config

    def config(self, name: str) -> QueueConfig:
        """The flow control of queue ``name`` (no limits unless declared)."""
        return self._queues.get(name) or QueueConfig(name)

    def start(
        self,
        session: Session | str | None,
        agent: Callable[..., Any] | str,
        *args: Any,
        queue: str = "default",
        priority: int = 0,
        run_id: str | None = None,
        dedup_key: str | None = None,
        delay: Duration | None = None,
        concurrency_key: str | None = None,
        limits: Limits | None = None,
        **kwargs: Any,
    ) -> str:
        """Enqueue a run of ``agent`` (in ``session``, when given) and return its id; see
        :meth:`tether.App.start` for the arguments."""
        options = Start(queue, priority, run_id, dedup_key, delay, concurrency_key, limits)
        return self.enqueue(session, agent, args, kwargs, options)

    def spawner(self) -> Spawner:
        """How ``run.child`` starts runs: enqueued here, under the id it derives."""

        def start(
            d: AgentDef,
            args: tuple[Any, ...],
            kwargs: dict[str, Any],
            queue: str,
            run_id: str,
            caller: dict[str, Any],
            tenant: str | None,
            session: str | None = None,
            handoff: dict[str, Any] | None = None,
        ) -> str:
            o = Start(queue=queue, run_id=run_id)
            return self.enqueue(
                session, d, args, kwargs, o, tenant=tenant, caller=caller, handoff=handoff
            )

        ex = self.executor
        return Spawner(
            self.registry.resolve, start, self.inline, ex_run(ex), ex_arun(ex), self.start_many
        )

    def inline(
        self,
        d: AgentDef,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        queue: str,
        run_id: str,
        caller: dict[str, Any],
        tenant: str | None,
        later: bool = False,
    ) -> Prepared | None:
        """An inline child (engine.inline), ready to execute here under this process's
        lease: created (in ``queue``, where a worker takes it over should this process die
        under it; ``later``: with its first append, engine.births), or claimed when it
        exists unfinished and its lease is free (a dead local holder's is taken over).
        None when it is finished, waits, is blocked, or executes elsewhere: the parent
        records it, or waits for it."""
        ex, store = self.executor, self.deps.store
        try:  # most often the first time: no read first
            prepared = ex.create(
                d,
                args,
                kwargs,
                tenant=tenant,
                run_id=run_id,
                queue=queue,
                caller=caller,
                later=later,
            )
        except Conflict:  # it exists: a resumed parent (or a zombie one created it)
            record = store.get_run(run_id)
        else:
            prepared[1].inline = True
            return prepared
        if record.status not in (RunStatus.RUNNING, RunStatus.QUEUED):
            return None
        try:
            lease = ex.leases.claim(record)
        except Conflict:  # another process executes it: the parent waits for it
            return None
        prepared_or_done = ex.prepare_claimed(ex.registry.agent_for(record), record, lease)
        if isinstance(prepared_or_done, RunHandle):
            return None
        prepared_or_done[1].inline = True
        return prepared_or_done

    def enqueue(
        self,
        session: Session | str | None,
        agent: Callable[..., Any] | str | AgentDef,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        o: Start,
        *,
        tenant: str | None = None,
        caller: dict[str, Any] | None = None,
        handoff: dict[str, Any] | None = None,
    ) -> str:
        """:meth:`start` with the options as a Start; the run's owner (its tenant) is the
        session's, else ``tenant``; ``caller``: a child run's parent (engine.children);
        ``handoff``: what a handoff's target is handed (engine.handoffs)."""
        now = self.deps.clock.now()
        new, created = self._new(session, agent, args, kwargs, o, now, tenant, caller, handoff)
        rid, _ = self.deps.store.enqueue(
            new, [created], now=now, max_depth=self.config(o.queue).max_depth
        )
        return rid  # the store told waiting workers (PostgreSQL: NOTIFY in the same commit)

    def start_many(
        self,
        d: AgentDef,
        calls: list[tuple[tuple[Any, ...], dict[str, Any], str, dict[str, Any]]],
        queue: str,
        tenant: str | None,
    ) -> list[str]:
        """Enqueue child runs of ``d`` (``calls``: each one's args, kwargs, id and caller)
        in one transaction, those whose ids are taken left as they are (engine.children's
        ``run.children``); every input is checked before anything is written."""
        now = self.deps.clock.now()
        runs = []
        for i, (args, kwargs, run_id, caller) in enumerate(calls):
            o = Start(queue=queue, run_id=run_id)
            try:
                new, created = self._new(None, d, args, kwargs, o, now, tenant, caller, None)
            except (EncodeError, InvalidInput) as e:
                raise type(e)(f"run.children, item {i}: {e}") from None
            runs.append((new, [created]))
        depth = self.config(queue).max_depth
        if depth is None:
            self.deps.store.enqueue_many(runs, now=now)
        else:  # a bounded queue's depth is checked (QueueFull) per run, as app.start does
            for new, events in runs:
                self.deps.store.enqueue(new, events, now=now, max_depth=depth)
        return [run.id for run, _ in runs]

    def _new(
        self,
        session: Session | str | None,
        agent: Callable[..., Any] | str | AgentDef,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        o: Start,
        now: float,
        tenant: str | None,
        caller: dict[str, Any] | None,
        handoff: dict[str, Any] | None,
    ) -> tuple[NewRun, ev.NewEvent]:
        """A queued run's row and its ``run.created``, its input and options checked."""
        d = agent if isinstance(agent, AgentDef) else self.registry.resolve(agent)
        _check_start(o.queue, o.priority, o.run_id, o.dedup_key, o.concurrency_key)
        check_limits(o.limits, "limits")
        seconds = parse_duration(o.delay, what="delay") or 0.0
        payload = self.executor.check_input(d, args, kwargs)
        if session is not None:  # after the checks: bad input creates no session either
            session = sessions.of(self.deps, session)
        sid, owner = (session.id, session.owner) if session is not None else (None, tenant)
        new = NewRun(
            o.run_id or new_run_id(now),
            d.name,
            d.version,
            RunStatus.QUEUED,
            code=d.code,
            session_id=sid,
            owner=owner,
            queue=o.queue,
            priority=o.priority,
            available_at=now + seconds,
            dedup_key=o.dedup_key,
            concurrency_key=o.concurrency_key,
        )
        data = {
            "agent": d.name,
            "version": d.version,
            "input": payload,
            "code": d.code,
            "queue": o.queue,
        }
        if session is not None:
            data["session"] = session.id
        tracing = self.executor.tracing
        traceparent = tracing and traces.enqueued(tracing, d.name, new.id, o.queue)
        if traceparent is not None:  # the trace its executions (on any worker) join
            data["trace"] = traceparent
        if o.limits is not None:
            data["limits"] = o.limits.data()
        if caller is not None:
            data["caller"] = caller
        if handoff is not None:
            data["handoff"] = handoff
        return new, ev.new(ev.RUN_CREATED, data, now)


@dataclass(frozen=True, slots=True)
class Start:
    """The options of a start (see :meth:`tether.App.start`), apart from the agent's."""

    queue: str = "default"
    priority: int = 0
    run_id: str | None = None
    dedup_key: str | None = None
    delay: Duration | None = None
    concurrency_key: str | None = None
    limits: Limits | None = None  # the run's own (tether.model.budgets)


def _check_rate(queue: str, rate: Any) -> None:
    if not isinstance(rate, tuple | list) or len(rate) != 2:
        raise InvalidInput(f"queue {queue!r}: rate is (starts, period_seconds), e.g. (100, 60)")
    inputs.integer(rate[0], f"queue {queue!r}: rate's starts", low=1)
    inputs.seconds(rate[1], f"queue {queue!r}: rate's period", above=True)


def _check_start(
    queue: Any, priority: Any, run_id: Any, dedup_key: Any, concurrency_key: Any
) -> None:
    """``start``'s options, checked before anything is written (see tether.model.inputs)."""
    inputs.name(queue, "queue")
    inputs.integer(priority, "priority")
    if run_id is not None:
        inputs.run_id(run_id)
    inputs.optional_name(dedup_key, "dedup_key")
    inputs.optional_name(concurrency_key, "concurrency_key")


def ex_run(ex: Executor) -> Callable[[Any], dict[str, Any] | None]:
    """Execute a prepared inline child in this thread, to its end, wait or block (a
    failure or a block is recorded in the child's log first); return its outcome when it
    ended completed or failed (what children.outcome reads from its log), else None."""

    def run(prepared: Any) -> dict[str, Any] | None:
        try:
            return _ended(ex.continue_run(prepared))
        except RunFailed as e:
            return _failed(e)
        except NondeterminismError:  # blocked: the parent waits for it
            return None

    return run


def ex_arun(ex: Executor) -> Callable[[Any], Awaitable[dict[str, Any] | None]]:
    """:func:`ex_run` in the running event loop (an async parent's)."""

    async def arun(prepared: Any) -> dict[str, Any] | None:
        try:
            return _ended(await ex.acontinue_run(prepared))
        except RunFailed as e:
            return _failed(e)
        except NondeterminismError:
            return None

    return arun


def _ended(handle: RunHandle) -> dict[str, Any] | None:
    if handle.status != RunStatus.COMPLETED:
        return None  # waiting, blocked, cancelled: the parent reads the child's log
    return {"run": handle.id, "status": str(RunStatus.COMPLETED), "output": handle.output}


def _failed(e: RunFailed) -> dict[str, Any]:
    keys = ("type", "message", "step", "position")
    error = {k: e.error.get(k) for k in keys if k in e.error}
    return {"run": e.run_id, "status": str(RunStatus.FAILED), "error": error}
