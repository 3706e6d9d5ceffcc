"""The shipped store conformance suite (tether.testing.StoreSuite) on both backends.

``store_location`` is the ``backend`` fixture of conftest.py: a fresh SQLite file, or a
fresh PostgreSQL schema dropped after the test (a failure, not a skip, when PostgreSQL
cannot be reached). The store-level tests of the other test_store_*.py files live in the
suite, so that another backend can run them too (docs/testing.md).
"""

from __future__ import annotations

import pytest
from _conformance import Backend

from tether.store import Store
from tether.testing import StoreSuite

pytestmark = pytest.mark.conformance


class TestStore(StoreSuite):
    """Every test of the suite, on SQLite and on PostgreSQL."""

    location: Backend

    @pytest.fixture
    def store_location(self, backend: Backend) -> Backend:
        return backend

    def make_store(self) -> Store:
        return self.location.open()
