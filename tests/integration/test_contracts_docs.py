"""docs/contracts.md runs as written (in a fresh directory: ``agent.db``): a call within
its contract completes, one whose rule escalates waits for its approval, and one whose
rule refuses fails the run before its tool is called."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "contracts.md"

pytestmark = pytest.mark.integration


def test_the_contracts_page_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert len(blocks) == 1
    monkeypatch.chdir(tmp_path)
    ns: dict[str, object] = {}
    exec(compile(blocks[0], str(PAGE), "exec"), ns)  # the page's own code
    app = ns["app"]
    try:
        assert ns["done"].status == "completed"  # type: ignore[attr-defined]
        asked = ns["asked"]
        assert asked.status == "waiting"  # type: ignore[attr-defined]
        assert asked.waiting["name"] == "approve:send_email"  # type: ignore[attr-defined]
        refused = str(ns["refused"])
        assert "rule 'max-amount' judging amount=900 was breached" in refused
        assert "The tool was not called" in refused
        runs = app.runs()  # type: ignore[attr-defined]
        paid = [s for r in runs for s in app.get(r.id).steps if s.name == "pay"]  # type: ignore[attr-defined]
        assert [s.status for s in paid].count("completed") == 2  # the refused one never ran
    finally:
        app.close()  # type: ignore[attr-defined]
