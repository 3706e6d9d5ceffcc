"""``tether serve`` as a real process on both backends: a token made by ``tether token
create`` approves a waiting run over HTTP, the run continues under that name, and
SIGTERM stops the server even while a live stream is open."""

from __future__ import annotations

import os
import re
import signal
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

pytestmark = pytest.mark.acceptance
TETHER = [sys.executable, "-m", "tether.cli"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_until_up(proc: subprocess.Popen[str], base: str) -> None:
    """Poll until the server answers (a readiness check, not an ordering sleep)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"tether serve exited: {proc.communicate()}"
        try:
            httpx.get(f"{base}/openapi.json", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError("tether serve did not answer within 30 s")


def test_tether_serve_approves_over_http_and_stops_on_sigterm(url: str, tmp_path: Path) -> None:
    app = tether.open(url)

    @app.agent(name="refund")
    def refund(run: tether.Run, order: str) -> Any:
        facts = run.step("lookup", lambda: {"order": order})
        decision = run.approve("send", payload=facts, approvers=["bob"])
        return {"sent": order, "by": decision["by"]}

    run = app.run(refund, "O-9").id
    made = subprocess.run(
        [*TETHER, "--db", url, "token", "create", "bob", "--role", "approver"],
        capture_output=True,
        text=True,
        check=True,
    )
    token = re.search(r"tether_[0-9a-f]{16}_[A-Za-z0-9_-]{43}", made.stdout)
    assert token is not None, made.stdout
    headers = {"Authorization": f"Bearer {token.group(0)}"}
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [*TETHER, "--db", url, "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        _wait_until_up(proc, base)
        assert httpx.get(f"{base}/api/runs").status_code == 401
        inbox = httpx.get(f"{base}/api/approvals", headers=headers).json()["items"]
        assert [(i["run_id"], i["payload"]) for i in inbox] == [(run, {"order": "O-9"})]
        answer = httpx.post(
            f"{base}/api/runs/{run}/approvals/send",
            headers=headers,
            json={"decision": "approve", "reason": "looks right"},
        )
        assert answer.status_code == 200, answer.text
        with httpx.stream("GET", f"{base}/api/runs/{run}/live", headers=headers) as live:
            assert live.status_code == 200
            next(live.iter_lines())  # the stream is open and has sent its first line
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)  # a live stream does not hold it up
        assert proc.returncode == 0, err
        assert f"http://127.0.0.1:{port}/" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    handle = app.resume(run)
    assert handle.status == "completed"
    assert app.get(run).output == {"sent": "O-9", "by": "bob"}  # the token's name
    app.close()
