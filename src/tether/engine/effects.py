"""Tools with side effects, made effectively once: idempotency keys and the effects table.

Every tool call gets the key ``{run_id}:{position}:{tool}:{args_hash}``. For a
``write`` or ``irreversible`` tool, a durable ``tool.intent`` event (and an
``intent`` row in the effects table) is committed *before* the tool runs, and
the completion (event + ``completed`` row with the result) after it, each in
one transaction. On replay:

- a completed call returns its recorded result (nothing runs);
- a key already ``completed`` in the effects table returns that result;
- an intent without a completion means the process died around the call: the
  effect is *in doubt*. ``on_doubt="retry"`` calls the tool again with the same
  key, for APIs that dedup by key; ``on_doubt="ask"`` pauses the run until a
  human says it happened (with its result) or did not (call again).

An attempt that ran past its ``Retry.timeout`` is in doubt too: it may have taken
effect, and a sync call's thread may still run (it is abandoned, not killed).
With ``retry`` it is retried by its policy, but never while the abandoned attempt
still runs in this process: the next attempt waits for it instead (bounded by the
same timeout) and takes its outcome once it ends; when the policy gives up on a
timeout, the run asks (a failure would leave an effect that may have happened
neither recorded nor undone). With ``ask`` the first timeout asks. An error the
tool raises is its own word that the call did not take effect: it is retried by
the policy in both cases.

``on_doubt`` left out (None) is derived: ``ask`` for an ``irreversible`` tool and
for a ``write`` tool that takes no ``idempotency_key`` (tether cannot know it
dedups); ``retry`` for a ``write`` tool that takes the key, since it can pass it
on. Say ``on_doubt="retry"`` to declare that a tool without the key dedups.

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
from typing import Any, Protocol

from tether.engine.calls import Call, Core, Slot, in_agent_body, step_key
from tether.engine.journal import Journal, error_info
from tether.engine.retry import Retry, keyed_call
from tether.engine.steps import attempts
from tether.errors import InvalidInput, InvalidState, StepTimeout
from tether.model import codec, inputs
from tether.model import events as ev
from tether.model.secrets import Secret, reveal_all
from tether.model.status import EffectStatus, StepStatus
from tether.store import EffectWrite, Store

RISKS = ("read", "write", "irreversible")
DOUBT_POLICIES = ("retry", "ask")


@dataclass(frozen=True, slots=True)
class ToolDef:
    """A registered tool."""

    name: str
    fn: Callable[..., Any]
    risk: str
    compensate: Callable[..., Any] | None
    on_doubt: str  # retry | ask: as declared, or derived (see the module's docstring)
    retry: Retry | None
    code: dict[str, Any]
    takes_key: bool
    undo_takes_key: bool
    secret: frozenset[str] = frozenset()  # parameters stored as secrets (see mark_secrets)
    secret_at: tuple[tuple[int, str], ...] = ()  # (position, name) of those passed by position
    rules: tuple[Any, ...] | None = None  # its contract's own Rules (None: no contract)

    @property
    def writes(self) -> bool:
        """Whether calls have side effects (need an intent before they run)."""
        return self.risk != "read"


def a_function(fn: Any) -> None:
    """Refuse a tool that is not a plain function: a bound method, a partial, a callable
    object, a builtin (it could not carry its definition, nor be found by it)."""
    if not inspect.isfunction(fn):
        raise TypeError(
            f"@app.tool decorates a function (def name(...)), not {fn!r}: a tool is known by "
            f"its function (run.tool(fn, ...)), which carries its definition. Wrap it: "
            f"def send_email(to, body): return client.send_email(to, body)"
        )


def define_tool(
    fn: Callable[..., Any],
    *,
    name: str | None,
    risk: str,
    compensate: Callable[..., Any] | None,
    on_doubt: str | None,
    retry: Retry | None,
    secret: Sequence[str] = (),
    rules: tuple[Any, ...] | None = None,
) -> ToolDef:
    """Validate and build a ToolDef (what ``@app.tool`` does); ``rules``: its contract's,
    checked by :func:`tether.engine.contracts.tool_rules`. ``fn`` is a function: the
    caller checked it (:func:`a_function`) before reading its name."""
    if risk not in RISKS:
        raise ValueError(f"tool {fn.__qualname__!r}: risk must be one of {RISKS}, not {risk!r}")
    if on_doubt is not None and on_doubt not in DOUBT_POLICIES:
        raise ValueError(
            f"tool {fn.__qualname__!r}: on_doubt must be one of {DOUBT_POLICIES} (or None: "
            f"derived from risk and the idempotency_key parameter), not {on_doubt!r}"
        )
    if compensate is not None and not callable(compensate):
        raise TypeError(f"tool {fn.__qualname__!r}: compensate must be callable")
    if retry is not None and not isinstance(retry, Retry):
        raise TypeError(f"tool {fn.__qualname__!r}: retry must be a tether.Retry, not {retry!r}")
    name = fn.__name__ if name is None else name
    inputs.name(name, "the tool's name")
    code: dict[str, Any] = {"module": fn.__module__, "qualname": fn.__qualname__}
    source = inspect.getsourcefile(fn)
    if source:
        code["file"] = os.path.abspath(source)
    if compensate is None:  # recorded with its calls: nothing to look up to undo them
        code["undo"] = False
    takes_key = _takes_key(fn)
    secret_params, secret_at = _secret_params(fn, name, secret)
    return ToolDef(
        name,
        fn,
        risk,
        compensate,
        on_doubt or derived_doubt(risk, takes_key),
        retry,
        code,
        takes_key,
        compensate is not None and _takes_key(compensate),
        secret_params,
        secret_at,
        rules,
    )


def _secret_params(
    fn: Callable[..., Any], name: str, secret: Sequence[str]
) -> tuple[frozenset[str], tuple[tuple[int, str], ...]]:
    """``secret=`` checked (a list of the tool's parameter names): the names, and their
    positions among the parameters that may be passed positionally."""
    if isinstance(secret, str) or not isinstance(secret, Sequence | set | frozenset):
        raise InvalidInput(
            f"tool {name!r}: secret= is a list of parameter names (secret=['api_key']), "
            f"not {secret!r}"
        )
    if not secret:
        return frozenset(), ()
    params = list(inspect.signature(fn).parameters.values())  # a function's (a_function)
    names = [p.name for p in params]
    takes_any = any(p.kind == p.VAR_KEYWORD for p in params)
    for s in secret:
        if not isinstance(s, str) or (s not in names and not takes_any):
            raise InvalidInput(
                f"tool {name!r}: secret= names {s!r}, which is not one of its parameters "
                f"({', '.join(names)})"
            )
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    by_position = [(i, p) for i, p in enumerate(params) if p.kind in positional]
    at = tuple((i, p.name) for i, p in by_position if p.name in secret)
    return frozenset(secret), at


def mark_secrets(
    d: ToolDef, args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` and ``kwargs`` with the values of the tool's secret parameters wrapped in
    :class:`~tether.model.secrets.Secret` (named after the parameter), so that they are
    stored as markers and hashed as such; the call unwraps them again (reveal_all)."""
    if not d.secret:
        return tuple(args), kwargs
    out_args = list(args)
    for i, pname in d.secret_at:
        if i < len(args):
            out_args[i] = _as_secret(args[i], pname, d.name)
    out_kwargs = {k: _as_secret(v, k, d.name) if k in d.secret else v for k, v in kwargs.items()}
    return tuple(out_args), out_kwargs


def _as_secret(value: Any, name: str, tool: str) -> Any:
    if isinstance(value, Secret) or value is None:
        return value  # None: an optional key left out, nothing to hide
    if not isinstance(value, str | bytes):
        raise InvalidInput(
            f"tool {tool!r}: the secret parameter {name!r} takes a str (or bytes, or a "
            f"tether.Secret), not {type(value).__name__}: a secret is text (convert it first)"
        )
    return Secret(value, name=name)


def derived_doubt(risk: str, takes_key: bool) -> str:
    """The ``on_doubt`` of a tool that did not declare one: retry only what can dedup."""
    return "retry" if risk == "write" and takes_key else "ask"


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


class Check(Protocol):
    """A contract's judgement of one call (:mod:`tether.engine.contracts`)."""

    def before(self, slot: Slot) -> None: ...

    def after(self, slot: Slot, core: Core, key: str) -> Core: ...


def tool_core(
    j: Journal,
    tool: ToolDef,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    policy: Retry,
    check: Check | None = None,
) -> Core:
    """One tool call: its position is taken now (in the order of the calls); the core
    returned replays it, dedups it by key, or executes it with a durable intent first.
    ``check``: a tool with a contract: judged (or its verdict replayed) once the call has
    its position, its result checked after the call."""
    inputs = {"args": list(args), "kwargs": kwargs}
    plain = codec.is_plain(inputs)  # the common case: nothing to reveal, one walk for both
    digest = _recorded_digest(j, tool.name, inputs, codec.digest(inputs, plain=plain))
    slot = j.slot("tool", tool.name, digest)
    if check is not None:
        check.before(slot)  # a refusal raises here: the tool is not called
    core = _tool_call(j, slot, tool, inputs, digest, policy, plain)
    if check is not None:
        core = check.after(slot, core, step_key(j.run_id, slot.pos, tool.name, digest))
    return core if j.trace is None else j.trace.call(slot, core, args, kwargs)


def _recorded_digest(j: Journal, name: str, inputs: Any, digest: str) -> str:
    """``digest``, or the digest of the unredacted arguments when that is what the log
    recorded at this position: a call made by a tether before redaction (or with it
    turned off), whose arguments held a credential, replays with its recorded digest and
    so its idempotency key, not as nondeterminism."""
    rec = j.peek()
    if rec is None or rec.kind != "tool" or rec.name != name:
        return digest
    if rec.input_digest in (None, digest):
        return digest
    raw = codec.digest(inputs, redacted=False)
    return raw if raw == rec.input_digest else digest


def _tool_call(
    j: Journal,
    slot: Slot,
    tool: ToolDef,
    inputs: dict[str, Any],
    digest: str,
    policy: Retry,
    plain: bool,
) -> Core:
    args, kwargs = inputs["args"], inputs["kwargs"]
    rec = slot.recorded
    if rec is not None and rec.status == StepStatus.COMPLETED:
        if tool.writes and rec.key and not owns(j.run_id, rec.key):
            still_holds(j, slot, rec.key)  # a fork's copied call: undone by its owner since?
        return rec.output
    key = step_key(j.run_id, slot.pos, tool.name, digest)
    if tool.writes:
        done = _already_done(j, slot, key, digest)
        if done is not None:
            return done[0]
        if rec is not None and rec.status == StepStatus.RUNNING and tool.on_doubt == "ask":
            data = {"pos": slot.pos, "name": tool.name, "key": key, "reason": "crash"}
            raise j.suspend([j.event(ev.TOOL_IN_DOUBT, data)], f"doubt:{key}", None)
    shown = None if plain else (args, kwargs)  # a failure's context shows Secret('***')
    if not plain:
        args, kwargs = reveal_all(args), reveal_all(kwargs)  # the function gets the values
    call_kwargs = {**kwargs, "idempotency_key": key} if tool.takes_key else kwargs
    if not tool.writes:
        call = Call(tool.fn, args, call_kwargs, policy.timeout)
        return (yield from attempts(j, slot, call, policy, digest, key, shown=shown))
    call = Call(keyed_call(tool.fn, key, policy.timeout), args, call_kwargs, None)

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

    def in_doubt(exc: BaseException, attempt: int) -> None:
        """A timed-out attempt that is not to be retried now: ask, in one append."""
        if not isinstance(exc, StepTimeout) or not exc.in_doubt:
            return  # the tool's own error: its word that the call did not take effect
        if tool.on_doubt == "retry" and policy.should_retry(exc, attempt):
            return
        data = {
            "pos": slot.pos,
            "name": tool.name,
            "key": key,
            "reason": "timeout",
            "attempt": attempt,
            "error": error_info(exc, j.clock.now()),
        }
        raise j.suspend([j.event(ev.TOOL_IN_DOUBT, data)], f"doubt:{key}", None)

    effect = EffectWrite(key, j.run_id, slot.pos, tool.name, EffectStatus.INTENT)
    return (
        yield from attempts(
            j, slot, call, policy, digest, key, intent, effect, in_doubt=in_doubt, shown=shown
        )
    )


def _already_done(j: Journal, slot: Slot, key: str, digest: str) -> tuple[Any] | None:
    """The effects table's result for ``key``, recorded into this run's log (with the
    call's args digest, so that a later replay still checks the arguments)."""
    effect = j.store.get_effect(key)
    if effect is None or effect.status != EffectStatus.COMPLETED or effect.result is None:
        return None
    output = codec.decode(effect.result)
    attempt = slot.recorded.attempts if slot.recorded else 1
    j.record_success(slot, attempt, digest, output, 0.0, key=key)
    return (output,)


# An effects-table row's status: ``intent`` (committed before the call runs),
# ``completed`` (with its result), and, when a compensation undoes the call,
# ``compensating`` (committed before the undo runs) then ``compensated`` (with its end).
UNDONE = (EffectStatus.COMPENSATING, EffectStatus.COMPENSATED)


def owns(run_id: str, key: str) -> bool:
    """Whether run ``run_id`` made the call of ``key``: a fork's copied calls keep the key
    (and so the effect) of the run that made them."""
    return key.startswith(f"{run_id}:")


def undone(store: Store, key: str) -> str | None:
    """``compensating`` or ``compensated`` when a compensation undid, or is undoing, the
    call of ``key`` (whichever run of its lineage did); None while its effect holds."""
    effect = store.get_effect(key)
    return effect.status if effect is not None and effect.status in UNDONE else None


def still_holds(j: Journal, slot: Slot, key: str) -> None:
    """Refuse to replay a copied call whose effect a compensation undid since the fork:
    the run would build on an effect that no longer holds (ship an order whose charge was
    refunded). Raised at its position, so the run fails and undoes its own calls."""
    status = undone(j.store, key)
    if status is None:
        return
    owner = key.split(":", 1)[0]
    err = InvalidState(
        f"run {j.run_id}: tool {slot.name!r} at position {slot.pos} reuses the call run "
        f"{owner} made (key {key}), which a compensation has undone since this fork was made "
        f"(its effect is {status}); this run cannot go on from it. Fork {owner} before that "
        f"step instead (app.fork({owner!r}, step={slot.pos}, when='before')), where the call "
        f"runs again with the fork's own idempotency key."
    )
    j.poisoned = err  # every later call of this execution raises it too
    j.last_failure = (err, j.failure_context(err, slot, None, None))
    raise err
