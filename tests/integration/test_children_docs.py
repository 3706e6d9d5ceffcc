"""docs/children.md's Handoffs example runs as written, in an empty directory, and the
`tether show` lines it prints are the ones the page shows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tether.cli.main import main

PAGE = Path(__file__).resolve().parents[2] / "docs" / "children.md"

pytestmark = pytest.mark.integration


def _section() -> str:
    text = PAGE.read_text()
    return text.split("## Handoffs", 1)[1].split("\n## ", 1)[0]


def test_the_handoffs_example_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (body,) = re.findall(r"```python\n(.*?)```", _section(), flags=re.S)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "docs_children"}
    exec(compile(body, "docs/children.md handoffs", "exec"), namespace)
    giver, target = str(namespace["giver"]), str(namespace["target"])
    (shown,) = re.findall(r"```\n(handoff .*?)```", _section(), flags=re.S)
    page_id = re.search(r"to (\S+)~3", shown)
    assert page_id is not None
    expected = shown.replace(page_id.group(1), giver).splitlines()
    assert main(["--db", "handoffs.db", "show", giver]) == 0
    assert expected[0] in capsys.readouterr().out.splitlines()
    assert main(["--db", "handoffs.db", "show", target]) == 0
    assert expected[1] in capsys.readouterr().out.splitlines()
