"""Tools with side effects, made effectively once: idempotency keys and the effects table.

Every tool call gets the key ``{run_id}:{position}:{tool}:{args_hash}``. For a
``write`` or ``irreversible`` tool, a durable ``tool.intent`` event (and an
``intent`` row in the effects table) is committed *before* the tool runs, and
the completion (event + ``completed`` row with the result) after it, each in
one transaction. On replay:

- a completed call returns its recorded result (nothing runs);
- a key already ``completed`` in the effects table returns that result;
- an intent without a completion means the process died around the call: the
  effect is *in doubt*. ``on_doubt="retry"`` (default) calls the tool again
  with the same key, for APIs that dedup by key; ``on_doubt="ask"`` pauses the
  run until a human says it happened (with its result) or did not (retry).

A tool that declares a keyword parameter ``idempotency_key`` receives the key;
:func:`tether.current_step` gives it (with the attempt and run id) anywhere
inside the call.

A decorated tool called directly in an agent's body (``send(...)`` instead of
``run.tool(send, ...)``) would run outside all of this: no key, no intent, no
record, again at every replay. It raises instead (:func:`guarded`). Called
anywhere else (a test, a script, inside a step or another tool) it is the plain
function.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import codec, inputs
from . import events as ev
from .errors import InvalidState
from .journal import Call, Core, Journal, Slot, attempts, in_agent_body, step_key
from .retry import Retry
from .store import EffectWrite

RISKS = ("read", "write", "irreversible")
DOUBT_POLICIES = ("retry", "ask")


@dataclass(frozen=True, slots=True)
class ToolDef:
    """A registered tool."""

    name: str
    fn: Callable[..., Any]
    risk: str
    compensate: Callable[..., Any] | None
    on_doubt: str
    retry: Retry | None
    code: dict[str, Any]
    takes_key: bool
    undo_takes_key: bool

    @property
    def writes(self) -> bool:
        """Whether calls have side effects (need an intent before they run)."""
        return self.risk != "read"


def define_tool(
    fn: Callable[..., Any],
    *,
    name: str | None,
    risk: str,
    compensate: Callable[..., Any] | None,
    on_doubt: str,
    retry: Retry | None,
) -> ToolDef:
    """Validate and build a ToolDef (what ``@app.tool`` does)."""
    if risk not in RISKS:
        raise ValueError(f"tool {fn.__qualname__!r}: risk must be one of {RISKS}, not {risk!r}")
    if on_doubt not in DOUBT_POLICIES:
        raise ValueError(
            f"tool {fn.__qualname__!r}: on_doubt must be one of {DOUBT_POLICIES}, not {on_doubt!r}"
        )
    if compensate is not None and not callable(compensate):
        raise TypeError(f"tool {fn.__qualname__!r}: compensate must be callable")
    if retry is not None and not isinstance(retry, Retry):
        raise TypeError(f"tool {fn.__qualname__!r}: retry must be a tether.Retry, not {retry!r}")
    name = fn.__name__ if name is None else name
    inputs.name(name, "the tool's name")
    code = {"module": fn.__module__, "qualname": fn.__qualname__}
    source = inspect.getsourcefile(fn)
    if source:
        code["file"] = os.path.abspath(source)
    return ToolDef(
        name,
        fn,
        risk,
        compensate,
        on_doubt,
        retry,
        code,
        _takes_key(fn),
        compensate is not None and _takes_key(compensate),
    )


def guarded(d: ToolDef) -> Callable[..., Any]:
    """The tool's function as its decorator returns it: the function itself, except in an
    agent's body (outside any step or tool call), where calling it raises InvalidState
    and says to call it through the run."""
    fn = d.fn

    def check() -> None:
        run_id = in_agent_body()
        if run_id is not None:
            raise InvalidState(
                f"run {run_id}: tool {d.name!r} was called directly in the agent, so its "
                f"call would be neither journaled nor done once (it would run again at every "
                f"replay). Call it through the run: run.tool({fn.__name__}, ...)"
            )

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def direct_async(*args: Any, **kwargs: Any) -> Any:
            check()
            return await fn(*args, **kwargs)

        wrapper: Callable[..., Any] = direct_async
    else:

        @functools.wraps(fn)
        def direct(*args: Any, **kwargs: Any) -> Any:
            check()
            return fn(*args, **kwargs)

        wrapper = direct
    wrapper.__tether_tool__ = d  # type: ignore[attr-defined]
    return wrapper


def _takes_key(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    p = params.get("idempotency_key")
    return p is not None and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)


def tool_core(
    j: Journal,
    tool: ToolDef,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    policy: Retry,
) -> Core:
    """One tool call: replay, dedup by key, or execute with a durable intent first."""
    inputs = {"args": list(args), "kwargs": kwargs}
    digest = codec.digest(inputs)
    slot = j.slot("tool", tool.name, digest)
    rec = slot.recorded
    if rec is not None and rec.status == "completed":
        return rec.output
    key = step_key(j.run_id, slot.pos, tool.name, digest)
    if tool.writes:
        done = _already_done(j, slot, key)
        if done is not None:
            return done[0]
        if rec is not None and rec.status == "running" and tool.on_doubt == "ask":
            data = {"pos": slot.pos, "name": tool.name, "key": key}
            raise j.suspend([j.event(ev.TOOL_IN_DOUBT, data)], f"doubt:{key}", None)
    call_kwargs = {**kwargs, "idempotency_key": key} if tool.takes_key else kwargs
    call = Call(tool.fn, args, call_kwargs, policy.timeout)
    if not tool.writes:
        return (yield from attempts(j, slot, call, policy, digest, key))

    def intent(attempt: int) -> None:
        data = {
            "pos": slot.pos,
            "name": tool.name,
            "kind": "tool",
            "key": key,
            "attempt": attempt,
            "digest": digest,
            "risk": tool.risk,
            "input": inputs,
            "code": tool.code,
        }
        j.append([j.event(ev.TOOL_INTENT, data)], writes=[effect])

    effect = EffectWrite(key, j.run_id, slot.pos, tool.name, "intent")
    return (yield from attempts(j, slot, call, policy, digest, key, intent, effect))


def _already_done(j: Journal, slot: Slot, key: str) -> tuple[Any] | None:
    """The effects table's result for ``key``, recorded into this run's log."""
    effect = j.store.get_effect(key)
    if effect is None or effect.status != "completed" or effect.result is None:
        return None
    output = codec.decode(effect.result)
    attempt = slot.recorded.attempts if slot.recorded else 1
    j.record_success(slot, attempt, None, output, 0.0, key=key)
    return (output,)
