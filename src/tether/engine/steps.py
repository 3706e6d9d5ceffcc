"""The step core: one journaled call with its retries, written once as a generator.

:func:`step_core` takes the call's position in program order and returns a core that
replays the recorded output, or executes the call (:func:`attempts`) and records every
attempt in the :class:`~tether.engine.journal.Journal`. :mod:`tether.engine.runtime`
drives the core synchronously or with ``await``: there are no sync/async twins.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tether.engine.calls import _CURRENT, Call, Core, Sleep, Slot, StepInfo, step_key
from tether.engine.journal import Journal
from tether.engine.retry import Retry
from tether.errors import InvalidInput, LeaseLost
from tether.model import codec
from tether.model.secrets import reveal_all
from tether.store import EffectWrite


def step_core(
    j: Journal,
    kind: str,
    name: str,
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    policy: Retry,
    note: Callable[[], Mapping[str, Any]] | None = None,
) -> Core:
    """One journaled call with retries: its position is taken now, in the order of the
    calls; the core returned replays it, or executes it and records every attempt.

    ``note()``, when given, is called once if the call executes (never on replay) and
    its items are added to the ``step.completed`` event (a model call's prompt refs).
    """
    if not callable(fn):
        raise TypeError(f"run {j.run_id}: {kind} {name!r} needs a callable, got {fn!r}")
    if not isinstance(policy, Retry):
        raise InvalidInput(
            f"run {j.run_id}: {kind} {name!r}: retry= takes a tether.Retry "
            f"(e.g. tether.Retry(max_attempts=3)), not {policy!r}"
        )
    slot = j.slot(kind, name)
    if slot.done:
        assert slot.recorded is not None
        core = replayed(slot.recorded.output)
    else:
        core = _step(j, slot, fn, args, kwargs, policy, note)
    return core if j.trace is None else j.trace.call(slot, core, args, kwargs)


def replayed(value: Any) -> Core:
    """A core that returns ``value`` at once (a position the log already answers)."""
    return value
    yield  # makes this a generator: drivers treat every core alike


def _step(
    j: Journal,
    slot: Slot,
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    policy: Retry,
    note: Callable[[], Mapping[str, Any]] | None,
) -> Core:
    packed = [list(args), kwargs]
    plain = codec.is_plain(packed)  # the common case: nothing to reveal, one walk for both
    digest = codec.digest(packed, plain=plain)
    key = step_key(j.run_id, slot.pos, slot.name, digest)
    if plain:
        call, shown = Call(fn, args, kwargs, policy.timeout), None
    else:  # the function gets the secrets' values; a failure's context shows Secret('***')
        call = Call(fn, reveal_all(args), reveal_all(kwargs), policy.timeout)
        shown = (args, kwargs)
    extra = note() if note is not None else None
    return (yield from attempts(j, slot, call, policy, digest, key, extra=extra, shown=shown))


def attempts(
    j: Journal,
    slot: Slot,
    call: Call,
    policy: Retry,
    digest: str,
    key: str,
    before: Callable[[int], None] | None = None,
    effect: EffectWrite | None = None,
    extra: Mapping[str, Any] | None = None,
    also: Sequence[EffectWrite] = (),
    in_doubt: Callable[[BaseException, int], None] | None = None,
    shown: Any = None,
) -> Core:
    """Call until success or the policy gives up, recording every attempt.

    ``before(attempt)`` runs ahead of each attempt (a tool's durable intent);
    ``effect`` is completed in the effects table with the result, and the writes
    ``also`` made, in the same transaction. ``in_doubt(error, attempt)`` sees a
    failed attempt before it is recorded and raises to record it otherwise (a write
    tool's call in doubt makes the run wait for a human). ``shown``: the arguments as a
    failure's context shows them (with their Secrets), when the call's are revealed.
    """
    attempt = slot.recorded.attempts + 1 if slot.recorded else 1
    if slot.recorded is not None and slot.recorded.next_retry_at is not None:
        wait = slot.recorded.next_retry_at - j.clock.now()
        if wait > 0:
            yield Sleep(wait)
    inputs = shown if shown is not None else (call.args, call.kwargs)
    while True:
        if before is not None:
            before(attempt)
        if j.workspace is None or not j.workspace.overlaps(slot.kind):
            j.flush()  # the step before this one is durable before this call runs
        t0 = time.perf_counter()
        token = _CURRENT.set(StepInfo(j.run_id, slot.pos, slot.name, slot.kind, attempt, key))
        try:
            output = yield call
        except Exception as exc:
            _CURRENT.reset(token)
            if isinstance(exc, LeaseLost) or j.poisoned is not None:
                raise
            if in_doubt is not None:
                in_doubt(exc, attempt)
            delay = j.record_failure(slot, attempt, digest, exc, policy, inputs)
            if delay is None:
                raise
            yield Sleep(delay)
            attempt += 1
            continue
        except BaseException:
            _CURRENT.reset(token)
            raise
        _CURRENT.reset(token)
        j.record_success(
            slot,
            attempt,
            digest,
            output,
            time.perf_counter() - t0,
            key=key if effect is not None else None,
            effect=effect,
            extra=extra,
            writes=also,
        )
        return output
