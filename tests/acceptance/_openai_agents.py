"""An OpenAI Agents SDK agent run durably by tether, in child processes.

usage: python _openai_agents.py DB LEDGER_URL MODEL_LOG [--approval] RUN_ID:CRASH...

A three-turn agent (the SDK's own ScriptedModel, no network): the model charges 10,
then charges 20 and 5 at once (two tool calls of one response), then answers with the
tools' results. Every tool call posts to the key-aware ledger service with tether's
idempotency key; every model call that answers appends its turn to MODEL_LOG (what
was paid for). CRASH: ``none``, ``tool`` (SIGKILL inside the charge of 20, after the
service took it) or ``model`` (SIGKILL inside the second model call). ``--approval``:
a charge of 20 needs an approval (``needs_approval``). Runs (or resumes) the runs
one after the other, printing each one's result as a JSON line.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.request
from typing import Any

from agents import Agent, RunConfig, function_tool
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage

import tether
from tether.integrations.openai_agents import TetherRunner

DB, LEDGER, MODEL_LOG = sys.argv[1:4]
APPROVAL = "--approval" in sys.argv
RUNS = [arg.split(":") for arg in sys.argv[4:] if arg != "--approval"]  # RUN_ID:CRASH
RUN_ID, CRASH = "", "none"  # the run being executed


def crash(point: str) -> None:
    if point == CRASH:
        os.kill(os.getpid(), signal.SIGKILL)


def large(ctx: Any, params: dict[str, Any], call_id: str) -> bool:
    return APPROVAL and params["amount"] == 20


@function_tool(needs_approval=large)
def charge(amount: int) -> str:
    """Charge an amount through the ledger service."""
    key = tether.current_step().idempotency_key
    req = urllib.request.Request(
        LEDGER + "/charge",
        data=json.dumps({"amount": amount}).encode(),
        method="POST",
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        json.loads(resp.read())
    if amount == 20:
        crash("tool")
    return f"charged {amount}"


def outputs(call: ModelCall) -> list[str]:
    items = call.input if isinstance(call.input, list) else []
    return [
        str(i["output"])
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    ]


def respond(call: ModelCall) -> ModelStep:
    """The model: what it says depends only on the tool results it was shown."""
    done = outputs(call)
    turn = {0: 1, 1: 2}.get(len(done), 3)
    if turn == 2:
        crash("model")
    with open(MODEL_LOG, "a") as f:
        f.write(f"{RUN_ID} {turn}\n")
    usage = Usage(requests=1, input_tokens=10 * turn, output_tokens=turn, total_tokens=11 * turn)
    if turn == 1:
        out = [function_call("charge", {"amount": 10}, call_id="call-1")]
    elif turn == 2:
        out = [
            function_call("charge", {"amount": 20}, call_id="call-2"),
            function_call("charge", {"amount": 5}, call_id="call-3"),
        ]
    else:
        out = [assistant_message("done: " + "; ".join(done))]
    return ModelStep(output=out, usage=usage)


model = ScriptedModel([ModelStep.respond(respond) for _ in range(50)])
agent = Agent(name="cashier", instructions="Charge.", model=model, tools=[charge])

with tether.open(DB) as app:
    runner = TetherRunner(app, on_doubt="retry")
    for RUN_ID, CRASH in RUNS:  # noqa: B007 (crash() reads CRASH) one after the other
        result = runner.run_sync(
            agent,
            "charge 10, then 20 and 5",
            run_id=RUN_ID,
            run_config=RunConfig(tracing_disabled=True),
        )
        out = {"status": str(result.status), "output": result.final_output}
        print(json.dumps({"id": RUN_ID, **out, "waiting_for": result.waiting_for}), flush=True)
