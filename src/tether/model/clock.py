"""The clock and id generation, injected so that tests never sleep.

``SystemClock`` is the default. ``FakeClock`` moves only when told to, which is
how lease expiry, retry backoff and timers are tested.
"""

from __future__ import annotations

import functools
import hashlib
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
    """This process's lease owner name: ``host:pid:pids:nonce``.

    ``pids`` names where ``pid`` means this process (see :func:`pid_space`): a hostname
    alone does not (containers on host networking share the host's name but each has
    its own pids, and machines may share a name).
    """
    return f"{os.uname().nodename}:{os.getpid()}:{pid_space() or '-'}:{secrets.token_hex(3)}"


@functools.cache
def pid_space() -> str:
    """Where this process's pids are valid: a digest of the kernel's boot id (this boot of
    this machine) and the inode of its pid namespace (this container), '' when they
    cannot be read (not Linux). Two processes that see the same pid space see the same
    processes under the same pids."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return ""
    return hashlib.blake2b(f"{boot}/{namespace}".encode(), digest_size=4).hexdigest()


def owner_is_dead_local(owner: str) -> bool:
    """True when ``owner`` (a :func:`process_owner` name, or a worker's ``worker:`` one)
    names a process of this machine and pid namespace that no longer exists.

    False whenever that cannot be known for sure: another host or pid namespace (the same
    hostname is not enough), an owner name of another form, a pid that is alive (or
    reused). The lease's expiry then decides.
    """
    try:
        host, pid_text, space, _ = owner.removeprefix("worker:").rsplit(":", 3)
        pid = int(pid_text)
    except ValueError:
        return False
    here = pid_space()
    if not here or space != here or host != os.uname().nodename or pid == os.getpid():
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
