"""Retry policies: how many attempts, how long between them, which errors, timeouts."""

from __future__ import annotations

import contextvars
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import inputs
from .errors import InvalidInput, StepTimeout

RetryOn = tuple[type[BaseException], ...] | Callable[[BaseException], bool]


@dataclass(frozen=True, slots=True)
class Retry:
    """A step's retry policy.

    ``max_attempts`` counts the first call (1 = no retry). The delay before
    attempt ``n+1`` is ``backoff * multiplier**(n-1)``, capped at ``max_delay``,
    spread by ``±jitter`` (a fraction). ``retry_on`` is a tuple of exception
    types or a predicate; other errors fail the step at once. ``timeout`` bounds
    one attempt in seconds (sync steps run in a helper thread that is abandoned,
    not killed, when it times out: keep such steps idempotent).
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
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as e:  # handed over to the caller's thread
            box["error"] = e

    ctx = contextvars.copy_context()  # tether.current_step() works inside the thread too
    t = threading.Thread(
        target=ctx.run,
        args=(target,),
        daemon=True,
        name=f"tether-step-{getattr(fn, '__name__', 'call')}",
    )
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise StepTimeout(f"{getattr(fn, '__qualname__', fn)!r} ran past its {timeout}s timeout")
    if "error" in box:
        raise box["error"]
    return box.get("value")
