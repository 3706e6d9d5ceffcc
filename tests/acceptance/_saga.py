"""A booking saga: three write tools with compensations, then a failure.

usage: python _saga.py DB start|resume [RUN_ID]. The undo of "car" kills the process
once (after recording its effect) so that the compensation itself is interrupted.
Effects go to DB.effects as "do:NAME KEY" / "undo:NAME KEY" lines; both the bookings
and their undos dedup by idempotency key, like a real key-aware API.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import tether

DB = sys.argv[1]
LOG = DB + ".effects"
app = tether.open(DB)


def _effect(line: str, key: str) -> None:
    seen = []
    if os.path.exists(LOG):
        with open(LOG) as f:
            seen = f.read().split("\n")
    if any(entry.endswith(" " + key) for entry in seen):
        return  # this key already took effect
    with open(LOG, "a") as f:
        f.write(f"{line} {key}\n")
        f.flush()
        os.fsync(f.fileno())


def undo(result: Any, name: str, *, idempotency_key: str) -> None:
    _effect(f"undo:{name}", idempotency_key)
    if name == "car" and not os.path.exists(DB + ".killed"):
        open(DB + ".killed", "w").close()
        os.kill(os.getpid(), signal.SIGKILL)


@app.tool(risk="write", compensate=undo)
def book(name: str, *, idempotency_key: str) -> dict[str, str]:
    _effect(f"do:{name}", idempotency_key)
    return {"booked": name}


@app.agent
def trip(run: tether.Run) -> None:
    for name in ("flight", "hotel", "car"):
        run.tool(book, name)
    run.step("pay", lambda: 1 / 0)


if __name__ == "__main__":
    try:
        if sys.argv[2] == "start":
            app.run(trip)
        else:
            app.resume(sys.argv[3])
    except tether.RunFailed as e:
        print(json.dumps({"id": e.run_id, "error": e.error}))
