"""The ``run`` object an agent receives: step, llm, decide and task variables.

``Run`` (for ``def`` agents) and ``AsyncRun`` (for ``async def`` agents) are two
thin drivers of the same generator core in :mod:`tether.engine.journal`: the sync one
calls and sleeps, the async one awaits. Every call takes its position when it is
made: an ``AsyncRun`` method is a plain function that takes it, then returns the
awaitable that does the work, so ``asyncio.gather(run.step(...), run.llm(...))``
numbers its calls in argument order. ``run.map`` and ``run.parallel`` fan out
(see :mod:`tether.engine.fanout`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Coroutine, Iterable
from functools import partial
from typing import Any, cast

from tether.context.boards import Board
from tether.context.conversation import Session, session_of_run
from tether.engine import children, fanout, handoffs
from tether.engine import inline as inlined
from tether.engine.boards import RunBoard, Stepper
from tether.engine.calls import Call, Core, Sleep, Slot
from tether.engine.contracts import tool_call
from tether.engine.effects import ToolDef, mark_secrets
from tether.engine.gates import approve_core, sleep_core, wait_core
from tether.engine.journal import Journal, no_literal_secret
from tether.engine.policy import Policy
from tether.engine.retry import Retry, call_with_timeout
from tether.engine.steps import step_core
from tether.engine.variables import Vars
from tether.model import events as ev
from tether.model import inputs
from tether.model.clock import Clock

_UNSET = object()


def drive(core: Core, clock: Clock) -> Any:
    """Run a journal core synchronously."""
    try:
        cmd = next(core)
        while True:
            if isinstance(cmd, Sleep):
                clock.sleep(cmd.seconds)
                cmd = core.send(None)
                continue
            try:
                result = call_with_timeout(cmd.fn, cmd.args, cmd.kwargs, cmd.timeout)
            except Exception as exc:
                cmd = core.throw(exc)
            except BaseException:  # KeyboardInterrupt, SystemExit: not the step's failure,
                core.close()  # but the core unmarks its step (current_step) on the way out
                raise
            else:
                cmd = core.send(result)
    except StopIteration as stop:
        return stop.value


async def adrive(core: Core, clock: Clock) -> Any:
    """Run a journal core with ``await``: async callables are awaited, sleeps are async."""
    try:
        cmd = next(core)
        while True:
            if isinstance(cmd, Sleep):
                await _asleep(clock, cmd.seconds)
                cmd = core.send(None)
                continue
            try:
                result = await _acall(cmd)
            except Exception as exc:
                cmd = core.throw(exc)
            except BaseException:  # cancelled, interrupted: see drive
                core.close()
                raise
            else:
                cmd = core.send(result)
    except StopIteration as stop:
        return stop.value


async def _asleep(clock: Clock, seconds: float) -> None:
    if hasattr(clock, "advance"):  # a fake clock: move it, do not wait
        clock.sleep(seconds)
    else:
        import asyncio  # imported lazily: most agents are not async

        await asyncio.sleep(seconds)


async def _acall(cmd: Call) -> Any:
    result = cmd.fn(*cmd.args, **cmd.kwargs)
    if inspect.isawaitable(result):
        if cmd.timeout is None:
            return await result
        import asyncio

        return await asyncio.wait_for(result, cmd.timeout)
    return result


class _RunBase:
    awaited = False  # whether its calls return awaitables (AsyncRun)

    def __init__(
        self,
        journal: Journal,
        agent: str,
        default_retry: Retry,
        policy: Policy | None = None,
        inline_sleep_max: float = 60.0,
        approver_groups: Collection[str] = (),
    ) -> None:
        self._j = journal
        self.agent = agent
        self._retry = default_retry
        self._policy = policy or Policy()
        self._inline_sleep_max = inline_sleep_max
        self._groups = frozenset(approver_groups)  # recorded with approval requests
        self.vars = Vars(journal)
        self._session: Session | object | None = _UNSET  # loaded on first use
        self._tenant: str | object | None = _UNSET  # read on first use

    @property
    def session(self) -> Session | None:
        """The conversation this run belongs to (``app.run_in``), or None."""
        if self._session is _UNSET:
            self._session = session_of_run(self._j.store, self._j.clock, self.id, self)
        assert self._session is None or isinstance(self._session, Session)
        return self._session

    def bind_session(self, session: Session) -> None:
        """Make ``session`` this run's conversation (``app.run_in``: known before it starts)."""
        self._session = session.bound(self.id, self)

    def _created(self, tenant: str | None) -> None:
        """A run created by this execution: its tenant and its session (none unless bound)
        are known without reading its row (not written yet for a child: engine.births)."""
        self._tenant = tenant
        if self._session is _UNSET:
            self._session = None

    def _prompt(self, messages: Any) -> dict[str, Any]:
        """A model call's prompt as references to the session's messages (none outside one)."""
        session = self.session
        return {} if session is None else {"prompt": session.prompt_refs(messages)}

    def _llm_note(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """A model call's additions to its record: its prompt, and the ``model=`` it was
        given when the app has prices (its cost is computed from that model's)."""
        note = self._prompt(kwargs["messages"]) if "messages" in kwargs else {}
        meter, model = self._j.meter, kwargs.get("model")
        if meter is not None and meter.prices and isinstance(model, str):
            note["model"] = model
        return note

    @property
    def id(self) -> str:
        """The run id."""
        return self._j.run_id

    @property
    def workspace(self) -> str | None:
        """The directory the run works in (absolute), checkpointed after each step; None
        when its agent has none (docs/workspace.md)."""
        return self._j.workspace.root if self._j.workspace is not None else None

    @property
    def tenant(self) -> str | None:
        """The run's tenant (its row's owner; None outside tenants), read once: what
        ``app.for_tenant(run.tenant)`` takes, for the tenant's artifacts and memory."""
        if self._tenant is _UNSET:
            self._tenant = self._j.store.get_run(self.id).owner
        assert self._tenant is None or isinstance(self._tenant, str)
        return self._tenant

    def board(self, name: str) -> RunBoard:
        """The board ``name`` of this run's tenant, shared with other runs and code: each
        ``get``, ``items``, ``set`` and ``delete`` a journaled step (see
        :mod:`tether.engine.boards`), its writes recorded with this run and position."""
        shared = Board(self._j.store, self._j.clock, name, tenant=self.tenant, by=self.agent)
        return RunBoard(cast(Stepper, self), shared)  # Run and AsyncRun both have step

    def _tenant_of(self) -> str | None:
        return self.tenant

    @property
    def handed(self) -> handoffs.Handed | None:
        """What this run was handed by ``run.handoff`` (giver, position, vars, messages,
        session), or None. See ``docs/children.md``."""
        return handoffs.handed(self._j)

    def _handoff(self, agent: Any, args: Any, kwargs: Any, **how: Any) -> Any:
        return handoffs.handoff_core(
            self._j,
            agent,
            args,
            kwargs,
            tenant=self._tenant_of,
            session=lambda: self.session,
            **how,
        )

    @property
    def position(self) -> int:
        """The position of the last tether call made (0 before the first)."""
        return self._j.pos

    def _core(
        self,
        kind: str,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        retry: Retry | None,
    ) -> Core:
        note = None
        if kind == "llm" and ("messages" in kwargs or "model" in kwargs):  # steps pay nothing
            note = partial(self._llm_note, kwargs)
        return step_core(self._j, kind, name, fn, args, kwargs, retry or self._retry, note)

    def _map_cores(
        self,
        name: str,
        fn: Callable[..., Any],
        items: Iterable[Any],
        retry: Retry | None,
        max_workers: int | None,
        wrap: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None,
    ) -> list[Core]:
        """One step ``name[i]`` per item, their positions taken now, in item order (``fn``
        called as ``wrap(fn)``, when given)."""
        fanout.check_workers(max_workers)
        if not isinstance(name, str) or not name:
            raise TypeError(f"run {self.id}: run.map needs a non-empty str name, got {name!r}")
        if not callable(fn):
            raise TypeError(f"run {self.id}: run.map {name!r} needs a callable, got {fn!r}")
        call = wrap(fn) if wrap is not None else fn
        return [
            self._core("step", f"{name}[{i}]", call, (item,), {}, retry)
            for i, item in enumerate(inputs.items(items, f"run {self.id}: run.map {name!r}"))
        ]

    def _tool(
        self, tool: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Core:
        d = getattr(tool, "__tether_tool__", None)
        if not isinstance(d, ToolDef):
            raise TypeError(
                f"run {self.id}: {getattr(tool, '__qualname__', tool)!r} is not a "
                f"tether tool; decorate it with @app.tool(risk=...)"
            )
        args, kwargs = mark_secrets(d, args, kwargs)  # stored and hashed as markers
        retry = d.retry or self._retry  # gated and judged first (engine.contracts)
        return tool_call(self._j, d, args, kwargs, self._policy, self._groups, retry)

    def patched(self, name: str) -> bool:
        """Whether this run takes the new path of the code change ``name``: False for a
        run that recorded another step at this position before the change was deployed
        (it goes on the old way; no position is taken), else True, recorded as the
        decision ``patch:NAME`` so that its replays agree. Old and new runs finish
        under one code base: ``if run.patched("fraud-check"): run.step("check_fraud",
        ...)``. Call it once per change, where the change begins (docs/deploys.md says
        how to retire it)."""
        marker = f"patch:{inputs.name(name, f'run {self.id}: a patch')}"
        recorded = self._j.peek()
        old = recorded is not None and (recorded.kind, recorded.name) != ("decide", marker)
        if not old:
            self._decide(marker, True, "the new path of a code change", {})
        if self._j.patches is not None:  # a dry replay: this run relies on the patch
            self._j.patches[name] = "old path" if old else "recorded"
        return not old

    def _decide(self, name: str, choice: Any, why: str, details: dict[str, Any]) -> Any:
        slot = self._j.slot("decide", name)
        if self._j.trace is not None:  # a span (replayed: marked so)
            return self._j.trace.gate(slot, lambda: self._decision(slot, choice, why, details))
        return self._decision(slot, choice, why, details)

    def _decision(self, slot: Slot, choice: Any, why: str, details: dict[str, Any]) -> Any:
        name = slot.name
        if slot.done:
            assert slot.recorded is not None
            return slot.recorded.output
        data = {"pos": slot.pos, "name": name, "choice": choice, "why": why, "details": details}
        event = self._j.event(ev.DECISION, data)
        no_literal_secret(event, choice, f"run {self.id}: decide {name!r}: the choice")
        self._j.append([event])
        self._j.executed.append((slot.pos, name))
        return choice


class Run(_RunBase):
    """What a ``def`` agent receives first. Every call below is journaled by position."""

    def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: Retry | None = None,
        **kwargs: Any,
    ) -> Any:
        """Call ``fn(*args, **kwargs)`` once; on replay return the recorded result."""
        return drive(self._core("step", name, fn, args, kwargs, retry), self._j.clock)

    def llm(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: Retry | None = None,
        **kwargs: Any,
    ) -> Any:
        """A model call: a step whose result's usage (tokens, cost) is recorded."""
        return drive(self._core("llm", name, fn, args, kwargs, retry), self._j.clock)

    def decide(self, name: str, choice: Any, why: str = "", **details: Any) -> Any:
        """Record a choice and its rationale; on replay return the recorded choice."""
        return self._decide(name, choice, why, details)

    def tool(self, tool: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call a registered tool effectively once (idempotency key, intent, effects table)."""
        return drive(self._tool(tool, args, kwargs), self._j.clock)

    def map(
        self,
        name: str,
        fn: Callable[[Any], Any],
        items: Iterable[Any],
        *,
        max_workers: int | None = None,
        retry: Retry | None = None,
    ) -> list[Any]:
        """``[fn(item) for item in items]`` at once on threads, each call a step named
        ``name[i]`` whose position is taken first, in item order; the results in item
        order. When calls fail, the others finish and are recorded, then the first
        failure (in item order) is raised. ``max_workers``: threads (default: one per
        item, up to 32). See ``docs/fanout.md``."""
        cores = self._map_cores(name, fn, items, retry, max_workers)
        clock = self._j.clock
        return fanout.in_threads([partial(drive, core, clock) for core in cores], max_workers)

    def parallel(self, *branches: Callable[[], Any], max_workers: int | None = None) -> list[Any]:
        """Run ``branches`` (functions of no argument, each making one journaled call:
        ``lambda: run.step("fetch", fetch, url)``, ``lambda: run.tool(send, to)``) at once
        on threads; their positions are taken first, in order. Returns their results in
        order; failures as :meth:`map`. See ``docs/fanout.md``."""
        fanout.check_workers(max_workers)
        fanout.check_branches(self.id, branches)
        return fanout.branches_in_threads(self._j, branches, max_workers)

    def approve(
        self,
        name: str,
        payload: Any = None,
        *,
        approvers: list[str] | None = None,
        timeout: str | float | None = None,
    ) -> Any:
        """Ask a human; the run waits (no process) until approved, denied or timed out.

        Returns the decision (``approved``, ``by``, ``reason``); a denial or a timeout
        raises :class:`tether.ApprovalDenied`, which the agent may catch.
        """
        return approve_core(self._j, name, payload, approvers, timeout, self._groups)

    def sleep(self, duration: str | float, name: str = "sleep") -> None:
        """A durable sleep (``"10m"``): a restart sleeps only the time that is left."""
        drive(sleep_core(self._j, name, duration, self._inline_sleep_max), self._j.clock)

    def wait(self, name: str, timeout: str | float | None = None) -> Any:
        """Wait for ``app.signal(run_id, name, payload)`` and return its payload.

        Signals sent before the wait are kept. On timeout raises :class:`tether.WaitTimeout`.
        """
        return wait_core(self._j, name, timeout)

    def child(
        self,
        agent: Callable[..., Any] | str,
        *args: Any,
        queue: str = "default",
        inline: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Start a child run of ``agent`` in ``queue`` (workers execute it) and return its
        id; on replay return the recorded id (a child is started once). With ``inline``,
        execute the child here at once and return its output (a failed child raises
        :class:`tether.ChildFailed`). See ``docs/children.md``."""
        if inline is not False:
            return inlined.child(self._j, (agent, args, kwargs, queue, self._tenant_of), inline)
        return children.start_core(self._j, agent, args, kwargs, queue, self._tenant_of)

    def children(
        self, agent: Callable[..., Any] | str, items: Iterable[Any], *, queue: str = "default"
    ) -> list[str]:
        """Start a child run of ``agent`` per item (``agent(run, item)``) in ``queue``, all
        in one transaction, their positions taken in item order; return their ids (on
        replay the recorded ones: each child is started once). See ``docs/children.md``."""
        return children.start_many_core(self._j, agent, items, queue, self._tenant_of)

    def join(self, runs: str | Iterable[str], name: str = "join") -> Any:
        """The output of child run ``runs`` (an id), or the outputs of a list of them,
        once all are finished; the run waits (no process) meanwhile. A failed or cancelled
        child raises :class:`tether.ChildFailed` (the first, in the order given)."""
        return children.join_core(self._j, runs, name)

    def handoff(
        self,
        agent: Callable[..., Any] | str,
        *args: Any,
        vars: Iterable[str] | str = (),
        conversation: Any = None,
        queue: str = "default",
        wait: bool = True,
        **kwargs: Any,
    ) -> Any:
        """Hand ``vars`` (task variable names) and ``conversation`` (True: this run's
        session; a Session; or a list of messages) to a new run of ``agent``, linked and
        recorded in both logs; it is started once. With ``wait`` (default), wait for it
        (no process) and return its output (a failure raises :class:`tether.ChildFailed`);
        else return its id. See ``docs/children.md``."""
        return self._handoff(
            agent, args, kwargs, names=vars, conversation=conversation, queue=queue, wait=wait
        )


class AsyncRun(_RunBase):
    """What an ``async def`` agent receives first: the same calls, awaited.

    Each call takes its position when it is made and returns the awaitable that does
    the work (a coroutine): ``asyncio.gather(run.step("a", ...), run.llm("b", ...))``
    gives ``a`` and ``b`` the positions of their order in the call, whichever finishes
    first, so a resume reuses the one that completed.
    """

    awaited = True
    _made: list[Coroutine[Any, Any, Any]] | None = None  # see close_unawaited (below)

    def _start(self, core: Core) -> Coroutine[Any, Any, Any]:
        return self._ready(None, self._drive(core, self._j.begin()))

    def _ready(
        self, value: Any, coro: Coroutine[Any, Any, Any] | None = None
    ) -> Coroutine[Any, Any, Any]:
        """The awaitable a call returns (of ``value``, known when the call was made), held
        until it starts, so that :func:`close_unawaited` finds it (an expression's
        temporary, dropped by an exception, would be reported at once)."""
        coro = coro or _ready(value)
        made = self._made = self._made or []
        if len(made) >= 64 and len(made) & (len(made) - 1) == 0:  # at each power of two
            made[:] = [c for c in made if inspect.getcoroutinestate(c) == inspect.CORO_CREATED]
        made.append(coro)
        return coro

    async def _drive(self, core: Core, task: object | None) -> Any:
        try:
            return await adrive(core, self._j.clock)
        finally:
            self._j.end(task)

    def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: Retry | None = None,
        **kwargs: Any,
    ) -> Coroutine[Any, Any, Any]:
        """Call (and await) ``fn(*args, **kwargs)`` once; on replay return the recorded result."""
        return self._start(self._core("step", name, fn, args, kwargs, retry))

    def llm(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: Retry | None = None,
        **kwargs: Any,
    ) -> Coroutine[Any, Any, Any]:
        """A model call: a step whose result's usage (tokens, cost) is recorded."""
        return self._start(self._core("llm", name, fn, args, kwargs, retry))

    def decide(
        self, name: str, choice: Any, why: str = "", **details: Any
    ) -> Coroutine[Any, Any, Any]:
        """Record a choice and its rationale; on replay return the recorded choice."""
        return self._ready(self._decide(name, choice, why, details))

    def tool(self, tool: Callable[..., Any], *args: Any, **kwargs: Any) -> Coroutine[Any, Any, Any]:
        """Call a registered tool effectively once (awaited when it is async)."""
        return self._start(self._tool(tool, args, kwargs))

    def map(
        self,
        name: str,
        fn: Callable[[Any], Any],
        items: Iterable[Any],
        *,
        max_workers: int | None = None,
        retry: Retry | None = None,
    ) -> Coroutine[Any, Any, list[Any]]:
        """``fn(item)`` for every item at once (at most ``max_workers`` at a time), each a
        step ``name[i]`` whose position is taken now, in item order; a plain ``fn`` runs
        on threads. Awaited: the results in item order; see :meth:`Run.map`."""
        cores = self._map_cores(name, fn, items, retry, max_workers, fanout.threaded)
        return fanout.gathered([self._start(core) for core in cores], max_workers)

    def parallel(
        self, *branches: Callable[[], Any], max_workers: int | None = None
    ) -> Coroutine[Any, Any, list[Any]]:
        """Run ``branches`` (functions of no argument, each making one journaled call,
        ``lambda: run.step(...)``) as tasks, their positions taken now, in order. Awaited:
        their results in order; see :meth:`Run.parallel`."""
        fanout.check_workers(max_workers)
        fanout.check_branches(self.id, branches)
        return fanout.branches_gathered(self._j, branches, max_workers)

    def approve(
        self,
        name: str,
        payload: Any = None,
        *,
        approvers: list[str] | None = None,
        timeout: str | float | None = None,
    ) -> Coroutine[Any, Any, Any]:
        """Ask a human; see :meth:`Run.approve`."""
        return self._ready(approve_core(self._j, name, payload, approvers, timeout, self._groups))

    def sleep(self, duration: str | float, name: str = "sleep") -> Coroutine[Any, Any, None]:
        """A durable sleep; see :meth:`Run.sleep`."""
        return self._start(sleep_core(self._j, name, duration, self._inline_sleep_max))

    def wait(self, name: str, timeout: str | float | None = None) -> Coroutine[Any, Any, Any]:
        """Wait for a signal; see :meth:`Run.wait`."""
        return self._ready(wait_core(self._j, name, timeout))

    def child(
        self,
        agent: Callable[..., Any] | str,
        *args: Any,
        queue: str = "default",
        inline: bool = False,
        **kwargs: Any,
    ) -> Coroutine[Any, Any, Any]:
        """Start a child run (its position taken now); see :meth:`Run.child`."""
        if inline is not False:
            return inlined.achild(self._j, (agent, args, kwargs, queue, self._tenant_of), inline)
        return self._ready(
            children.start_core(self._j, agent, args, kwargs, queue, self._tenant_of)
        )

    def children(
        self, agent: Callable[..., Any] | str, items: Iterable[Any], *, queue: str = "default"
    ) -> Coroutine[Any, Any, list[str]]:
        """Start a child run per item in one transaction; see :meth:`Run.children`."""
        return self._ready(children.start_many_core(self._j, agent, items, queue, self._tenant_of))

    def join(self, runs: str | Iterable[str], name: str = "join") -> Coroutine[Any, Any, Any]:
        """Wait for child runs; see :meth:`Run.join` (each join takes its position when it
        is called, so ``asyncio.gather(run.join(a), run.join(b))`` numbers them in order)."""
        return self._ready(children.join_core(self._j, runs, name))

    def handoff(
        self,
        agent: Callable[..., Any] | str,
        *args: Any,
        vars: Iterable[str] | str = (),
        conversation: Any = None,
        queue: str = "default",
        wait: bool = True,
        **kwargs: Any,
    ) -> Coroutine[Any, Any, Any]:
        """Hand off to a new run of ``agent``; see :meth:`Run.handoff`."""
        return self._ready(
            self._handoff(
                agent, args, kwargs, names=vars, conversation=conversation, queue=queue, wait=wait
            )
        )


async def _ready(value: Any) -> Any:
    """An awaitable of a value already known (a call that finished when it was made)."""
    return value


def close_unawaited(run: AsyncRun) -> None:
    """The agent raised while calls it made were never awaited (another awaitable of the
    same ``asyncio.gather`` raised, or made the run wait, when it was called): close them,
    which Python would otherwise report as never awaited (see ``AsyncRun._ready``)."""
    made, run._made = run._made or [], None
    for coro in made:
        if inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
            coro.close()
