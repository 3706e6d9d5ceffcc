"""docs/memory.md and docs/artifacts.md run as written: each page's Python blocks in order,
in one namespace, in an empty directory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"

pytestmark = pytest.mark.integration


def _python_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), flags=re.S)


@pytest.mark.parametrize(("page", "at_least"), [("memory.md", 8), ("artifacts.md", 6)])
def test_the_page_runs_as_written(
    page: str, at_least: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = _python_blocks(page)
    assert len(blocks) >= at_least
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page[:-3]}"}
    for index, body in enumerate(blocks):
        exec(compile(body, f"docs/{page} block {index}", "exec"), namespace)
    assert (tmp_path / "agent.db").exists()
