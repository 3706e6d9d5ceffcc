"""Worker processes of the kill tests (test_chaos, test_children_crash): one killed at
random and replaced, and all of them stopped at the end."""

from __future__ import annotations

import random
import signal
import subprocess
from collections.abc import Callable
from typing import Any


def kill_one(
    workers: list[subprocess.Popen[Any]],
    rng: random.Random,
    start: Callable[[], subprocess.Popen[Any]],
) -> None:
    """SIGKILL a worker chosen by ``rng``, reap it, and start another in its place."""
    victim = rng.randrange(len(workers))
    workers[victim].send_signal(signal.SIGKILL)
    workers[victim].wait()
    workers[victim] = start()


def stop_all(workers: list[subprocess.Popen[Any]], timeout: float = 20) -> None:
    """SIGTERM every worker, then wait for each (SIGKILL one that outlives ``timeout``)."""
    for w in workers:
        w.send_signal(signal.SIGTERM)
    for w in workers:
        try:
            w.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            w.kill()
