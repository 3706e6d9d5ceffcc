"""Tracing is off unless configured, and costs no import: ``import tether`` (and opening a
store, running an agent) never imports OpenTelemetry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys, tether
app = tether.open(sys.argv[1])
@app.agent
def one(run):
    return run.step("s", lambda: 1)
assert app.run(one).output == 1
app.close()
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
print(loaded)
"""


def test_tether_runs_without_importing_opentelemetry(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "t.db")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == "[]"


def test_without_opentelemetry_tracing_says_what_to_install(tmp_path: Path) -> None:
    script = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "import tether\n"
        "try:\n"
        "    tether.open(sys.argv[1], tracing=True)\n"
        "except tether.InvalidInput as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "t.db")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "pip install 'tether[otel]'" in out.stdout
