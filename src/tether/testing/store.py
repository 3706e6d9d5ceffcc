"""``StoreSuite``: every backend-neutral test of the ``Store`` protocol, in one class."""

from __future__ import annotations

from tether.testing.log import LogSuite
from tether.testing.queue import QueueSuite
from tether.testing.runs import LeasesSuite, RunsSuite
from tether.testing.signals import SignalsAuditSuite
from tether.testing.writers import ConcurrencySuite, EncodeSuite, PostedSuite


class StoreSuite(
    LogSuite,
    RunsSuite,
    LeasesSuite,
    QueueSuite,
    SignalsAuditSuite,
    PostedSuite,
    ConcurrencySuite,
    EncodeSuite,
):
    """The whole store conformance suite: subclass it (as ``Test…``), define
    ``make_store()``, and pytest runs every test on your store.

    ::

        class TestMyStore(StoreSuite):
            def make_store(self) -> Store:
                return MyStore(self.location / "my.db")  # a fresh directory per test

    Each role's suite (``LogSuite``, ``RunsSuite``, ``LeasesSuite``, ``QueueSuite``,
    ``SignalsAuditSuite``, ``PostedSuite``, ``ConcurrencySuite``, ``EncodeSuite``) can be
    subclassed alone, e.g. while a backend is being written."""
