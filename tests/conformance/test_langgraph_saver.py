"""LangGraph's own conformance suite (langgraph-checkpoint-conformance) on TetherSaver, on
SQLite and on PostgreSQL: every base and every extended capability must pass."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from _conformance import Backend
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import (
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
)

import tether
from tether.integrations.langgraph import TetherSaver


def _suite_size() -> int:
    """How many tests the installed suite holds (its ``ALL_*_TESTS`` lists)."""
    import importlib
    import pkgutil

    from langgraph.checkpoint.conformance import spec

    total = 0
    for info in pkgutil.iter_modules(spec.__path__):
        module = importlib.import_module(f"{spec.__name__}.{info.name}")
        total += sum(len(v) for k, v in vars(module).items() if k.startswith("ALL_"))
    return total


def test_conformance_every_capability(backend: Backend) -> None:
    app = tether.open(backend.url)

    @checkpointer_test(name=f"TetherSaver[{backend.name}]")
    async def saver() -> AsyncIterator[TetherSaver]:
        yield TetherSaver(app)

    try:
        report = asyncio.run(validate(saver))
    finally:
        app.close()
    results = report.results
    failures = {cap: r.failures for cap, r in results.items() if not r.passed}
    assert not failures, failures
    wanted = {c.value for c in BASE_CAPABILITIES | EXTENDED_CAPABILITIES}
    assert {cap for cap, r in results.items() if r.passed} == wanted
    passed = sum(r.tests_passed for r in results.values())
    assert sum(r.tests_skipped for r in results.values()) == 0
    assert passed == _suite_size(), passed  # 81 in langgraph-checkpoint-conformance 0.0.2
    print(f"TetherSaver[{backend.name}]: {passed} conformance tests passed")
