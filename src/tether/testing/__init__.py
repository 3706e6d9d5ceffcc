"""Test kits for code built on tether: replay testing (:func:`replay`: an agent's
current code against a recorded run, see docs/testing.md), and the store conformance
suite.

The tests tether runs on its own SQLite and PostgreSQL stores, shipped as base classes,
so that another backend can prove it keeps the same contract::

    from tether.testing import StoreSuite

    class TestMyStore(StoreSuite):
        def make_store(self):
            return MyStore(self.location / "my.db")

This package imports pytest (``pip install pytest``); tether itself never imports it.
See docs/testing.md ("Prove your own backend").
"""

from __future__ import annotations

import pytest

# The suites' plain ``assert`` statements get pytest's detailed failure messages only if
# pytest rewrites their modules, which it does for test files and for what is named here
# before it is imported.
pytest.register_assert_rewrite(
    *(f"tether.testing.{name}" for name in ("base", "log", "queue", "runs", "signals", "writers"))
)

from tether.engine.dry import ReplayReport, StepRef  # noqa: E402
from tether.testing.base import (  # noqa: E402  (after the rewrite is registered)
    T0,
    StoreTest,
    claimed,
    enqueue,
    ev,
    new_run,
    race,
    seqs,
    until,
)
from tether.testing.log import LogSuite  # noqa: E402
from tether.testing.queue import QueueSuite  # noqa: E402
from tether.testing.replay import replay  # noqa: E402
from tether.testing.runs import LeasesSuite, RunsSuite  # noqa: E402
from tether.testing.signals import SignalsAuditSuite  # noqa: E402
from tether.testing.store import StoreSuite  # noqa: E402
from tether.testing.writers import ConcurrencySuite, EncodeSuite, PostedSuite  # noqa: E402

__all__ = [
    "T0",
    "ConcurrencySuite",
    "EncodeSuite",
    "LeasesSuite",
    "LogSuite",
    "PostedSuite",
    "QueueSuite",
    "ReplayReport",
    "RunsSuite",
    "SignalsAuditSuite",
    "StepRef",
    "StoreSuite",
    "StoreTest",
    "claimed",
    "enqueue",
    "ev",
    "new_run",
    "race",
    "replay",
    "seqs",
    "until",
]
