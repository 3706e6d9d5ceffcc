"""A tool this App did not register is found where its call recorded its code (its
module and name), for the call's compensation: only in a module the operator allowed
(``code=[...]``), never because the log names it (tether.engine.registry)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from _conformance import Backend

import tether

MODULE = """
import tether

UNDONE = []


def refund(result, order, *, idempotency_key):
    UNDONE.append((result, order))


@tether.tool(risk="write", compensate=refund)
def charge(order):
    return f"charged {order}"


@tether.agent
def shop(run, order):
    run.tool(charge, order)
    run.wait("go")
    return "done"
"""


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[ModuleType]:
    """A module of a tool and an agent, importable as ``tether_shop_tools``."""
    (tmp_path / "tether_shop_tools.py").write_text(MODULE)
    sys.path.insert(0, str(tmp_path))
    try:
        import tether_shop_tools

        yield tether_shop_tools
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("tether_shop_tools", None)


def test_a_compensation_finds_its_tool_by_the_recorded_code_only_where_allowed(
    backend: Backend, shop: ModuleType
) -> None:
    with tether.open(backend.url) as app:
        rid = app.run(shop.shop, "o-1").id
        intent = next(e for e in app.events(rid) if e.type == "tool.intent").payload()
    assert intent["code"]["module"] == "tether_shop_tools"
    assert intent["code"]["qualname"] == "charge"
    assert intent["code"]["file"] == str(Path(shop.__file__).resolve())
    del sys.modules["tether_shop_tools"]  # as in another process: not imported there
    with tether.open(backend.url) as bare:
        with pytest.raises(tether.TetherError, match="--code"):
            bare.cancel(rid, compensate=True, by="ops")  # the log's say-so imports nothing
        assert bare.get(rid).status == "waiting" and "tether_shop_tools" not in sys.modules
    with tether.open(backend.url, code=["tether_shop_tools"]) as allowed:
        allowed.cancel(rid, compensate=True, by="ops")  # imports the module, allowed
        assert allowed.get(rid).status == "cancelled"
    assert shop.UNDONE == []  # the first import's; the undo ran in the module imported again
    assert sys.modules["tether_shop_tools"].UNDONE == [("charged o-1", "o-1")]
