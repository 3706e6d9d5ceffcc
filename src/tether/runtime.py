"""The ``run`` object an agent receives: step, llm, decide and task variables.

``Run`` (for ``def`` agents) and ``AsyncRun`` (for ``async def`` agents) are two
thin drivers of the same generator core in :mod:`tether.journal`: the sync one
calls and sleeps, the async one awaits.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, MutableMapping
from functools import partial
from typing import Any

from . import events as ev
from . import inputs
from .clock import Clock
from .conversation import Session, session_of_run
from .durations import parse_duration
from .effects import ToolDef, tool_core
from .errors import EncodeError
from .journal import Call, Core, Journal, Sleep, step_core
from .retry import Retry, call_with_timeout
from .waits import approve_core, sleep_core, wait_core

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


class Vars(MutableMapping[str, Any]):
    """Task variables: reads are local, every write and delete is journaled by position."""

    def __init__(self, journal: Journal) -> None:
        self._j = journal
        self._data = journal.vars

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._data[key] = value  # before the write: a fork's edits applied at it win
        self._write(ev.VAR_SET, key, value)

    def __delitem__(self, key: str) -> None:
        if key not in self._data:
            raise KeyError(key)
        del self._data[key]
        self._write(ev.VAR_DELETED, key, None)

    def _write(self, type_: str, key: str, value: Any) -> None:
        if not isinstance(key, str) or not key:
            raise TypeError(
                f"run {self._j.run_id}: task variable names are non-empty str, not {key!r}"
            )
        slot = self._j.slot("var", f"vars.{key}")
        if slot.done:
            return
        data = {"pos": slot.pos, "name": slot.name, "key": key, "value": value}
        try:
            event = self._j.event(type_, data)
        except EncodeError as e:
            raise EncodeError(
                f"run {self._j.run_id}: task variable {key!r} (position {slot.pos}) cannot be "
                f"stored: {e.type_name} at {e.path.replace('$.value', '$', 1)}",
                path=e.path,
                type_name=e.type_name,
            ) from None
        self._j.append([event])
        self._j.executed.append((slot.pos, slot.name))

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"Vars({self._data!r})"


class Policy:
    """When tool calls need a human: tools at or above ``approve_at`` risk get an
    automatic ``run.approve("approve:<tool>")`` gate before they run."""

    LEVELS = ("read", "write", "irreversible")

    def __init__(
        self,
        approve_at: str | None = None,
        approvers: list[str] | None = None,
        timeout: str | float | None = None,
    ) -> None:
        if approve_at is not None and approve_at not in self.LEVELS:
            raise ValueError(f"approve_at must be one of {self.LEVELS} or None, not {approve_at!r}")
        parse_duration(timeout, what="Policy.timeout")  # refused here, not at the first gate
        for a in approvers or ():
            inputs.name(a, "Policy.approvers: an approver")
        self.approve_at = approve_at
        self.approvers = approvers
        self.timeout = timeout

    def requires_approval(self, risk: str) -> bool:
        if self.approve_at is None:
            return False
        return self.LEVELS.index(risk) >= self.LEVELS.index(self.approve_at)


class _RunBase:
    def __init__(
        self,
        journal: Journal,
        agent: str,
        default_retry: Retry,
        policy: Policy | None = None,
        inline_sleep_max: float = 60.0,
    ) -> None:
        self._j = journal
        self.agent = agent
        self._retry = default_retry
        self._policy = policy or Policy()
        self._inline_sleep_max = inline_sleep_max
        self.vars = Vars(journal)
        self._session: Session | object | None = _UNSET  # loaded on first use

    @property
    def session(self) -> Session | None:
        """The conversation this run belongs to (``app.run_in``), or None."""
        if self._session is _UNSET:
            self._session = session_of_run(self._j.store, self._j.clock, self.id, self)
        assert self._session is None or isinstance(self._session, Session)
        return self._session

    def _prompt(self, messages: Any) -> dict[str, Any]:
        """A model call's prompt as references to the session's messages (none outside one)."""
        session = self.session
        return {} if session is None else {"prompt": session.prompt_refs(messages)}

    @property
    def id(self) -> str:
        """The run id."""
        return self._j.run_id

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
        if kind == "llm" and "messages" in kwargs:  # plain steps pay nothing
            note = partial(self._prompt, kwargs["messages"])
        return step_core(self._j, kind, name, fn, args, kwargs, retry or self._retry, note)

    def _tool(
        self, tool: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Core:
        d = getattr(tool, "__tether_tool__", None)
        if not isinstance(d, ToolDef):
            raise TypeError(
                f"run {self.id}: {getattr(tool, '__qualname__', tool)!r} is not a "
                f"tether tool; decorate it with @app.tool(risk=...)"
            )
        gate = f"approve:{d.name}"
        recorded = self._j.peek()
        # The log wins over the policy: a recorded gate is replayed, a recorded call is not
        # gated afresh, so changing the policy never breaks a run in flight.
        if (recorded is None and self._policy.requires_approval(d.risk)) or (
            recorded is not None and recorded.kind == "approve" and recorded.name == gate
        ):
            payload = {"tool": d.name, "risk": d.risk, "args": list(args), "kwargs": kwargs}
            approve_core(self._j, gate, payload, self._policy.approvers, self._policy.timeout)
        return tool_core(self._j, d, args, kwargs, d.retry or self._retry)

    def _decide(self, name: str, choice: Any, why: str, details: dict[str, Any]) -> Any:
        slot = self._j.slot("decide", name)
        if slot.done:
            assert slot.recorded is not None
            return slot.recorded.output
        data = {"pos": slot.pos, "name": name, "choice": choice, "why": why, "details": details}
        self._j.append([self._j.event(ev.DECISION, data)])
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
        return approve_core(self._j, name, payload, approvers, timeout)

    def sleep(self, duration: str | float, name: str = "sleep") -> None:
        """A durable sleep (``"10m"``): a restart sleeps only the time that is left."""
        drive(sleep_core(self._j, name, duration, self._inline_sleep_max), self._j.clock)

    def wait(self, name: str, timeout: str | float | None = None) -> Any:
        """Wait for ``app.signal(run_id, name, payload)`` and return its payload.

        Signals sent before the wait are kept. On timeout raises :class:`tether.WaitTimeout`.
        """
        return wait_core(self._j, name, timeout)


class AsyncRun(_RunBase):
    """What an ``async def`` agent receives first: the same calls, awaited."""

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: Retry | None = None,
        **kwargs: Any,
    ) -> Any:
        """Call (and await) ``fn(*args, **kwargs)`` once; on replay return the recorded result."""
        return await adrive(self._core("step", name, fn, args, kwargs, retry), self._j.clock)

    async def llm(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: Retry | None = None,
        **kwargs: Any,
    ) -> Any:
        """A model call: a step whose result's usage (tokens, cost) is recorded."""
        return await adrive(self._core("llm", name, fn, args, kwargs, retry), self._j.clock)

    async def decide(self, name: str, choice: Any, why: str = "", **details: Any) -> Any:
        """Record a choice and its rationale; on replay return the recorded choice."""
        return self._decide(name, choice, why, details)

    async def tool(self, tool: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call a registered tool effectively once (awaited when it is async)."""
        return await adrive(self._tool(tool, args, kwargs), self._j.clock)

    async def approve(
        self,
        name: str,
        payload: Any = None,
        *,
        approvers: list[str] | None = None,
        timeout: str | float | None = None,
    ) -> Any:
        """Ask a human; see :meth:`Run.approve`."""
        return approve_core(self._j, name, payload, approvers, timeout)

    async def sleep(self, duration: str | float, name: str = "sleep") -> None:
        """A durable sleep; see :meth:`Run.sleep`."""
        await adrive(sleep_core(self._j, name, duration, self._inline_sleep_max), self._j.clock)

    async def wait(self, name: str, timeout: str | float | None = None) -> Any:
        """Wait for a signal; see :meth:`Run.wait`."""
        return wait_core(self._j, name, timeout)
