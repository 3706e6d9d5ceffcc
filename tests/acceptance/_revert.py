"""Three bookings, each with a compensation, for `tether revert` from other processes.

Imported by the CLI (``--app _revert.py:app``, with TETHER_URL naming the database), or
run as ``python _revert.py`` (a completed ``trip``) or ``python _revert.py gated`` (a
run waiting for approval), which prints the run's id. Every booking and every undo
appends a line to $REVERT_LOG: ``do NAME KEY``, and ``undo NAME KEY`` for an undo that
took effect, plus ``call NAME KEY`` for every call of an undo (so calls and effects can
both be counted). Undos dedup by key, like a key-aware API. While $REVERT_HOLD exists, an
undo that took effect writes $REVERT_HOLD.reached and waits (the test kills the process
there: after the undo's intent and its effect, before its end).
"""

from __future__ import annotations

import os
import time
from typing import Any

import tether

LOG = os.environ["REVERT_LOG"]
HOLD = os.environ.get("REVERT_HOLD", "")
app = tether.open(os.environ["TETHER_URL"])


def _lines() -> list[str]:
    if not os.path.exists(LOG):
        return []
    with open(LOG) as f:
        return f.read().splitlines()


def _write(line: str) -> None:
    with open(LOG, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def unbook(result: Any, name: str, *, idempotency_key: str) -> str:
    _write(f"call {name} {idempotency_key}")
    if f"undo {name} {idempotency_key}" not in _lines():  # this key took effect already
        _write(f"undo {name} {idempotency_key}")
    if HOLD and os.path.exists(HOLD):
        open(HOLD + ".reached", "w").close()
        while os.path.exists(HOLD):  # killed here by the test
            time.sleep(0.02)
    return f"unbooked {name}"


@app.tool(risk="write", compensate=unbook)
def book(name: str, *, idempotency_key: str) -> dict[str, str]:
    _write(f"do {name} {idempotency_key}")
    return {"booked": name}


@app.tool(risk="write")
def mail(to: str) -> str:
    _write(f"do mail {to}")
    return to


@app.agent
def trip(run: tether.Run) -> list[str]:
    booked = [run.tool(book, n)["booked"] for n in ("flight", "hotel", "car")]
    run.tool(mail, "me")
    run.step("total", lambda: len(booked))
    return booked


@app.agent
def gated(run: tether.Run) -> str:
    run.tool(book, "flight")
    run.approve("go")
    return "gone"


if __name__ == "__main__":
    import sys

    print(app.run(gated if sys.argv[1:] == ["gated"] else trip).id)
