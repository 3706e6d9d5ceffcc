"""The clock and id generation, injected so that tests never sleep.

``SystemClock`` is the default. ``FakeClock`` moves only when told to, which is
how lease expiry, retry backoff and timers are tested.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Wall time for records and due times, and a way to wait."""

    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds`` (a fake clock advances instead)."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """A clock that only moves when advanced (``sleep`` advances it at once)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()
        self.slept: list[float] = []

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(max(0.0, seconds))


def new_run_id(now: float | None = None) -> str:
    """A time-ordered run id: 12 hex digits of milliseconds, then 12 random ones."""
    ms = int((time.time() if now is None else now) * 1000)
    return f"{ms:012x}{secrets.token_hex(6)}"


def process_owner() -> str:
    """This process's lease owner name: ``host:pid:nonce``."""
    return f"{os.uname().nodename}:{os.getpid()}:{secrets.token_hex(3)}"


def owner_is_dead_local(owner: str) -> bool:
    """True when ``owner`` names a process on this host that no longer exists."""
    try:
        host, pid_text, _ = owner.rsplit(":", 2)
        pid = int(pid_text)
    except ValueError:
        return False
    if host != os.uname().nodename or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False
