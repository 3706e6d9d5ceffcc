"""A payout agent whose tools have contracts, driven by the CLI in separate processes.

The database is $TETHER_TEST_DB; every call that reaches a tool adds a line to the file
$TETHER_TEST_CALLS, so a test counts the calls that were made. $TETHER_TEST_MAX is the
``max-amount`` rule's limit (default 500): a process may run with another rule than the
one that judged a call. usage: python _contracts.py start PROPOSAL_JSON (enqueue the run
with the model's proposal, then work it until it waits or ends, as a worker).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import tether

DB = os.environ["TETHER_TEST_DB"]
CALLS = os.environ["TETHER_TEST_CALLS"]
MAX = int(os.environ.get("TETHER_TEST_MAX", "500"))

policy = tether.Policy(
    rules=[
        tether.Rule(
            lambda to: to.endswith("@example.com"),
            name="to-domain",
            tool="send_email",
            arg="to",
            on_breach="escalate",
            description="to ends with @example.com",
            version="2",
        )
    ]
)
app = tether.open(DB, policy=policy)


def _called(line: str) -> None:
    with open(CALLS, "a") as f:
        f.write(line + "\n")


max_amount = tether.Rule(
    lambda amount: amount <= MAX, name="max-amount", arg="amount", description=f"amount <= {MAX}"
)


@app.tool(risk="write", contract=[max_amount])
def pay(to: str, amount: int, *, idempotency_key: str) -> dict[str, Any]:
    _called(f"pay {to} {amount}")
    return {"paid": amount, "to": to}


@app.tool(risk="write")
def send_email(to: str, body: str, *, idempotency_key: str) -> dict[str, Any]:
    _called(f"send_email {to}")
    return {"sent": to}


@app.agent
def payout(run: tether.Run, proposal: dict[str, Any]) -> Any:
    plan = run.llm("plan", lambda: proposal)  # what the model proposed, journaled
    receipt = run.tool(pay, **plan["pay"])
    mail = run.tool(send_email, **plan["email"])
    return {"receipt": receipt, "mail": mail}


if __name__ == "__main__":
    run_id = app.start(payout, json.loads(sys.argv[2]))
    app.worker(concurrency=1).run(until_idle=True)
    state = app.get(run_id)
    print(json.dumps({"id": run_id, "status": state.status, "waiting": state.waiting}))
