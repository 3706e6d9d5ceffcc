"""Pin a worker process to one CPU (``tether worker --cpu auto``).

A worker's runs are threads of one Python process, and only the thread holding the
GIL runs Python. On a machine with several cores those threads pass the GIL back and
forth across cores at every database call (each call releases it), and every pass
wakes a thread on another core: a busy worker then spends more CPU on the hand-offs
than on its runs (bench/README.md, "Pinned workers", has the measurements). Pinned,
the process still overlaps its runs' waits (model calls, tools) — which is what its
threads are for — and uses the other cores through more worker processes, one per
core: ``--cpu auto`` gives each worker of this user on this host the allowed CPU that
the fewest of them use.

Not the default: an agent that computes in C code that releases the GIL (local
inference, numpy) across threads of its worker would lose that parallelism.
Linux only (``os.sched_setaffinity``).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

AUTO = "auto"


def allowed() -> list[int]:
    """The CPUs this process may run on, in order."""
    if not hasattr(os, "sched_getaffinity"):
        raise OSError("pinning a worker to a CPU needs Linux (os.sched_setaffinity)")
    return sorted(os.sched_getaffinity(0))


def check(cpu: int | str | None) -> int | str | None:
    """``cpu`` as a worker takes it (None, a CPU number or "auto"), or ValueError."""
    if cpu is None or cpu == AUTO:
        return cpu
    if isinstance(cpu, str) and cpu.isdigit():
        cpu = int(cpu)
    if isinstance(cpu, bool) or not isinstance(cpu, int) or cpu < 0:
        raise ValueError(f"cpu must be a CPU number (0, 1, …) or 'auto', not {cpu!r}")
    return cpu


def pin(cpu: int | str, *, registry: Path | None = None) -> int:
    """Pin every thread of this process to one CPU: ``cpu``, or for ``"auto"`` the
    allowed CPU fewest other auto-pinned workers of this user use. Returns the CPU."""
    cpus = allowed()
    if cpu == AUTO:
        chosen = _choose(cpus, registry or _registry())
    else:
        chosen = int(cpu)
        if chosen not in cpus:
            raise ValueError(
                f"cpu {chosen} is not one this process may run on (allowed: "
                f"{', '.join(map(str, cpus))}); pick one of them, or 'auto'"
            )
    for tid in os.listdir("/proc/self/task"):  # every thread: affinity is per thread
        with contextlib.suppress(ProcessLookupError):  # a thread that just ended
            os.sched_setaffinity(int(tid), {chosen})
    return chosen


def unpin(*, registry: Path | None = None) -> None:
    """Forget this process in the registry of auto-pinned workers (at worker exit)."""
    with _locked(registry or _registry()) as entries:
        entries.pop(str(os.getpid()), None)


def _registry() -> Path:
    """Which CPU each live auto-pinned worker of this user took, on this host."""
    return Path(tempfile.gettempdir()) / f"tether-worker-cpus-{os.getuid()}.json"


def _choose(cpus: list[int], registry: Path) -> int:
    with _locked(registry) as entries:
        for pid in [p for p in entries if not _alive(int(p))]:
            del entries[pid]
        used = {c: 0 for c in cpus}
        for c in entries.values():
            if c in used:
                used[c] += 1
        chosen = min(cpus, key=lambda c: (used[c], c))
        entries[str(os.getpid())] = chosen
    return chosen


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[dict[str, int]]:
    """The registry's entries (pid -> cpu), read and written back under a file lock, so
    that workers starting together pick different CPUs."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        with os.fdopen(os.dup(fd), "r+", encoding="utf-8") as f:
            text = f.read()
            try:
                entries = json.loads(text) if text.strip() else {}
            except ValueError:  # a torn or foreign file: start over (it is only a hint)
                entries = {}
            if not isinstance(entries, dict):
                entries = {}
            yield entries
            f.seek(0)
            f.truncate()
            f.write(json.dumps(entries))
    finally:
        os.close(fd)  # releases the lock


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True
