"""The store: everything tether keeps, behind small role protocols.

Each method is one transaction, takes and returns frozen dataclasses (never raw
rows: :mod:`tether.store.records`), and translates database errors into
:mod:`tether.errors`. The roles (:mod:`tether.store.protocols`: RunLog, Leases,
Queue, Inbox, Workers, Audit, Credentials, Blobs, Maintenance) make up :class:`Store`; the
runtime, worker, CLI and server see only these protocols. ``tether.open(url)``
picks the backend (:mod:`tether.store.sqlite` for a path or ``sqlite:///…``,
:mod:`tether.store.postgres` for ``postgresql://…``), both built on the shared
SQL plumbing of :mod:`tether.store.sqlbase`.
"""

from __future__ import annotations

from tether.store.protocols import (
    Audit,
    Blobs,
    Credentials,
    Inbox,
    Leases,
    Maintenance,
    Queue,
    RunLog,
    Store,
    Workers,
)
from tether.store.records import (
    TOUCH_AFTER,
    AuditRecord,
    Effect,
    EffectWrite,
    Gauges,
    Lease,
    Loaded,
    NewRun,
    NewToken,
    QueueLimits,
    RunCount,
    RunFilter,
    RunRecord,
    Serving,
    Signal,
    SignalTake,
    Snapshot,
    TokenRecord,
    Transition,
    UsageTotal,
    WorkerRecord,
    pick_within_limits,
)

__all__ = [
    "TOUCH_AFTER",
    "Audit",
    "AuditRecord",
    "Blobs",
    "Credentials",
    "Effect",
    "EffectWrite",
    "Gauges",
    "Inbox",
    "Lease",
    "Leases",
    "Loaded",
    "Maintenance",
    "NewRun",
    "NewToken",
    "Queue",
    "QueueLimits",
    "RunCount",
    "RunFilter",
    "RunLog",
    "RunRecord",
    "Serving",
    "Signal",
    "SignalTake",
    "Snapshot",
    "Store",
    "TokenRecord",
    "Transition",
    "UsageTotal",
    "WorkerRecord",
    "Workers",
    "pick_within_limits",
]
