"""docs/metrics.md runs as written, in a fresh directory: its first Python block is
``shop.py``, the others run in order in one namespace, and every ``$ …`` line of its
console blocks runs (in the page's order, between them) as a real command whose output
starts with the lines the page shows under it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _docs import console_commands

pytest.importorskip("prometheus_client", reason="the metrics extra: pip install 'tether[metrics]'")

PAGE = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"

pytestmark = pytest.mark.integration


def test_the_metrics_page_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```(python|console)\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert [k for k, _ in blocks] == ["python"] * 4 + ["console"] * 4
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "shop.py").write_text(blocks[0][1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["TETHER_DB"] = "agent.db"
    namespace: dict[str, object] = {}
    ran = 0
    sys.modules.pop("shop", None)  # the page's module, not another test's of that name
    try:
        for kind, body in blocks[1:]:
            if kind == "python":
                exec(compile(body, str(PAGE), "exec"), namespace)  # the page's own code
                continue
            for command, shown in console_commands(body):
                out = subprocess.run(
                    ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=60
                )
                assert out.returncode == 0, f"{command}: {out.stdout}{out.stderr}"
                assert out.stdout.splitlines()[: len(shown)] == shown, command
                ran += 1
    finally:
        sys.modules.pop("shop", None)
        app = namespace.get("app")
        if app is not None:
            app.close()  # type: ignore[attr-defined]
    assert ran == 4


def test_metrics_are_not_imported_unless_asked_for() -> None:
    code = (
        "import sys, tether, tether.cli.main, tether.services.worker, tether.server; "
        "assert 'prometheus_client' not in sys.modules, 'imported'"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
