"""Waiting for a condition that another thread or process brings about."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(condition: Callable[[], object], seconds: float = 10.0, every: float = 0.01) -> bool:
    """Whether ``condition()`` became true within ``seconds`` (polled every ``every``)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return False
