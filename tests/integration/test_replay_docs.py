"""docs/testing.md's "Replay testing" section runs as written: its Python blocks in the
section's order, in one namespace, in a fresh directory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "testing.md"

pytestmark = pytest.mark.integration


def test_the_replay_section_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = PAGE.read_text()
    section = text[text.index("## Replay testing") : text.index("## The pytest plugin")]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 2
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    try:
        for body in blocks:
            exec(compile(body, str(PAGE), "exec"), namespace)  # the page's own code
    finally:
        app = namespace.get("app")
        if app is not None:
            app.close()  # type: ignore[attr-defined]
    assert (tmp_path / "replay-demo.db").exists()
