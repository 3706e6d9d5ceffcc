"""The App: a facade over the engine and the services, one front door for the user.

Each method delegates (its arguments' checks included): registration to
:class:`tether.engine.registry.Registry`, execution to
:class:`tether.engine.executor.Executor`, reads to :mod:`tether.services.reader`, the
operations from outside a run to :mod:`tether.services.control`, queues to
:mod:`tether.services.queues`, and time travel, export and retention to their services.
None of them is given the App: they take the :class:`~tether.engine.deps.Deps` (store,
clock, lease holder, lease ttl) and the parts they need.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from tether.context.artifacts import Artifacts, ArtifactStore, DatabaseArtifacts
from tether.context.boards import Board
from tether.context.conversation import Session, Summarizer
from tether.context.memory import Memory
from tether.decisions import Decisions
from tether.engine import births, gates
from tether.engine.deps import Deps
from tether.engine.executor import Executor, RunHandle
from tether.engine.leases import Active, Leases
from tether.engine.policy import Policy
from tether.engine.registry import Registry
from tether.engine.retry import NO_RETRY, Retry
from tether.engine.revert import Reverter
from tether.engine.states import States
from tether.model import inputs
from tether.model.budgets import Limits
from tether.model.clock import Clock, SystemClock, process_owner
from tether.model.durations import Duration
from tether.model.events import Event
from tether.model.state import RunState
from tether.registration import Registration
from tether.scheduling import Scheduling
from tether.scoped import Tenancy
from tether.services import sessions
from tether.services.control import Control
from tether.services.queues import QueueConfig, Queues
from tether.services.reader import Reader
from tether.services.schedules import Schedules
from tether.services.worker import MAX_CONCURRENCY as MAX_CONCURRENCY
from tether.services.worker import POISON_AFTER, Worker, check_worker
from tether.settings import Settings
from tether.store import RunRecord, Store
from tether.travel import TimeTravel

F = TypeVar("F", bound=Callable[..., Any])


class App(Registration, Tenancy, Settings, Decisions, TimeTravel, Scheduling):
    """Agents registered on one store. Create with :func:`tether.open`.

    Tokens, tenants and the paged run list and inbox (``tokens``, ``scoped``,
    ``for_tenant``, ``list_runs``, ``inbox``) are in :class:`tether.scoped.Tenancy`."""

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
        self.store = store
        self.clock = clock or SystemClock()
        self.url = url
        self.owner = process_owner()
        self.lease_ttl = lease_ttl
        self.approver_groups = gates.approver_groups(approver_groups)
        self._deps = deps = Deps(store, self.clock, self.owner, lease_ttl)
        self._states = States(store, self.clock, snapshot_every)
        self._registry = Registry(code)  # modules a run's record may make us import
        self._leases = Leases(deps, Active())
        self._active = self._leases.active.journals  # executions in this process, by run id
        self._on_close: list[Callable[[App], None]] = []  # what stops with it (its metrics)
        store.unwritten_end = self._leases.unwritten_end  # the Store protocol's hook
        self._executor = Executor(
            deps,
            self._states,
            self._leases,
            self._registry,
            retry=retry,
            policy=policy or Policy(),
            inline_sleep_max=inline_sleep_max,
            approver_groups=frozenset(self.approver_groups),
        )
        self._reader = Reader(self._states)
        self._control = Control(
            deps, self._states, self._leases, self._registry, self._executor, self.approver_groups
        )
        self._reverter = Reverter(
            deps, self._states, self._leases, self._registry.lookup_tool, retry
        )
        self._queues = Queues(deps, self._registry, self._executor)
        self._schedules = Schedules(deps, self._registry, self._queues)
        self._executor.spawner = self._queues.spawner()  # run.child enqueues through it
        self.workspace = None  # agents naming a directory have one (tether.open sets a default)

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
        return self._queues.declare(
            name,
            concurrency=concurrency,
            worker_concurrency=worker_concurrency,
            per_key=per_key,
            rate=rate,
            max_depth=max_depth,
        )

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
        limits: Limits | None = None,
        **kwargs: Any,
    ) -> str:
        """Enqueue a run for the workers and return its id (``queued``).

        An existing ``run_id``, or a ``dedup_key`` held by an unfinished run of the same
        queue (queued, running, waiting or blocked), returns that run's id instead of
        starting a second one. ``delay`` (seconds, a timedelta or ``"10m"``) makes it
        claimable later; higher ``priority`` first. Raises QueueFull when the queue is at
        its ``max_depth``; ValueError or TypeError, naming the parameter, for a value
        :mod:`tether.model.inputs` refuses. ``limits``: the run's (see docs/budgets.md).
        """
        return self._queues.start(
            None,
            agent,
            *args,
            queue=queue,
            priority=priority,
            run_id=run_id,
            dedup_key=dedup_key,
            delay=delay,
            concurrency_key=concurrency_key,
            limits=limits,
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
        limits: Limits | None = None,
        **kwargs: Any,
    ) -> str:
        """``start`` in a conversation: the queued run belongs to ``session`` (a Session or
        its id, created if new; None: no session, as ``start``), as with :meth:`run_in`,
        and the worker that executes it finds it as ``run.session``. The other arguments
        are :meth:`start`'s."""
        return self._queues.start(
            session,
            agent,
            *args,
            queue=queue,
            priority=priority,
            run_id=run_id,
            dedup_key=dedup_key,
            delay=delay,
            concurrency_key=concurrency_key,
            limits=limits,
            **kwargs,
        )

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
        check_worker(queues, concurrency, prefetch)
        self._executor.policy.check_tools(self._registry.tools)  # a rule that guards nothing
        return Worker(
            self._deps,
            self._executor,
            self._queues,
            queues=queues,
            concurrency=concurrency,
            poll=poll,
            cpu=cpu,
            prefetch=prefetch,
            poison_after=poison_after,
            schedules=self._schedules,
        )

    # -- starting and resuming --------------------------------------------

    def run(
        self,
        agent: Callable[..., Any] | str,
        *args: Any,
        limits: Limits | None = None,
        **kwargs: Any,
    ) -> RunHandle:
        """Create a run (with ``limits``) and execute it inline, durably; RunFailed if it fails."""
        ex = self._executor
        d = self._registry.resolve(agent)
        births.outside_loop(d)  # an async agent in a running loop: refused before creation
        return ex.continue_run(ex.create(d, args, kwargs, limits=limits))

    def run_in(
        self,
        session: Session | str,
        agent: Callable[..., Any] | str,
        *args: Any,
        limits: Limits | None = None,
        **kwargs: Any,
    ) -> RunHandle:
        """``run`` in a conversation: the run belongs to ``session`` (a Session or its id;
        recorded in its row and its ``run.created`` event) and the agent finds it as
        ``run.session``, where ``run.llm(…, messages=…)`` records its prompt as references
        to the stored messages."""
        s = sessions.of(self._deps, session)
        ex = self._executor
        d = self._registry.resolve(agent)
        births.outside_loop(d)
        return ex.continue_run(ex.create(d, args, kwargs, s, limits=limits))

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
        return sessions.session(
            self._deps,
            session_id,
            owner=owner,
            compact_at_tokens=compact_at_tokens,
            summarize=summarize,
            keep_last=keep_last,
        )

    async def arun(
        self,
        agent: Callable[..., Any] | str,
        *args: Any,
        limits: Limits | None = None,
        **kwargs: Any,
    ) -> RunHandle:
        """``run`` for use inside an event loop (``async def`` agents)."""
        ex = self._executor
        d = self._registry.resolve(agent)
        return await ex.acontinue_run(ex.create(d, args, kwargs, limits=limits))

    def resume(self, run_id: str) -> RunHandle:
        """Continue a run that stopped: completed steps are reused, the rest run.

        A waiting run resumes once what it waits for has happened (a decision, a
        signal, its timer: resuming a sleeping run sleeps only what is left). A run
        whose compensation was interrupted finishes it. A blocked run (its code changed
        under it) goes on once the code matches its log again; while it does not, the
        run stays blocked and NondeterminismError is raised.
        """
        ex = self._executor
        return ex.continue_run(ex.prepare_resume(inputs.lookup_id(run_id), retry=False))

    async def aresume(self, run_id: str) -> RunHandle:
        """``resume`` for use inside an event loop (the same preparation and cases)."""
        ex = self._executor
        return await ex.acontinue_run(ex.prepare_resume(inputs.lookup_id(run_id), retry=False))

    def retry_run(self, run_id: str, *, in_queue: bool | None = None) -> RunHandle:
        """Execute a failed run again from its failed step (completed steps are reused), or
        a blocked one once its code matches its log again (as :meth:`resume`).

        ``in_queue``: do not execute it here; put it back in the queue it was started in
        (``app.start``), where a worker of that queue retries it. Returns at once, with
        status ``queued``. The log records who asked (``run.suspended``, reason ``retry
        requested``, or ``resume requested`` for a blocked run). Left out (None), a run
        started in a queue goes back to it and any other is executed here, as ``tether
        retry`` does (``in_queue=False``: here, as ``tether retry --here``).
        """
        return self._control.retry(run_id, in_queue=in_queue)

    # -- reading ----------------------------------------------------------

    def load(self, run_id: str, *, upto: int | None = None) -> RunState:
        """The run's state (at ``upto``, or its head): newest snapshot + fold of the rest.

        Snapshots are a read-side cache: when this load folded ``snapshot_every`` events
        or more, it saves the state it computed, so the next load starts from there.
        Steps never pay for snapshots. Raises RunDamaged when the log has a gap or
        disagrees with the row (see :mod:`tether.model.integrity`).
        """
        return self._states.load(run_id, upto=upto)

    def get(self, run_id: str) -> RunState:
        """The run's current state (status, position, steps, output, failure, vars, usage)."""
        return self._reader.get(run_id)

    def events(self, run_id: str, *, after: int = 0, upto: int | None = None) -> list[Event]:
        """The run's events in seq order. Raises NotFound for an unknown run."""
        return self._reader.events(run_id, after=after, upto=upto)

    def record(self, run_id: str) -> RunRecord:
        """The run's row, as a worker sees it: status, queue, priority, lease holder and
        expiry, dedup and concurrency keys. NotFound for an unknown run; :meth:`get` gives
        the run's state, folded from its log."""
        return self._reader.record(run_id)

    def runs(
        self, *, status: str | None = None, agent: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Runs, newest first (at most ``limit``; a status no run has matches none)."""
        return self._reader.runs(status=status, agent=agent, limit=limit)

    # -- lifecycle --------------------------------------------------------

    def close(self) -> None:
        """Stop the heartbeat and close the store."""
        self._closed = True  # tether.open: its redaction rules no longer bind the process
        for release in self._on_close:
            release(self)
        self._leases.stop()
        self.store.close()

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @functools.cached_property
    def memory(self) -> Memory:
        """Long-term memory on this app's store (namespaced, searchable, with TTL)."""
        return Memory(self.store, self.clock)

    def board(self, name: str, *, by: str | None = None) -> Board:
        """The board ``name``: keyed, versioned state shared by runs and code, with
        compare-and-set and every change kept (see :mod:`tether.context.boards`; in a run,
        ``run.board``). ``by``: who writes, recorded with each change."""
        return Board(self.store, self.clock, name, by=by)

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
