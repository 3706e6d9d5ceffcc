"""The engine's one metrics hook: ``OBSERVER`` is None (metrics off) or an :class:`Observer`.

The journal and the worker test ``observe.OBSERVER is not None`` where a step finishes, a
step fails and is retried, a lease is lost and an execution ends: with metrics off that
test is the whole cost. :mod:`tether.services.metrics` installs an observer that feeds
Prometheus counters and histograms; nothing here imports a metrics library.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Observer(Protocol):
    """What the engine reports, as it happens, in the process executing runs."""

    def step(self, kind: str, agent: str, seconds: float, usage: Mapping[str, Any] | None) -> None:
        """A step's call returned after ``seconds``; a model call's ``usage`` (tokens,
        cost) when its result reports one."""

    def retry(self, kind: str, agent: str) -> None:
        """A step's attempt failed and another is scheduled."""

    def lease_lost(self) -> None:
        """An append was refused: another worker holds the run now (fenced out)."""

    def execution(self, agent: str, outcome: str, seconds: float) -> None:
        """A worker's execution of a run ended: ``outcome`` is completed, waiting, failed,
        blocked, lost, interrupted, paused or error."""


OBSERVER: Observer | None = None


def install(observer: Observer | None) -> Observer | None:
    """Make ``observer`` the process's (None: metrics off); return the one it replaces."""
    global OBSERVER
    before, OBSERVER = OBSERVER, observer
    return before
