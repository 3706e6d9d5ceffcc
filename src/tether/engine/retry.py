"""Retry policies: how many attempts, how long between them, which errors, timeouts."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tether.errors import InvalidInput, StepTimeout
from tether.model import inputs

RetryOn = tuple[type[BaseException], ...] | Callable[[BaseException], bool]


@dataclass(frozen=True, slots=True)
class Retry:
    """A step's retry policy.

    ``max_attempts`` counts the first call (1 = no retry). The delay before
    attempt ``n+1`` is ``backoff * multiplier**(n-1)``, capped at ``max_delay``,
    spread by ``±jitter`` (a fraction). ``retry_on`` is a tuple of exception
    types or a predicate; other errors fail the step at once. ``timeout`` bounds
    one attempt in seconds: a sync call runs in a helper thread that is abandoned,
    not killed, when it times out (an async one is cancelled). A step or a read
    tool is then simply retried (keep it idempotent); a write tool's call is in
    doubt, retried only when its tool dedups and never while the abandoned attempt
    still runs in this process (see :mod:`tether.engine.effects`).
    """

    max_attempts: int = 1
    backoff: float = 1.0
    max_delay: float = 60.0
    jitter: float = 0.1
    retry_on: RetryOn = (Exception,)
    timeout: float | None = None
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        inputs.integer(self.max_attempts, "Retry.max_attempts", low=1)
        inputs.seconds(self.backoff, "Retry.backoff")
        inputs.seconds(self.max_delay, "Retry.max_delay")
        inputs.seconds(self.multiplier, "Retry.multiplier")
        if isinstance(self.jitter, bool) or not isinstance(self.jitter, int | float):
            raise InvalidInput(f"Retry.jitter is a fraction in [0, 1], not {self.jitter!r}")
        if not 0 <= self.jitter <= 1:
            raise InvalidInput(f"Retry.jitter is a fraction in [0, 1], not {self.jitter}")
        if self.timeout is not None:
            inputs.seconds(self.timeout, "Retry.timeout", above=True)
        if not isinstance(self.retry_on, tuple) and not callable(self.retry_on):
            raise InvalidInput("Retry.retry_on is a tuple of exception types or a predicate")

    def should_retry(self, exc: BaseException, attempt: int) -> bool:
        """Whether attempt ``attempt`` failing with ``exc`` leaves another attempt."""
        if attempt >= self.max_attempts or not isinstance(exc, Exception):
            return False
        if isinstance(self.retry_on, tuple):
            return isinstance(exc, self.retry_on)
        return bool(self.retry_on(exc))

    def delay(self, attempt: int, rng: Callable[[], float] = random.random) -> float:
        """Seconds to wait after attempt ``attempt`` (1-based) failed."""
        base = min(self.max_delay, self.backoff * self.multiplier ** (attempt - 1))
        return max(0.0, base * (1 + self.jitter * (2 * rng() - 1)))


NO_RETRY = Retry()


def call_with_timeout(fn: Callable[..., Any], args: Any, kwargs: Any, timeout: float | None) -> Any:
    """Call ``fn``; with a timeout, in a daemon thread that is abandoned on expiry."""
    if timeout is None:
        return fn(*args, **kwargs)
    attempt = _Attempt.start(fn, args, kwargs)
    if not attempt.join(timeout):
        raise StepTimeout(f"{_name(fn)} ran past its {timeout}s timeout")
    return attempt.outcome()


def _name(fn: Callable[..., Any]) -> str:
    return repr(getattr(fn, "__qualname__", fn))


@dataclass(frozen=True, slots=True)
class _Attempt:
    """A call in its own thread: joined with a bound, abandoned (never killed) past it."""

    thread: threading.Thread
    box: dict[str, Any]
    since: float = field(default_factory=time.monotonic)

    @classmethod
    def start(cls, fn: Callable[..., Any], args: Any, kwargs: Any) -> _Attempt:
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = fn(*args, **kwargs)
            except BaseException as e:  # handed over to the caller's thread
                box["error"] = e

        ctx = contextvars.copy_context()  # tether.current_step() works inside the thread too
        name = f"tether-step-{getattr(fn, '__name__', 'call')}"
        thread = threading.Thread(target=ctx.run, args=(target,), daemon=True, name=name)
        thread.start()
        return cls(thread, box)

    def join(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds (None: until it ends); whether it ended."""
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def outcome(self) -> Any:
        if "error" in self.box:
            raise self.box["error"]
        return self.box.get("value")


# A write tool's attempts that ran past their timeout and may still run, by idempotency
# key: the next attempt of the key in this process waits for one instead of calling again,
# and takes its outcome when it ends. An entry goes when an attempt takes it; one that no
# attempt takes (a human settled the doubt) is forgotten once it ended and is an hour old.
_ABANDONED: dict[str, _Attempt] = {}
_ABANDONED_LOCK = threading.Lock()
_FORGET_AFTER = 3600.0  # seconds


def keyed_call(fn: Callable[..., Any], key: str, timeout: float | None) -> Callable[..., Any]:
    """``fn`` as a write tool's call of idempotency key ``key`` runs, bounded by ``timeout``:
    past it the call is abandoned (a thread) or cancelled (a coroutine) and StepTimeout
    says it is in doubt. While an earlier attempt of ``key`` still runs in this process it
    is waited for (with the same bound) instead of calling ``fn`` again, and its outcome
    is this attempt's."""
    if inspect.iscoroutinefunction(fn):
        return functools.partial(_keyed_async, fn, key, timeout)
    return functools.partial(_keyed_sync, fn, key, timeout)


def _keyed_sync(fn: Callable[..., Any], key: str, timeout: float | None, *a: Any, **kw: Any) -> Any:
    earlier = _take_abandoned(key) if _ABANDONED else None
    if earlier is not None:
        return _outcome_of(earlier, fn, key, timeout)
    if timeout is None:
        return fn(*a, **kw)
    attempt = _Attempt.start(fn, a, kw)
    if not attempt.join(timeout):
        _keep_abandoned(key, attempt)
        raise StepTimeout(
            f"{_name(fn)} ran past its {timeout}s timeout: the call may have taken effect and "
            f"may still be running (its thread is abandoned, not killed), so it is in doubt",
            in_doubt=True,
        )
    return attempt.outcome()


def _outcome_of(earlier: _Attempt, fn: Callable[..., Any], key: str, timeout: float | None) -> Any:
    if earlier.join(timeout):
        return earlier.outcome()
    _keep_abandoned(key, earlier)
    ago = time.monotonic() - earlier.since
    raise StepTimeout(
        f"{_name(fn)}: the attempt abandoned at its timeout {ago:.1f}s ago still runs in this "
        f"process, so it is not called again while it may take effect; still in doubt",
        in_doubt=True,
    )


async def _keyed_async(
    fn: Callable[..., Any], key: str, timeout: float | None, *a: Any, **kw: Any
) -> Any:
    import asyncio  # imported here: most agents are not async, and it costs a process start

    task = asyncio.ensure_future(fn(*a, **kw))
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task  # it stops at its next await, or ends meanwhile
        if task.cancelled():
            raise StepTimeout(
                f"{_name(fn)} ran past its {timeout}s timeout and was cancelled: the call "
                f"may have taken effect before, so it is in doubt",
                in_doubt=True,
            )
    return task.result()  # it ended (at last): its outcome, as for a sync call


def _take_abandoned(key: str) -> _Attempt | None:
    with _ABANDONED_LOCK:
        return _ABANDONED.pop(key, None)


def _keep_abandoned(key: str, attempt: _Attempt) -> None:
    now = time.monotonic()
    with _ABANDONED_LOCK:
        for k, a in list(_ABANDONED.items()):
            if now - a.since > _FORGET_AFTER and not a.thread.is_alive():
                del _ABANDONED[k]
        _ABANDONED[key] = attempt
