"""A child process of test_boards_processes.py.

``incr URL N START``: wait until time START, then increment board "counter" key "n" N
times with compare-and-set, re-reading on each VersionConflict; print how many conflicts.
``crash URL``: run an agent whose board write kills this process (SIGKILL) right after
the board's commit, before the run's log records the step.
``resume URL RUN_ID``: resume that run; print its output.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

import tether


def increment(url: str, n: int, start: float) -> None:
    app = tether.open(url)
    board = app.board("counter", by=f"pid {os.getpid()}")
    board.get("n")  # connected before the start
    time.sleep(max(0.0, start - time.time()))
    conflicts = 0
    for _ in range(n):
        while True:
            value, version = board.get("n")
            try:
                board.set("n", (value or 0) + 1, expected_version=version)
                break
            except tether.VersionConflict:
                conflicts += 1
    print(conflicts)
    app.close()


def agents(app: tether.App) -> Any:
    @app.agent
    def claim(run: tether.Run) -> list[Any]:
        board = run.board("incident")
        version = board.set("owner", run.id, expected_version=0)
        after = run.step("after", lambda: "went on")
        return [version, after, board.get("owner").value]

    return claim


def crash(url: str) -> None:
    app = tether.open(url)
    claim = agents(app)
    write = app.store.write_board

    def write_then_die(w: Any) -> Any:
        outcome = write(w)  # committed
        if w.run_id is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return outcome

    app.store.write_board = write_then_die  # type: ignore[method-assign]
    app.run(claim)


def resume(url: str, run_id: str) -> None:
    app = tether.open(url)
    agents(app)
    print(app.resume(run_id).output)
    app.close()


if __name__ == "__main__":
    mode, url = sys.argv[1], sys.argv[2]
    if mode == "incr":
        increment(url, int(sys.argv[3]), float(sys.argv[4]))
    elif mode == "crash":
        crash(url)
    else:
        resume(url, sys.argv[3])
