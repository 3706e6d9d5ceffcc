"""The chaos workload: runs of 10 steps with one write tool, executed by worker processes.

$TETHER_TEST_DB is the database URL; $TETHER_TEST_DIR a directory for the side ledgers:
- started.txt: one line per step body entered: "RUN POS";
- ledger.txt: one line per step body finished: "RUN POS TOKEN" (appended, O_APPEND);
- effects/: one file per idempotency key, created with O_EXCL by the key-aware "API";
- calls.txt: one line per call of the write tool: "RUN KEY".
"""

from __future__ import annotations

import os
import secrets
import time

import tether

DIR = os.environ["TETHER_TEST_DIR"]
app = tether.open(os.environ["TETHER_TEST_DB"], lease_ttl=2.0)


def _append(name: str, line: str) -> None:
    fd = os.open(os.path.join(DIR, name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def work(run_id: str, pos: int) -> str:
    token = secrets.token_hex(4)
    _append("started.txt", f"{run_id} {pos}")
    time.sleep(0.03)  # long enough for kills to land mid-step
    _append("ledger.txt", f"{run_id} {pos} {token}")
    return token


@app.tool(risk="write")
def charge(run_id: str, *, idempotency_key: str) -> str:
    _append("calls.txt", f"{run_id} {idempotency_key}")
    try:
        fd = os.open(
            os.path.join(DIR, "effects", idempotency_key.replace(":", "_")),
            os.O_WRONLY | os.O_CREAT | os.O_EXCL,
            0o644,
        )
        os.close(fd)
    except FileExistsError:
        pass  # the API saw this key already: it does not charge twice
    return "charged"


@app.agent
def chaos(run: tether.Run, n: int) -> int:
    tokens = []
    for pos in range(1, 11):
        tokens.append(run.step(f"s{pos}", work, run.id, pos))
        if pos == 5:
            run.tool(charge, run.id)
    return len(tokens)
