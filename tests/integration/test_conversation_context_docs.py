"""docs/conversation.md and docs/context.md run as written: each page's Python blocks in
order, in one namespace, in a fresh directory (their asserts are the checks)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"

pytestmark = pytest.mark.integration


def _blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), flags=re.S)


@pytest.mark.parametrize("page", ["conversation.md", "context.md"])
def test_the_page_runs_as_written(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = _blocks(page)
    assert len(blocks) >= 6
    namespace: dict[str, object] = {"__name__": f"docs_{page.split('.')[0]}"}
    for index, body in enumerate(blocks):
        exec(compile(body, f"docs/{page} block {index}", "exec"), namespace)
    printed = capsys.readouterr().out
    if page == "conversation.md":
        assert "belongs to owner 'u-7', not 'u-8'" in printed
    else:
        assert "[paged out: search_logs(query='error 0'), 2.6 KB, recall with id m:3]" in printed
