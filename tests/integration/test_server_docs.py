"""docs/server.md runs as written: its Python block (mounting the API) runs, and every
``$ curl`` line of its "Authenticate" block runs against a real ``tether serve`` with a
real approver token: each answers 2xx (``curl -f``), and the decision it sends is
recorded under the token's name."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import tether

pytest.importorskip("uvicorn", reason="the server extra: pip install 'tether[server]'")

import httpx

PAGE = Path(__file__).resolve().parents[2] / "docs" / "server.md"

pytestmark = pytest.mark.integration


def _blocks() -> list[tuple[str, str]]:
    return re.findall(r"```(python|console)\n(.*?)```", PAGE.read_text(), flags=re.S)


def test_the_mount_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    [python] = [body for kind, body in _blocks() if kind == "python"]
    namespace: dict[str, Any] = {}
    exec(compile(python, str(PAGE), "exec"), namespace)
    namespace["app"].close()


def test_the_start_commands_parse() -> None:
    start = _blocks()[0][1]
    assert "$ tether --db agent.db serve --port 8700" in start
    help_ = subprocess.run(
        [sys.executable, "-m", "tether.cli", "serve", "--help"], capture_output=True, text=True
    )
    assert help_.returncode == 0 and "--port" in help_.stdout


def test_the_curl_lines_run_against_tether_serve(tmp_path: Path) -> None:
    db = str(tmp_path / "agent.db")
    app = tether.open(db)

    @app.agent(name="refund")
    def refund(run: tether.Run, order: str) -> Any:
        return run.approve("send", payload={"order": order})

    run = app.run(refund, "O-1").id
    _, token = app.tokens.create("alice", "approver")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "tether.cli", "--db", db, "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_until_up(server, base)
        curls = [
            line[2:]
            for kind, body in _blocks()
            if kind == "console"
            for line in body.splitlines()
            if line.startswith("$ curl")
        ]
        assert len(curls) == 4
        env = {**os.environ, "TOKEN": token, "TETHER": base, "RUN": run}
        for command in curls:
            out = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True)
            assert out.returncode == 0, f"{command}: {out.stdout}{out.stderr}"
    finally:
        server.terminate()
        server.communicate(timeout=30)
    step = next(s for s in app.get(run).steps if s.kind == "approve")
    assert step.output == {"approved": True, "by": "alice", "reason": "checked the order"}
    app.close()


def _wait_until_up(proc: subprocess.Popen[str], base: str) -> None:
    """Poll until the server answers (a readiness check, not an ordering sleep)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            httpx.get(f"{base}/openapi.json", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError("tether serve did not answer within 30 s")
