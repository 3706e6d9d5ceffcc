"""A parent that starts child runs and joins them, for real processes killed with SIGKILL.

$TETHER_TEST_DB is the database URL; $TETHER_TEST_DIR a directory for the side ledgers:
- ledger.txt: one line per step body entered, "RUN started:NAME TOKEN", and finished,
  "RUN NAME TOKEN" (appended, O_APPEND);
- killed: created when the parent killed itself once (``--kill-after I``).

``main(["run", N, KILL_AFTER?])`` runs a parent of N children inline (printing
``WAITING RUN``); ``main(["resume", RUN])`` resumes it (``DONE RUN OUTPUT`` or
``WAITING RUN``).
"""

from __future__ import annotations

import os
import secrets
import signal
import time

import tether

DIR = os.environ["TETHER_TEST_DIR"]
app = tether.open(os.environ["TETHER_TEST_DB"], lease_ttl=2.0)


def _append(line: str) -> None:
    fd = os.open(os.path.join(DIR, "ledger.txt"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def work(run_id: str, name: str) -> str:
    token = secrets.token_hex(4)
    _append(f"{run_id} started:{name} {token}")
    time.sleep(0.2)  # long enough for kills to land mid-step
    _append(f"{run_id} {name} {token}")
    return token


@app.agent
def kid(run: tether.Run, i: int) -> int:
    for name in ("work", "more", "last"):
        run.step(name, work, run.id, name)
    return i * i


@app.agent
def parent(run: tether.Run, n: int, kill_after: int | None = None) -> int:
    kids = []
    for i in range(n):
        kids.append(run.child(kid, i))
        marker = os.path.join(DIR, "killed")
        if i == kill_after and not os.path.exists(marker):
            # the child is enqueued, the record of its start is not committed yet
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
    total = sum(run.join(kids))
    run.step("total", work, run.id, "total")
    return total


def main(argv: list[str]) -> None:
    """Imported, not run as ``__main__``: the runs record this module as their code."""
    if argv[0] == "run":
        kill = int(argv[2]) if len(argv) > 2 else None
        handle = app.run(parent, int(argv[1]), kill)
    else:
        handle = app.resume(argv[1])
    if handle.status == "completed":
        print(f"DONE {handle.id} {handle.output}")
    else:
        print(f"{handle.status.upper()} {handle.id}")
