"""What the engine and the services are given instead of the App: the store, the clock,
this process's lease holder id and the lease ttl, as one frozen value."""

from __future__ import annotations

from dataclasses import dataclass

from tether.model.clock import Clock
from tether.store import Store


@dataclass(frozen=True, slots=True)
class Deps:
    """The shared dependencies of an App's engine and services.

    ``owner`` is this process's lease holder id (``host:pid:…``, see
    :func:`tether.model.clock.process_owner`); ``lease_ttl`` the seconds a lease lasts
    without a heartbeat."""

    store: Store
    clock: Clock
    owner: str
    lease_ttl: float = 30.0
