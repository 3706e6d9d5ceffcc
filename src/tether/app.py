"""The App: agents registered on one store, run durably, resumed after a crash."""

from __future__ import annotations

import inspect
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, NoReturn, TextIO, TypeVar, cast, overload

from tether.context.artifacts import Artifacts, ArtifactStore, DatabaseArtifacts
from tether.context.conversation import Session, Summarizer, make_policy, open_session
from tether.context.memory import Memory
from tether.engine import compensation, registry, waits
from tether.engine.calls import Cancelling, Core, Stopping, Suspended, agent_body
from tether.engine.effects import ToolDef, define_tool, guarded
from tether.engine.journal import Journal
from tether.engine.policy import Policy
from tether.engine.retry import NO_RETRY, Retry
from tether.engine.runtime import AsyncRun, Run, adrive, drive
from tether.errors import (
    ClockSkew,
    Conflict,
    EncodeError,
    InvalidInput,
    InvalidState,
    LeaseLost,
    NondeterminismError,
    NotFound,
    RunFailed,
    StoreError,
    StoreUnavailable,
    TetherError,
)
from tether.model import codec, inputs, integrity
from tether.model import events as ev
from tether.model.clock import Clock, SystemClock, new_run_id, owner_is_dead_local, process_owner
from tether.model.durations import Duration, parse_duration
from tether.model.events import Event
from tether.model.state import FINISHED, RunState, fold
from tether.services import export, retention, timetravel
from tether.services.worker import POISON_AFTER, QueueConfig, Worker, heartbeat
from tether.store import AuditRecord, Effect, Lease, NewRun, RunRecord, Store, Transition, snapshots

log = logging.getLogger("tether")
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class AgentDef:
    """A registered agent: its name, version, function and where its code lives."""

    name: str
    version: str | None
    fn: Callable[..., Any]
    is_async: bool
    code: dict[str, Any]


# A run ready to execute here: its agent, journal (under a lease), run object and input.
Prepared = tuple[AgentDef, Journal, Run | AsyncRun, tuple[Any, ...], dict[str, Any]]
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


class App:
    """Agents registered on one store. Create with :func:`tether.open`."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock | None = None,
        retry: Retry = NO_RETRY,
        snapshot_every: int = 500,
        lease_ttl: float = 30.0,
        url: str = "",
        policy: Policy | None = None,
        approver_groups: dict[str, Iterable[str]] | None = None,
        inline_sleep_max: float = 60.0,
        code: Iterable[str] | None = None,
    ) -> None:
        if snapshot_every < 1:
            raise ValueError(f"snapshot_every must be >= 1, not {snapshot_every}")
        self.store = store
        self.clock = clock or SystemClock()
        self.retry = retry
        self.snapshot_every = snapshot_every
        self.lease_ttl = lease_ttl
        self.url = url
        self.owner = process_owner()
        self._agents: dict[str, AgentDef] = {}
        self._tools: dict[str, ToolDef] = {}
        self._queues: dict[str, QueueConfig] = {}
        self._active: dict[str, Journal] = {}  # executions in this process, by run id
        self._letting_go: dict[str, tuple[int, Transition | None]] = {}  # see let_go
        self._letting_go_lock = threading.Lock()
        store.unwritten_end = self._unwritten_end
        self._heartbeat: _Heartbeat | None = None
        self.policy = policy or Policy()
        self.approver_groups = waits.approver_groups(approver_groups)
        self.inline_sleep_max = inline_sleep_max
        self._clock_offset: float | None = None  # measured by check_clock, once
        self.code = registry.check_modules(code)  # modules a run's record may make us import

    # -- registration -----------------------------------------------------

    @overload
    def agent(self, fn: F) -> F: ...

    @overload
    def agent(self, *, name: str | None = None, version: str | None = None) -> Callable[[F], F]: ...

    def agent(
        self, fn: F | None = None, *, name: str | None = None, version: str | None = None
    ) -> F | Callable[[F], F]:
        """Register an agent: a function whose first parameter is the ``run`` object."""

        def register(f: F) -> F:
            agent(name=name, version=version)(f)
            d: AgentDef = f.__tether_agent__  # type: ignore[attr-defined]
            self._agents[d.name] = d
            return f

        return register(fn) if fn is not None else register

    def agents(self) -> dict[str, AgentDef]:
        """The registered agents by name."""
        return dict(self._agents)

    def tool(
        self,
        fn: F | None = None,
        *,
        risk: str = "write",
        compensate: Callable[..., Any] | None = None,
        on_doubt: str | None = None,
        retry: Retry | None = None,
        name: str | None = None,
    ) -> F | Callable[[F], F]:
        """Register a tool: ``risk`` is ``read``, ``write`` (default) or ``irreversible``.

        ``compensate(result, *args, **kwargs)`` undoes a completed call when the run
        fails or is cancelled with compensation; ``on_doubt`` is ``retry`` (call again
        with the same idempotency key) or ``ask`` (pause for a human) after a crash or
        a timeout that hid whether the call happened. Left out, it is ``retry`` for a
        ``write`` tool that takes ``idempotency_key`` and ``ask`` otherwise (see
        :mod:`tether.engine.effects` and docs/guarantees.md).
        """

        def register(f: F) -> F:
            declared = tool(
                risk=risk, compensate=compensate, on_doubt=on_doubt, retry=retry, name=name
            )(f)
            d: ToolDef = declared.__tether_tool__  # type: ignore[attr-defined]
            self._tools[d.name] = d
            return declared

        return register(fn) if fn is not None else register

    def tools(self) -> dict[str, ToolDef]:
        """The registered tools by name."""
        return dict(self._tools)

    def allow_code(self, *modules: str) -> None:
        """Allow importing ``modules`` (and their submodules) to find the agents and tools
        of runs this app did not register (see :mod:`tether.engine.registry`)."""
        self.code = self.code | registry.check_modules(modules)

    def _may_import(self, module: str) -> bool:
        """Whether a module a run names may be imported: allowed by ``code``, or the module
        of an agent or tool registered here."""
        defs: list[AgentDef | ToolDef] = [*self._agents.values(), *self._tools.values()]
        mine = {d.code.get("module") for d in defs}
        return module in mine or registry.allowed(module, self.code)

    def _find_tool(self, name: str, code: Any) -> ToolDef | None:
        """The tool of a step, for its compensation; None (logged) when it cannot be found:
        the run's failure is recorded all the same (``cancel(compensate=True)`` refuses
        instead, see :meth:`_lookup_tool`)."""
        try:
            return self._lookup_tool(name, code)
        except NotFound as e:
            log.warning("no compensation for tool %r: %s", name, e)
            return None

    def _lookup_tool(self, name: str, code: Any) -> ToolDef | None:
        found = self._tools.get(name)
        if found is not None or not code:
            return found
        what = f"tool {name!r}"
        d = registry.find(dict(code), "__tether_tool__", self._may_import, what)
        return d if isinstance(d, ToolDef) else None

    def queue(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        worker_concurrency: int | None = None,
        per_key: int | None = None,
        rate: tuple[int, float] | None = None,
        max_depth: int | None = None,
    ) -> QueueConfig:
        """Declare a queue's flow control: ``concurrency`` (all workers together),
        ``worker_concurrency`` (one worker), ``per_key`` (per concurrency_key), ``rate``
        ``(starts, period_seconds)`` and ``max_depth`` (refuse new runs beyond it)."""
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

    def queue_config(self, name: str) -> QueueConfig:
        """The flow control of queue ``name`` (no limits unless declared)."""
        return self._queues.get(name) or QueueConfig(name)

    def start(
        self,
        agent: Callable[..., Any] | str,
        *args: Any,
        queue: str = "default",
        priority: int = 0,
        run_id: str | None = None,
        dedup_key: str | None = None,
        delay: Duration | None = None,
        concurrency_key: str | None = None,
        **kwargs: Any,
    ) -> str:
        """Enqueue a run for the workers and return its id (``queued``).

        An existing ``run_id``, or a ``dedup_key`` held by an unfinished run of the same
        queue (queued, running, waiting or blocked), returns that run's id instead of
        starting a second one. ``delay`` (seconds, a timedelta or ``"10m"``) makes it
        claimable later; higher ``priority`` first. Raises QueueFull when the queue is at
        its ``max_depth``; ValueError or TypeError, naming the parameter, for a value
        :mod:`tether.model.inputs` refuses.
        """
        return self.start_in(
            None,
            agent,
            *args,
            queue=queue,
            priority=priority,
            run_id=run_id,
            dedup_key=dedup_key,
            delay=delay,
            concurrency_key=concurrency_key,
            **kwargs,
        )

    def start_in(
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
        **kwargs: Any,
    ) -> str:
        """``start`` in a conversation: the queued run belongs to ``session`` (a Session or
        its id, created if new; None: no session, as ``start``), as with :meth:`run_in`,
        and the worker that executes it finds it as ``run.session``. The other arguments
        are :meth:`start`'s."""
        d = self._resolve(agent)
        now = self.clock.now()
        _check_start(queue, priority, run_id, dedup_key, concurrency_key)
        seconds = parse_duration(delay, what="delay") or 0.0
        payload = self._input(d, args, kwargs)
        if isinstance(session, str):  # after the checks: bad input creates no session either
            session = self.session(session)
        elif session is not None and not isinstance(session, Session):
            raise InvalidInput(
                f"a session is a Session or its session id (a str), not {inputs.show(session)}"
            )
        sid, owner = (session.id, session.owner) if session is not None else (None, None)
        new = NewRun(
            run_id or new_run_id(now),
            d.name,
            d.version,
            "queued",
            code=d.code,
            session_id=sid,
            owner=owner,
            queue=queue,
            priority=priority,
            available_at=now + seconds,
            dedup_key=dedup_key,
            concurrency_key=concurrency_key,
        )
        data = {
            "agent": d.name,
            "version": d.version,
            "input": payload,
            "code": d.code,
            "queue": queue,
        }
        if session is not None:
            data["session"] = session.id
        created = ev.new(ev.RUN_CREATED, data, now)
        rid, _ = self.store.enqueue(
            new, [created], now=now, max_depth=self.queue_config(queue).max_depth
        )
        return rid  # the store told waiting workers (PostgreSQL: NOTIFY in the same commit)

    def worker(
        self,
        *,
        queues: Sequence[str] = ("default",),
        concurrency: int = 8,
        poll: float = 0.2,
        cpu: int | str | None = None,
        prefetch: int | None = None,
        poison_after: int = POISON_AFTER,
    ) -> Worker:
        """A worker that claims runs from ``queues`` on this app's store; call ``.run()``.
        ``cpu``: pin the process to a CPU number, or ``"auto"`` (see :mod:`tether.services.cpus`).
        ``prefetch``: runs to claim ahead of the free slots (0: never; None: while runs are
        short, see :mod:`tether.services.worker`). ``poison_after``: executions in a row that end in
        an error outside the run's steps before the run is failed (see tether.services.worker)."""
        if isinstance(queues, str) or not isinstance(queues, Sequence) or not queues:
            raise InvalidInput(
                f"queues is a list of queue names, e.g. ['default'], not {inputs.show(queues)}"
            )
        for q in queues:
            inputs.name(q, "queues: a queue")
        for what, n in (("concurrency", concurrency), ("prefetch", prefetch)):
            if isinstance(n, int) and n > MAX_CONCURRENCY:  # the rest: Worker's checks
                raise InvalidInput(f"{what} must be at most {MAX_CONCURRENCY} runs, not {n}")
        return Worker(
            self,
            queues=queues,
            concurrency=concurrency,
            poll=poll,
            cpu=cpu,
            prefetch=prefetch,
            poison_after=poison_after,
        )

    def executing(self, owner: str) -> bool:
        """Whether this process executes a run under a lease of ``owner`` (this app's
        ``owner``, or a worker's id)."""
        return any(j.lease.owner == owner for j in list(self._active.values()))

    def let_go(
        self, run_id: str, epoch: int, transition: Transition | None = None, *, again: bool = False
    ) -> bool:
        """Give back the lease (``epoch``) of a run this process no longer executes: release
        it, or make the run ``transition`` (e.g. queued again, due later). Best effort: when
        the database refuses (it is down), the heartbeat thread tries again every second
        (``again``: such a try, which logs nothing), since a heartbeat would otherwise
        extend the lease for as long as this process lives. Returns whether the lease is
        given back (or another process holds the run now)."""
        try:
            for attempt in (1, 2):  # a lost connection fails once: the store then replaces it
                try:
                    if transition is None:
                        self.store.release(run_id, epoch=epoch)
                    else:
                        self.store.append(
                            run_id,
                            [],
                            expected_seq=0,
                            epoch=epoch,
                            transition=transition,
                            now=self.clock.now(),
                        )
                    break
                except StoreError:
                    if attempt == 2:
                        raise
        except LeaseLost:
            pass  # another process holds it now
        except Exception as e:
            with self._letting_go_lock:
                self._letting_go[run_id] = (epoch, transition)
            if not again:
                log.warning("could not give run %s back yet (retried every second): %s", run_id, e)
            return False
        with self._letting_go_lock:
            self._letting_go.pop(run_id, None)
        return True

    def _unwritten_end(self, run_id: str, epoch: int) -> None:
        """A worker run's final event was not committed (Store.unwritten_end, called where
        the store found out, so no write here): the heartbeat thread gives its lease back
        within a second, and the worker that claims it writes the event again."""
        with self._letting_go_lock:
            self._letting_go[run_id] = (epoch, None)

    def retry_let_go(self) -> None:
        """Try again to give back the leases :meth:`let_go` could not (the heartbeat
        thread, every second; nothing to do nearly always)."""
        with self._letting_go_lock:
            pending = list(self._letting_go.items())
        for run_id, (epoch, transition) in pending:
            self.let_go(run_id, epoch, transition, again=True)

    def interrupt(self, run_id: str, exc: BaseException) -> bool:
        """Stop a run executing in this process at its next position (``exc`` is raised
        there: Stopping puts it back in the queue, Cancelling cancels it)."""
        journal = self._active.get(run_id)
        if journal is None:
            return False
        journal.interrupted = exc
        return True

    def may_approve(self, by: str, approvers: Iterable[str], *, groups: Iterable[str] = ()) -> bool:
        """Whether identity ``by`` is one of ``approvers`` or a member of one of their groups.

        A name in ``approver_groups`` (or in ``groups``: the ones the request recorded as
        groups) is a group: never an identity, so ``by`` equal to it does not count."""
        named = set(groups) | self.approver_groups.keys()
        if by in named:
            return False
        return any(
            by in self.approver_groups.get(a, ()) if a in named else by == a for a in approvers
        )

    def _resolve(self, agent: Callable[..., Any] | str) -> AgentDef:
        if isinstance(agent, str):
            found = self._agents.get(inputs.name(agent, "agent"))
            if found is None:
                raise NotFound(
                    f"no agent named {agent!r} is registered on this app (registered: "
                    f"{', '.join(sorted(self._agents)) or 'none'}); decorate it with @app.agent"
                )
            return found
        d = getattr(agent, "__tether_agent__", None)
        if not isinstance(d, AgentDef):
            raise NotFound(
                f"{getattr(agent, '__qualname__', agent)!r} is not a tether agent; "
                f"decorate it with @app.agent"
            )
        return d

    # -- starting and resuming --------------------------------------------

    def run(self, agent: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> RunHandle:
        """Create a run and execute it inline, durably. Raises RunFailed if it fails."""
        d = self._resolve(agent)
        journal, run = self._create(d, args, kwargs)
        return self._execute(d, journal, run, args, kwargs)

    def run_in(
        self, session: Session | str, agent: Callable[..., Any] | str, *args: Any, **kwargs: Any
    ) -> RunHandle:
        """``run`` in a conversation: the run belongs to ``session`` (a Session or its id;
        recorded in its row and its ``run.created`` event) and the agent finds it as
        ``run.session``, where ``run.llm(…, messages=…)`` records its prompt as references
        to the stored messages."""
        if not isinstance(session, Session | str):
            raise InvalidInput(
                f"a session is a Session or its session id (a str), not {inputs.show(session)}"
            )
        s = session if isinstance(session, Session) else self.session(session)
        d = self._resolve(agent)
        journal, run = self._create(d, args, kwargs, session=s)
        run._session = s.bound(run.id, run)
        return self._execute(d, journal, run, args, kwargs)

    def session(
        self,
        session_id: str,
        *,
        owner: str | None = None,
        compact_at_tokens: int | None = None,
        summarize: Summarizer | None = None,
        keep_last: int = 6,
    ) -> Session:
        """Get or create the conversation ``session_id`` (see :mod:`tether.context.conversation`).

        An existing session with another owner raises Conflict. With
        ``compact_at_tokens`` and ``summarize``, every ``add`` compacts the session once
        its prompt view passes that many tokens, keeping the last ``keep_last`` messages.
        """
        inputs.name(session_id, "the session id")
        inputs.optional_name(owner, "owner")
        if compact_at_tokens is not None:
            inputs.integer(compact_at_tokens, "compact_at_tokens", low=1)
        inputs.integer(keep_last, "keep_last", low=0)
        policy = make_policy(compact_at_tokens, summarize, keep_last)
        return open_session(self.store, self.clock, session_id, owner=owner, policy=policy)

    async def arun(self, agent: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> RunHandle:
        """``run`` for use inside an event loop (``async def`` agents)."""
        d = self._resolve(agent)
        journal, run = self._create(d, args, kwargs)
        return await self._aexecute(d, journal, run, args, kwargs)

    def resume(self, run_id: str) -> RunHandle:
        """Continue a run that stopped: completed steps are reused, the rest run.

        A waiting run resumes once what it waits for has happened (a decision, a
        signal, its timer: resuming a sleeping run sleeps only what is left). A run
        whose compensation was interrupted finishes it. A blocked run (its code changed
        under it) goes on once the code matches its log again; while it does not, the
        run stays blocked and NondeterminismError is raised.
        """
        return self._continue(self._prepare_resume(inputs.lookup_id(run_id), retry=False))

    async def aresume(self, run_id: str) -> RunHandle:
        """``resume`` for use inside an event loop (the same preparation and cases)."""
        return await self._acontinue(self._prepare_resume(inputs.lookup_id(run_id), retry=False))

    def retry_run(self, run_id: str, *, in_queue: bool = False) -> RunHandle:
        """Execute a failed run again from its failed step (completed steps are reused), or
        a blocked one once its code matches its log again (as :meth:`resume`).

        ``in_queue``: do not execute it here; put it back in the queue it was started in
        (``app.start``), where a worker of that queue retries it. Returns at once, with
        status ``queued``. The log records who asked (``run.suspended``, reason ``retry
        requested``, or ``resume requested`` for a blocked run).
        """
        inputs.lookup_id(run_id)
        if in_queue:
            return self._requeue(run_id)
        return self._continue(self._prepare_resume(run_id, retry=True))

    def _requeue(self, run_id: str) -> RunHandle:
        record = self.store.get_run(run_id)
        if record.status not in ("failed", "blocked"):
            raise InvalidState(
                f"run {run_id} is {record.status}, not failed or blocked; only those can be "
                f"put back in their queue"
            )
        if record.queue is None:
            raise InvalidState(
                f"run {run_id} was not started in a queue (it ran through app.run), so no "
                f"worker would take it; retry it in this process: `tether retry {run_id} --here`"
            )
        state = self.load(run_id)
        if record.status == "failed":
            self._check_retryable(state)
        why = "retry requested" if record.status == "failed" else "resume requested"
        data = {"reason": why, "status": "queued", "queue": record.queue}
        waits.append_outside(self, state, ev.RUN_SUSPENDED, data)
        return RunHandle(run_id, "queued", None, dict(state.failure or {}) or None)

    def _create(
        self,
        d: AgentDef,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        session: Session | None = None,
    ) -> tuple[Journal, Run | AsyncRun]:
        self.check_clock()
        now = self.clock.now()
        run_id = new_run_id(now)
        payload = self._input(d, args, kwargs)
        data = {"agent": d.name, "version": d.version, "input": payload, "code": d.code}
        if session is not None:
            data["session"] = session.id
        created = ev.new(ev.RUN_CREATED, data, now)
        started = ev.new(ev.RUN_STARTED, {"by": self.owner, "epoch": 1}, now, self.owner)
        sid, owner = (session.id, session.owner) if session is not None else (None, None)
        lease = self.store.create_run(
            NewRun(run_id, d.name, d.version, "running", code=d.code, session_id=sid, owner=owner),
            [created, started],
            lease_owner=self.owner,
            now=now,
            ttl=self.lease_ttl,
        )
        assert lease is not None
        state = fold(
            [
                Event(run_id, i, e.type, e.data, e.at, e.actor)
                for i, e in enumerate([created, started], 1)
            ]
        )
        return self._journal(d, state, lease)

    def _input(self, d: AgentDef, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        payload = {"args": list(args), "kwargs": kwargs}
        try:
            codec.encode(payload)
        except EncodeError as e:
            where = e.path.replace("$.args", "args", 1).replace("$.kwargs", "kwargs", 1)
            why = f"{e.type_name} at {where}"
            if e.type_name in (codec.CYCLE, codec.TOO_DEEP):  # the codec's words say which
                why = str(e).split(": ", 1)[-1].split(". ")[0].replace("$.", "")
            raise EncodeError(
                f"agent {d.name!r}: its input cannot be stored: {why}; "
                f"pass plain data to agents. No run was created.",
                path=e.path,
                type_name=e.type_name,
            ) from None
        return payload

    def _journal(
        self, d: AgentDef, state: RunState, lease: Lease
    ) -> tuple[Journal, Run | AsyncRun]:
        self._ensure_heartbeat()
        journal = Journal(
            self.store,
            self.clock,
            state,
            lease,
            actor=lease.owner,
        )
        cls = AsyncRun if d.is_async else Run
        self._active[state.run_id] = journal
        groups = self.approver_groups.keys()  # recorded with approval requests
        return journal, cls(journal, d.name, self.retry, self.policy, self.inline_sleep_max, groups)

    def _prepare_resume(self, run_id: str, *, retry: bool) -> RunHandle | Prepared:
        record = self.store.get_run(run_id)
        if record.status in ("completed", "cancelled") or (record.status == "failed" and not retry):
            return self._finished(record)
        if retry and record.status not in ("failed", "blocked"):
            raise InvalidState(
                f"run {run_id} is {record.status}, not failed or blocked; only those "
                f"can be retried (use resume)"
            )
        if retry and record.status == "failed":
            self._check_retryable(self.load(run_id))
        if record.status == "waiting":
            blocked = waits.resumable(self, self.load(run_id))
            if blocked is not None:
                raise InvalidState(blocked)
        d = self._agent_for(record)
        return self._prepare_claimed(d, record, self._claim(record), retry=retry)

    def _prepare_claimed(
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
        state = self.load(record.id)
        if state.status in ("completed", "cancelled"):  # finished while we were claiming
            self.store.release(record.id, epoch=lease.epoch)
            return self._finished(record)
        journal, run = self._journal(d, state, lease)
        journal.detached_end = worker
        started = {"by": lease.owner, "epoch": lease.epoch, "retry": retry}
        moved = None if worker else Transition("running")
        journal.defer([journal.event(ev.RUN_STARTED, started)], moved)
        args = tuple(state.input.get("args", ()))
        return d, journal, run, args, dict(state.input.get("kwargs", {}))

    def execute_claimed(self, record: RunRecord, lease: Lease) -> RunHandle:
        """Execute a run a worker claimed (``lease``): resume it, or finish its compensation.

        Raises RunFailed when the run fails (the failure is recorded first).
        """
        return self._continue(
            self._prepare_claimed(self._agent_for(record), record, lease, worker=True)
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

    def _continue(self, prepared: RunHandle | Prepared) -> RunHandle:
        """:meth:`_continuation`, carried out in this thread (an ``async def`` agent's in
        an event loop of its own, as :meth:`_execute` does: its undo functions may be
        async)."""
        step = self._continuation(prepared)
        if isinstance(step, RunHandle):
            return step
        if isinstance(step, tuple):
            return self._execute(*step)
        assert not isinstance(prepared, RunHandle)
        if prepared[0].is_async:
            import asyncio

            return asyncio.run(self._adrive_end(step))
        handle: RunHandle = drive(step, self.clock)
        return handle

    async def _acontinue(self, prepared: RunHandle | Prepared) -> RunHandle:
        """:meth:`_continuation`, carried out in the running event loop."""
        step = self._continuation(prepared)
        if isinstance(step, RunHandle):
            return step
        if isinstance(step, tuple):
            return await self._aexecute(*step)
        return await self._adrive_end(step)

    async def _adrive_end(self, core: Core) -> RunHandle:
        handle: RunHandle = await adrive(core, self.clock)
        return handle

    def _check_retryable(self, state: RunState) -> None:
        if state.compensating is not None:
            raise InvalidState(
                f"run {state.run_id} failed and its effects were compensated (undone); "
                f"retrying would reuse steps whose effects no longer exist. Start a new run, "
                f"or fork it before its first tool call."
            )

    def _finished(self, record: RunRecord) -> RunHandle:
        state = self.load(record.id)
        if state.status == "failed":
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

    def check_clock(self) -> float:
        """Seconds the database's clock is ahead of this process's; ``tether.ClockSkew`` when
        they differ by more than a third of a lease.

        A lease is a due time written with its holder's clock and judged expired by other
        processes' clocks, on other machines. A process whose clock is ahead sees live
        leases as expired (and takes their runs while they still execute: a step runs
        twice); one whose clock is behind writes leases that expire early. Measured once
        per App, before its first lease (a worker's start, the first ``app.run`` or
        resume; later calls return that measure), and logged from a second off. An
        injected clock (``clock=``, a test's own time) is not checked.
        """
        if self._clock_offset is not None:
            return self._clock_offset
        if not isinstance(self.clock, SystemClock):
            return 0.0
        offset = self.store.clock_offset(self.clock.now)
        if abs(offset) > self.lease_ttl / 3:
            raise ClockSkew(
                f"this machine's clock is {abs(offset):.1f} s "
                f"{'behind' if offset > 0 else 'ahead of'} the database's at "
                f"{getattr(self.store, 'where', 'the store')}: "
                f"leases last {self.lease_ttl:g} s and are checked against other machines' "
                f"clocks, so with more than a third of that ({self.lease_ttl / 3:.1f} s) off a "
                f"live run could be taken by a second process. Synchronise this machine's clock "
                f"(NTP, chrony), or raise lease_ttl in tether.open(...)."
            )
        if abs(offset) > 1.0:
            log.warning(
                "this machine's clock is %.1f s %s the database's; leases of %g s tolerate "
                "up to %.1f s: synchronise it (NTP, chrony)",
                abs(offset),
                "behind" if offset > 0 else "ahead of",
                self.lease_ttl,
                self.lease_ttl / 3,
            )
        self._clock_offset = offset
        return offset

    def _claim(self, record: RunRecord) -> Lease:
        self.check_clock()
        holder = record.lease_owner
        takeover = holder if holder and owner_is_dead_local(holder) else None
        return self.store.claim(
            record.id, owner=self.owner, ttl=self.lease_ttl, now=self.clock.now(), takeover=takeover
        )

    def _agent_for(self, record: RunRecord) -> AgentDef:
        found = self._agents.get(record.agent)
        if found is not None:
            return found
        what = f"run {record.id}: agent {record.agent!r}"
        d = registry.find(record.code, "__tether_agent__", self._may_import, what)
        if not isinstance(d, AgentDef) or d.name != record.agent:
            found_name = d.name if isinstance(d, AgentDef) else "no agent"
            raise NotFound(
                f"{what}: its recorded code {record.code.get('module')}."
                f"{record.code.get('qualname')} is {found_name!r}, not that agent; "
                f"pass --app pkg.module:app"
            )
        self._agents[d.name] = d
        return d

    # -- executing --------------------------------------------------------

    def _execute(
        self,
        d: AgentDef,
        journal: Journal,
        run: Run | AsyncRun,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> RunHandle:
        if d.is_async:
            import asyncio  # only for async agents: keeps `import tether` fast

            return asyncio.run(self._aexecute(d, journal, run, args, kwargs))
        with self._outage(journal):
            try:
                with agent_body(journal.run_id):
                    output = d.fn(run, *args, **kwargs)
                _raise_poison(journal)
            except BaseException as exc:
                ended = self._ended(journal, exc)
                if isinstance(ended, RunHandle):
                    return ended
                self._failed(journal, drive(ended, self.clock), exc)
            finally:
                self._active.pop(journal.run_id, None)
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
                _raise_poison(journal)
            except BaseException as exc:
                ended = self._ended(journal, exc)
                if isinstance(ended, RunHandle):
                    return ended
                self._failed(journal, await adrive(ended, self.clock), exc)
            finally:
                self._active.pop(journal.run_id, None)
            return self._complete(journal, output)

    def _ended(self, journal: Journal, exc: BaseException) -> RunHandle | Core:
        """What the agent's exception makes of the run: waiting, cancelled, blocked (the
        code no longer matches its log: recorded, then NondeterminismError raised), or the
        core that records its failure (the caller drives it, sync or async). Re-raises
        ``exc`` for a pause (a crash-like exit, a lost lease, the database gone)."""
        if isinstance(exc, Suspended):
            return self._waiting(journal, exc)
        fault = _fault(journal, exc)
        with suppress(LeaseLost, StoreUnavailable):  # poisons the journal: a pause below
            journal.flush()  # the step before the exception: its record, before the log is read
        if isinstance(exc, Cancelling):
            return self._cancel_inside(journal, exc)
        core = self._stopped(journal, exc, fault)
        if core is None:
            raise exc
        return core

    @contextmanager
    def _outage(self, journal: Journal) -> Iterator[None]:
        """The database went away under the execution (StoreUnavailable, raised on): a
        pause, not the agent's failure. A worker puts the run back in its queue; executed
        here, its lease is given back, so that `tether resume` goes on from its log once
        the database is back, from any process (the heartbeat would extend it)."""
        try:
            yield
        except StoreUnavailable:
            if not journal.detached_end:
                self.let_go(journal.run_id, journal.lease.epoch)
            raise

    def _complete(self, journal: Journal, output: Any) -> RunHandle:
        try:
            event = journal.event(ev.RUN_COMPLETED, {"output": output})
        except EncodeError as e:
            err = EncodeError(
                f"run {journal.run_id}: the agent's return value cannot be "
                f"stored: {e.type_name} at {e.path.replace('$.output', '$', 1)}",
                path=e.path,
                type_name=e.type_name,
            )
            core = self._stopped(journal, err, err)
            assert core is not None
            self._failed(journal, drive(core, self.clock), err)
        journal.append(
            [event], Transition("completed", release=True), wait=not journal.detached_end
        )
        return RunHandle(
            journal.run_id,
            "completed",
            output,
            None,
            tuple(journal.reused),
            tuple(journal.executed),
        )

    def _waiting(self, journal: Journal, s: Suspended) -> RunHandle:
        state = self.load(journal.run_id)
        return RunHandle(
            journal.run_id,
            "waiting",
            None,
            None,
            tuple(journal.reused),
            tuple(journal.executed),
            dict(state.waiting or {"for": s.waiting_for}),
        )

    def _stopped(self, journal: Journal, exc: BaseException, fault: BaseException) -> Core | None:
        """Why execution stopped (``fault``: see :func:`_fault`): None for a pause
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
        return self._fail_core(journal, journal.context_for(exc), "failed")

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
        journal.append([journal.event(ev.RUN_BLOCKED, data)], Transition("blocked", release=True))
        log.warning("run %s is blocked: %s", journal.run_id, err)
        raise err

    def _fail_core(self, journal: Journal, ctx: dict[str, Any], reason: str) -> Core:
        state = self.load(journal.run_id)
        if state.compensating is None and compensation.compensable(state, self._find_tool):
            compensation.start(journal, state, reason, ctx)
            state = self.load(journal.run_id)
        if state.compensating is not None:
            failures = yield from compensation.compensation_core(
                journal, state, self._find_tool, self.retry
            )
            if failures:
                ctx = {**ctx, "compensation_failures": failures}
        return ctx

    def _failed(self, journal: Journal, ctx: dict[str, Any], exc: BaseException | None) -> None:
        journal.append(
            [journal.event(ev.RUN_FAILED, {"error": ctx})], Transition("failed", release=True)
        )
        raise RunFailed(journal.run_id, ctx) from exc

    def _end_compensation(self, journal: Journal) -> Core:
        """Finish a compensation that a crash interrupted, then end the run: a core that
        returns the run's handle (or raises RunFailed), driven sync or async."""
        assert journal.compensating is not None
        reason = journal.compensating["reason"]
        with self._outage(journal):
            try:
                error = dict(journal.compensating.get("error") or {})
                ctx = yield from self._fail_core(journal, error, reason)
                if reason == "cancelled":
                    return self._cancelled(journal, ctx)
                self._failed(journal, ctx, None)
                raise AssertionError("unreachable")  # _failed raises
            finally:
                self._active.pop(journal.run_id, None)

    def _cancel_inside(self, journal: Journal, c: Cancelling) -> RunHandle:
        """A cancel requested while the run executed here: compensate if asked, then end.
        The request is delivered again until the run ends (each heartbeat, each look for
        cancels): out of ``_active``, the compensation is not interrupted by it."""
        self._active.pop(journal.run_id, None)
        journal.interrupted = None
        by, reason = c.by, c.reason
        if by is None and reason is None:  # asked from another process: its audit record
            asked = [
                r for r in self.store.read_audit(journal.run_id) if r.action == CANCEL_REQUESTED
            ]
            if asked:
                by, reason = asked[-1].actor, codec.decode(asked[-1].detail).get("why")
        ctx = {"type": "cancelled", "message": reason or "cancel requested", "by": by}
        return self._cancel_with(journal, ctx, c.compensate)

    def _cancel_with(self, journal: Journal, ctx: dict[str, Any], compensate: bool) -> RunHandle:
        if compensate and journal.compensating is None:
            state = self.load(journal.run_id)
            if compensation.compensable(state, self._find_tool):
                compensation.start(journal, state, "cancelled", ctx)
                journal.compensating = self.load(journal.run_id).compensating
        if journal.compensating is not None:
            ctx = drive(self._fail_core(journal, ctx, "cancelled"), self.clock)
        return self._cancelled(journal, ctx)

    def _cancelled(self, journal: Journal, ctx: dict[str, Any]) -> RunHandle:
        data = {
            "by": ctx.get("by"),
            "reason": ctx.get("message"),
            "compensation_failures": ctx.get("compensation_failures"),
        }
        journal.append(
            [journal.event(ev.RUN_CANCELLED, data)], Transition("cancelled", release=True)
        )
        return RunHandle(
            journal.run_id, "cancelled", None, ctx, tuple(journal.reused), tuple(journal.executed)
        )

    def _suspend(self, journal: Journal, reason: str) -> None:
        try:
            journal.poisoned = None
            journal.append(
                [journal.event(ev.RUN_SUSPENDED, {"reason": reason, "status": "queued"})],
                Transition("queued", release=True),
            )
        except TetherError as e:  # best effort: the lease expires anyway
            log.warning("could not suspend run %s cleanly: %s", journal.run_id, e)

    # -- reading ----------------------------------------------------------

    def load(self, run_id: str, *, upto: int | None = None) -> RunState:
        """The run's state (at ``upto``, or its head): newest snapshot + fold of the rest.

        Snapshots are a read-side cache: when this load folded ``snapshot_every`` events
        or more, it saves the state it computed, so the next load starts from there.
        Steps never pay for snapshots. Raises RunDamaged when the log has a gap or
        disagrees with the row (see :mod:`tether.model.integrity`).
        """
        inputs.lookup_id(run_id)
        if upto is not None:
            inputs.integer(upto, "upto", low=0)
        loaded = self.store.load(run_id, upto=upto)
        integrity.check_events(run_id, loaded.events, loaded.snapshot.seq if loaded.snapshot else 0)
        start = snapshots.load(self.store, loaded.snapshot) if loaded.snapshot else None
        state = fold(loaded.events, start, run_id=run_id)
        if upto is None:
            integrity.check_row(run_id, loaded.run.status, state.status, state.seq)
        if len(loaded.events) >= self.snapshot_every:
            self._cache(state)
        return state

    def _cache(self, state: RunState) -> None:
        try:
            snapshots.save(self.store, state, self.clock.now())
        except TetherError as e:  # a cache that cannot be written is not an error
            log.warning("could not save a snapshot of run %s: %s", state.run_id, e)

    def get(self, run_id: str) -> RunState:
        """The run's current state (status, position, steps, output, failure, vars, usage)."""
        return self.load(run_id)

    def events(self, run_id: str, *, after: int = 0, upto: int | None = None) -> list[Event]:
        """The run's events in seq order. Raises NotFound for an unknown run."""
        inputs.integer(after, "after", low=0)
        if upto is not None:
            inputs.integer(upto, "upto", low=0)
        self.store.get_run(inputs.lookup_id(run_id))
        return self.store.read_events(run_id, after=after, upto=upto)

    def runs(
        self, *, status: str | None = None, agent: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Runs, newest first (at most ``limit``; a status no run has matches none)."""
        inputs.optional_name(status, "status")
        inputs.optional_name(agent, "agent")
        inputs.integer(limit, "limit", low=1)
        return self.store.list_runs(status=status, agent=agent, limit=limit)

    # -- humans and the outside world (tether.engine.waits) ------------------------

    def approve(self, run_id: str, name: str, *, by: str, reason: str | None = None) -> None:
        """Approve a waiting run's request ``name``; the run becomes resumable.

        Refused (DecisionRefused, recorded in the audit log) when ``by`` is not an
        approver, the request was already decided, or the run is not waiting for it.
        """
        _check_decision(run_id, name, by, reason)
        waits.decide(self, run_id, name, approved=True, by=by, reason=reason)

    def deny(self, run_id: str, name: str, *, by: str, reason: str | None = None) -> None:
        """Deny a waiting run's request ``name``: ``run.approve`` raises ApprovalDenied."""
        _check_decision(run_id, name, by, reason)
        waits.decide(self, run_id, name, approved=False, by=by, reason=reason)

    def resolve(
        self, run_id: str, *, happened: bool, by: str, result: Any = waits.NO_RESULT
    ) -> None:
        """Settle a tool call in doubt: it ``happened`` (with its ``result``) or not (retry).

        ``happened=True`` needs the call's ``result`` (``None`` included) unless the tool
        is registered here and annotated ``-> None``; refused (DecisionRefused, audited)
        without it, and for ``by`` naming an approver group rather than a person."""
        inputs.lookup_id(run_id)
        if not isinstance(happened, bool):
            raise InvalidInput(f"happened is True or False, not {inputs.show(happened)}")
        inputs.name(by, "by")
        waits.resolve(self, run_id, happened=happened, by=by, result=result)

    def signal(
        self, run_id: str, name: str, payload: Any = None, *, sender: str | None = None
    ) -> bool:
        """Send a signal; kept until ``run.wait(name)`` takes it. Returns whether it woke
        the run. A finished run refuses signals (InvalidState)."""
        inputs.lookup_id(run_id)
        inputs.name(name, "the signal's name")
        inputs.optional_name(sender, "sender")
        return waits.signal(self, run_id, name, payload, sender=sender)

    def cancel(
        self,
        run_id: str,
        *,
        compensate: bool = False,
        by: str | None = None,
        reason: str | None = None,
    ) -> RunHandle:
        """Cancel a run that is not executing (queued, waiting, or crashed); with
        ``compensate=True`` first undo its completed write tools, newest first."""
        inputs.optional_name(by, "by")
        inputs.text(reason, "reason")
        record = self.store.get_run(inputs.lookup_id(run_id))
        if record.status in FINISHED:
            raise InvalidState(f"run {run_id} is already {record.status}; nothing to cancel")
        try:
            lease = self._claim(record)
        except Conflict:  # executing elsewhere: it stops at its next step
            now = self.clock.now()
            asked = {"why": reason or "cancel requested", "compensate": compensate}
            # who asked and why, for the executing process's run.cancelled (and the audit)
            self.store.record_audit(
                run_id, CANCEL_REQUESTED, codec.encode(asked), actor=by, now=now
            )
            self.store.request_cancel(run_id, compensate=compensate, now=now)
            self.interrupt(run_id, Cancelling(compensate, by=by, reason=reason))
            return RunHandle(run_id, "running", waiting={"cancel": "requested"})
        state = self.load(run_id)
        if compensate:  # undone here: every undo must be found before anything is written
            try:
                compensation.compensable(state, self._lookup_tool)
            except NotFound:
                self.let_go(run_id, lease.epoch)
                raise
        journal = Journal(
            self.store,
            self.clock,
            state,
            lease,
            actor=by or self.owner,
        )
        ctx = {"type": "cancelled", "message": reason or "cancelled", "by": by}
        return self._cancel_with(journal, ctx, compensate)

    def effect(self, key: str) -> Effect | None:
        """The effects-table row of an idempotency key (None if never called)."""
        return self.store.get_effect(inputs.lookup_id(key, "key"))

    def audit(self, run_id: str) -> list[AuditRecord]:
        """The run's audit records (refused decisions and the like)."""
        self.store.get_run(inputs.lookup_id(run_id))
        return self.store.read_audit(run_id)

    # -- lifecycle --------------------------------------------------------

    def _ensure_heartbeat(self) -> None:
        if self._heartbeat is None or not self._heartbeat.is_alive():
            self._heartbeat = _Heartbeat(self)
            self._heartbeat.start()

    def close(self) -> None:
        """Stop the heartbeat and close the store."""
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None
        self.store.close()

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- time travel (services: timetravel, export, retention) ----------------------------

    def history(self, run_id: str) -> timetravel.History:
        """The run's row, every event with its seq, and its steps."""
        return timetravel.history(self, inputs.lookup_id(run_id))

    def state(
        self,
        run_id: str,
        *,
        at: int | None = None,
        step: int | str | None = None,
        when: timetravel.When = "after",
    ) -> RunState:
        """The exact state at seq ``at``, or before/after ``step`` (a position or a name);
        the head when neither is given."""
        return timetravel.state_at(self, inputs.lookup_id(run_id), at=at, step=step, when=when)

    def diff(
        self, a: RunState | str, b: RunState | str, *, bookkeeping: bool = False
    ) -> timetravel.Diff:
        """What differs from state ``a`` to state ``b`` (a run id means its head)."""
        for x in (a, b):
            if not isinstance(x, RunState | str):
                raise InvalidInput(f"diff compares two states or two run ids, not {inputs.show(x)}")
        sa = self.load(a) if isinstance(a, str) else a
        sb = self.load(b) if isinstance(b, str) else b
        return timetravel.diff(sa, sb, bookkeeping=bookkeeping)

    def fork(
        self,
        run_id: str,
        *,
        step: int | str | None = None,
        at: int | None = None,
        when: timetravel.When = "after",
        input: dict[str, Any] | None = None,
        vars: dict[str, Any] | None = None,
    ) -> str:
        """A new queued run branching off ``run_id`` after ``step`` (or at seq ``at``, or at
        its head), with new ``input`` and edited task ``vars``; ``resume`` executes it."""
        return timetravel.fork(
            self, inputs.lookup_id(run_id), at=at, step=step, when=when, input=input, vars=vars
        )

    def export_run(self, run_id: str, out: TextIO) -> int:
        """Write the run to ``out`` as ``tether-run`` JSON lines; return how many events."""
        return export.export_run(self, inputs.lookup_id(run_id), out)

    def import_run(
        self, lines: Iterable[str], *, new_id: bool = False, source: str = "<input>"
    ) -> str:
        """Create a run from an export (a file object or lines); return its id."""
        return export.import_run(self, lines, new_id=new_id, source=source)

    def gc(
        self,
        *,
        older_than: Duration | None = None,
        status: Sequence[str] = (),
        keep_last: int | None = None,
        dry_run: bool = False,
        vacuum: bool = True,
        blob_grace: Duration = retention.BLOB_GRACE,
    ) -> retention.GcResult:
        """Delete finished runs by age (seconds, a timedelta or ``"30d"``), status and
        keep-last-N per agent, sweep the snapshot pages no snapshot references and nothing
        wrote for ``blob_grace``, then give the space back. See :mod:`tether.services.retention`."""
        age = parse_duration(older_than, what="older_than")
        grace = parse_duration(blob_grace, what="blob_grace")
        if grace is None:
            raise InvalidInput("blob_grace is a duration (e.g. '1h'), not None")
        if keep_last is not None:
            inputs.integer(keep_last, "keep_last", low=0)
        statuses = (status,) if isinstance(status, str) else tuple(status)
        return retention.gc(
            self,
            older_than=age,
            statuses=statuses,
            keep_last=keep_last,
            dry_run=dry_run,
            vacuum=vacuum,
            blob_grace=grace,
        )

    # -- memory and artifacts (tether.context.memory, tether.context.artifacts) ----------------

    @property
    def memory(self) -> Memory:
        """Long-term memory on this app's store (namespaced, searchable, with TTL)."""
        mem: Memory | None = getattr(self, "_memory", None)
        if mem is None:
            mem = self._memory = Memory(self.store, self.clock)
        return mem

    @property
    def artifacts(self) -> Artifacts:
        """Content-addressed artifacts; in the database unless set to another store."""
        arts: Artifacts | None = getattr(self, "_artifacts", None)
        if arts is None:
            arts = self._artifacts = Artifacts(DatabaseArtifacts(self.store, self.clock))
        return arts

    @artifacts.setter
    def artifacts(self, value: Artifacts | ArtifactStore) -> None:
        self._artifacts = value if isinstance(value, Artifacts) else Artifacts(value)


def _fault(journal: Journal, exc: BaseException) -> BaseException:
    """What stopped the execution: what poisoned the journal (a lost lease or database,
    a code change, a call refused in a thread), else ``exc``. A lost lease or database
    keeps the journal refusing writes; the agent's own fault does not stop tether's
    records (the deferred step, the failure, the block)."""
    poisoned = journal.poisoned
    if isinstance(poisoned, LeaseLost | StoreUnavailable):
        return poisoned
    journal.poisoned = None
    return poisoned if poisoned is not None else exc


def _raise_poison(journal: Journal) -> None:
    """Raise what made the journal refuse writes when the agent returned anyway: it caught
    the error (a code change, a lease lost), or a thread of its own met it and nobody
    read it. Its run must not end as if whole."""
    if journal.poisoned is not None:
        raise journal.poisoned


class _Heartbeat(threading.Thread):
    """Extends this app's leases every third of their ttl while the app is open."""

    def __init__(self, app: App) -> None:
        super().__init__(name="tether-heartbeat", daemon=True)
        self.app = app
        self._stop_event = threading.Event()

    def run(self) -> None:
        app = self.app
        interval = max(0.05, app.lease_ttl / 3)
        heartbeat(app, app.owner, self._stop_event, interval, self._beat)

    def _beat(self) -> dict[str, int]:
        app = self.app
        return app.store.worker_heartbeat(app.owner, ttl=app.lease_ttl, now=app.clock.now())[1]

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)


@overload
def agent(fn: F) -> F: ...


@overload
def agent(
    fn: None = None, *, name: str | None = None, version: str | None = None
) -> Callable[[F], F]: ...


def agent(
    fn: F | None = None, *, name: str | None = None, version: str | None = None
) -> F | Callable[[F], F]:
    """Declare an agent without an App (``@tether.agent``): any App runs it, and a
    resume in another process finds it by the module its run recorded, once the
    operator allows that module (``code=``, ``--code``: see :mod:`tether.engine.registry`)."""

    def declare(f: F) -> F:
        f.__tether_agent__ = _define(f, name, version)  # type: ignore[attr-defined]
        return f

    return declare(fn) if fn is not None else declare


@overload
def tool(fn: F) -> F: ...


@overload
def tool(
    fn: None = None,
    *,
    risk: str = "write",
    compensate: Callable[..., Any] | None = None,
    on_doubt: str | None = None,
    retry: Retry | None = None,
    name: str | None = None,
) -> Callable[[F], F]: ...


def tool(
    fn: F | None = None,
    *,
    risk: str = "write",
    compensate: Callable[..., Any] | None = None,
    on_doubt: str | None = None,
    retry: Retry | None = None,
    name: str | None = None,
) -> F | Callable[[F], F]:
    """Declare a tool without an App (``@tether.tool(risk=…)``); see :meth:`App.tool`."""

    def declare(f: F) -> F:
        d = define_tool(
            f, name=name, risk=risk, compensate=compensate, on_doubt=on_doubt, retry=retry
        )
        # the function is the tool too (app.tool(send) without rebinding send); what the
        # decorator returns also refuses a direct call in an agent (effects.guarded)
        f.__tether_tool__ = d  # type: ignore[attr-defined]
        return cast(F, guarded(d))

    return declare(fn) if fn is not None else declare


MAX_CONCURRENCY = 10_000  # runs one worker executes at once (threads): more is a typo


def _check_rate(queue: str, rate: Any) -> None:
    if not isinstance(rate, tuple | list) or len(rate) != 2:
        raise InvalidInput(f"queue {queue!r}: rate is (starts, period_seconds), e.g. (100, 60)")
    inputs.integer(rate[0], f"queue {queue!r}: rate's starts", low=1)
    inputs.seconds(rate[1], f"queue {queue!r}: rate's period", above=True)


def _check_decision(run_id: Any, name: Any, by: Any, reason: Any) -> None:
    inputs.lookup_id(run_id)
    inputs.name(name, "the approval's name")
    inputs.name(by, "by")
    inputs.text(reason, "reason")


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


def _define(fn: Callable[..., Any], name: str | None, version: str | None) -> AgentDef:
    if not callable(fn):
        raise TypeError(f"@app.agent decorates a function, not {fn!r}")
    params = list(inspect.signature(fn).parameters)
    if not params:
        raise TypeError(
            f"agent {fn.__qualname__!r} must take the run object as its first parameter, "
            f"e.g. def {fn.__name__}(run, ...)"
        )
    name = fn.__name__ if name is None else name
    inputs.name(name, "the agent's name")
    inputs.optional_name(version, "the agent's version")
    code = {"module": fn.__module__, "qualname": fn.__qualname__}
    source = inspect.getsourcefile(fn)
    if source:
        code["file"] = os.path.abspath(source)
    return AgentDef(name, version, fn, inspect.iscoroutinefunction(fn), code)
