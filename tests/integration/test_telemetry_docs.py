"""docs/telemetry.md runs as written: its Python blocks in order in one namespace, each
``text`` block after one that prints being exactly what it printed."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

PAGE = Path(__file__).resolve().parents[2] / "docs" / "telemetry.md"

pytestmark = pytest.mark.integration


def test_the_telemetry_page_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = re.findall(r"```(python|text)\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert [k for k, _ in blocks].count("python") >= 6
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "docs_telemetry"}
    printed, checked = "", 0
    for index, (kind, body) in enumerate(blocks):
        if kind == "python":
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(body, f"docs/telemetry.md block {index}", "exec"), namespace)
            printed = out.getvalue()
            continue
        assert printed == body, f"block {index}: the page shows {body!r}, it printed {printed!r}"
        checked += 1
    assert checked == 3
