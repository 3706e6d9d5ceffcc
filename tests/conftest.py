"""Shared fixtures: a fresh SQLite app per test, in a temporary directory."""

from __future__ import annotations

import signal
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

# A suite started in the background of a non-interactive shell (`pytest &` in a script, a CI
# step run that way) inherits SIGINT ignored, and so would every process it starts: the tests
# that stop a CLI with Ctrl-C (`log --follow`, `runs --watch`) would wait for an exit that
# never comes. A handled signal is reset to its default in a child, an ignored one is not.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "agent.db")


@pytest.fixture
def app(db_path: str) -> Iterator[tether.App]:
    a = tether.open(db_path)
    yield a
    a.close()
