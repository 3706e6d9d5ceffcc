"""A refund agent gated by a human approval, driven by the CLI in separate processes.

The database is $TETHER_TEST_DB; the side file $TETHER_TEST_DB.refunds gets one line per
refund actually sent. usage: python _approvals.py start [TIMEOUT]
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import tether

DB = os.environ["TETHER_TEST_DB"]
app = tether.open(DB, approver_groups={"ops": ["alice", "bob"]})


@app.tool(risk="irreversible")
def send_refund(order: str, amount: int, *, idempotency_key: str) -> dict[str, Any]:
    with open(DB + ".refunds", "a") as f:
        f.write(f"{order} {amount} {idempotency_key}\n")
    return {"refunded": amount}


@app.agent
def refund(run: tether.Run, order: str, amount: int, timeout: str | None = None) -> Any:
    facts = run.step("lookup", lambda: {"order": order, "amount": amount})
    try:
        decision = run.approve("send_refund", payload=facts, approvers=["ops"], timeout=timeout)
    except tether.ApprovalDenied as denied:
        return {"refunded": 0, "denied_by": denied.by, "timed_out": denied.timed_out}
    receipt = run.tool(send_refund, order, amount)
    return {**receipt, "approved_by": decision["by"]}


if __name__ == "__main__":
    timeout = sys.argv[2] if len(sys.argv) > 2 else None
    handle = app.run(refund, "O-7", 30, timeout)
    print(json.dumps({"id": handle.id, "status": handle.status, "waiting": handle.waiting}))
