"""An agent that charges through the ledger service, run in child processes.

usage: python _payments.py DB URL start|resume RUN_ID --crash POINT --doubt retry|ask
POINT: none | before_intent | after_intent | after_effect | after_completion. The
process kills itself with SIGKILL at that point, only in the first execution
(the file DB.crashed marks that it already did).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.request
from typing import Any

import tether

DB, URL = sys.argv[1], sys.argv[2]
CRASH = sys.argv[sys.argv.index("--crash") + 1]
DOUBT = sys.argv[sys.argv.index("--doubt") + 1]
MARK = DB + ".crashed"
app = tether.open(DB)


def crash_at(point: str) -> None:
    if point == CRASH and not os.path.exists(MARK):
        with open(MARK, "w") as f:
            f.write(point)
        os.kill(os.getpid(), signal.SIGKILL)


def post(amount: int, key: str) -> Any:
    req = urllib.request.Request(
        URL + "/charge",
        data=json.dumps({"amount": amount}).encode(),
        method="POST",
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


@app.tool(risk="write", on_doubt=DOUBT)
def charge(amount: int, *, idempotency_key: str) -> Any:
    assert tether.current_step().idempotency_key == idempotency_key
    crash_at("after_intent")
    result = post(amount, idempotency_key)
    crash_at("after_effect")
    return result


@app.agent
def pay(run: tether.Run, amount: int) -> Any:
    run.step("prepare", crash_at, "before_intent")
    receipt = run.tool(charge, amount)
    run.step("after", crash_at, "after_completion")
    return receipt


if __name__ == "__main__":
    handle = app.run(pay, 42) if sys.argv[3] == "start" else app.resume(sys.argv[4])
    print(
        json.dumps(
            {
                "id": handle.id,
                "status": handle.status,
                "output": handle.output,
                "waiting": handle.waiting,
            }
        )
    )
