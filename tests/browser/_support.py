"""A support agent for the inspector's browser test: it looks a ticket up, decides, drafts
a reply, waits for a person to approve sending it, then sends it (a line in a side file).

The database is $TETHER_TEST_DB. ``python _support.py start T...`` queues one run per ticket
(run id ``ticket-T``) for the workers; ``python _support.py digest T`` queues ``digest-T``, a
run whose budget allows one model call of the two it makes.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import tether

DB = os.environ["TETHER_TEST_DB"]
app = tether.open(DB)


@app.tool(risk="write")
def send_reply(ticket: str, text: str, *, idempotency_key: str) -> dict[str, Any]:
    with open(DB + ".sent", "a") as f:
        f.write(f"{ticket} {idempotency_key}\n")
    return {"sent": True}


@app.agent
def support(run: tether.Run, ticket: str) -> dict[str, Any]:
    facts = run.step("lookup", lambda: {"ticket": ticket, "customer": "Ada Lovelace"})
    run.vars["tone"] = "warm"
    run.decide("route", choice="reply", why="a billing question the docs answer")
    draft = run.step("draft", lambda: f"Dear {facts['customer']}, a {run.vars['tone']} reply")
    run.approve("send_reply", payload={"to": "ada@example.com", "text": draft})
    run.tool(send_reply, ticket, draft)
    return {"sent": draft}


@app.agent(limits=tether.Limits(max_model_calls=1))
def digest(run: tether.Run, ticket: str) -> str:
    first = run.llm("summarize", lambda: {"text": f"ticket {ticket}", "usage": {"input_tokens": 9}})
    second = run.llm("polish", lambda: {"text": first["text"] + ", polished"})
    return str(second["text"])


if __name__ == "__main__":
    agent, prefix = (digest, "digest") if sys.argv[1] == "digest" else (support, "ticket")
    for ticket in sys.argv[2:]:
        print(app.start(agent, ticket, run_id=f"{prefix}-{ticket}"))
