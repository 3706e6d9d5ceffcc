"""Shared fixtures: a fresh SQLite app per test, in a temporary directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import tether


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "agent.db")


@pytest.fixture
def app(db_path: str) -> Iterator[tether.App]:
    a = tether.open(db_path)
    yield a
    a.close()
