"""Shared fixtures: a fresh SQLite app per test, in a temporary directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import tether

# Property tests assert properties, never speed: hypothesis's per-example deadline and its
# "input generation is slow" check are wall-clock limits that a loaded machine (a CPU hog,
# coverage, other suites) trips without any fault in tether. Timing is bench/'s business.
settings.register_profile("tether", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tether")


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "agent.db")


@pytest.fixture
def app(db_path: str) -> Iterator[tether.App]:
    a = tether.open(db_path)
    yield a
    a.close()
