"""A pydantic-ai agent run durably by tether, in child processes: the twin of
_openai_agents.py (same arguments, same turns, same ledger and model log), with
pydantic-ai's own FunctionModel (no network).

usage: python _pydantic_ai.py DB LEDGER_URL MODEL_LOG [--approval] [--stream] RUN_ID:CRASH...

With ``--stream`` the model streams its answers (FunctionModel's stream_function: the same
decisions, in deltas) to an event stream handler on TetherDurability, which appends the
kinds of the events it sees to MODEL_LOG.events.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.request
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from pydantic_ai import Agent, ApprovalRequired, DeferredToolRequests, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.usage import RequestUsage

import tether
from tether.integrations.pydantic_ai import TetherAgentRunner, TetherDurability

DB, LEDGER, MODEL_LOG = sys.argv[1:4]
APPROVAL = "--approval" in sys.argv
STREAM = "--stream" in sys.argv
RUNS = [arg.split(":") for arg in sys.argv[4:] if not arg.startswith("--")]  # RUN_ID:CRASH
RUN_ID, CRASH = "", "none"  # the run being executed


def crash(point: str) -> None:
    if point == CRASH:
        os.kill(os.getpid(), signal.SIGKILL)


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model: what it says depends only on the tool results it was shown."""
    done = [
        str(p.content)
        for m in messages
        for p in getattr(m, "parts", [])
        if isinstance(p, ToolReturnPart)
    ]
    turn = {0: 1, 1: 2}.get(len(done), 3)
    if turn == 2:
        crash("model")
    with open(MODEL_LOG, "a") as f:
        f.write(f"{RUN_ID} {turn}\n")
    usage = RequestUsage(input_tokens=10 * turn, output_tokens=turn)
    if turn == 1:
        parts: list[TextPart | ToolCallPart] = [
            ToolCallPart("charge", {"amount": 10}, tool_call_id="call-1")
        ]
    elif turn == 2:
        parts = [
            ToolCallPart("charge", {"amount": 20}, tool_call_id="call-2"),
            ToolCallPart("charge", {"amount": 5}, tool_call_id="call-3"),
        ]
    else:
        parts = [TextPart("done: " + "; ".join(done))]
    return ModelResponse(parts=parts, usage=usage)


async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
    """The model, streamed: the same response as :func:`respond`, a delta at a time."""
    response = respond(messages, info)
    for i, part in enumerate(response.parts):
        if isinstance(part, TextPart):
            for at in range(0, len(part.content), 8):
                yield part.content[at : at + 8]
        else:
            args = json.dumps(part.args)
            yield {i: DeltaToolCall(part.tool_name, args, tool_call_id=part.tool_call_id)}


async def seen(ctx: RunContext[None], events: AsyncIterable[Any]) -> None:
    async for event in events:
        with open(MODEL_LOG + ".events", "a") as f:
            f.write(f"{RUN_ID} {type(event).__name__}\n")


agent = Agent(
    FunctionModel(respond, stream_function=stream if STREAM else None),
    name="cashier",
    output_type=[str, DeferredToolRequests],
    capabilities=[
        TetherDurability(on_doubt="retry", event_stream_handler=seen if STREAM else None)
    ],
)


@agent.tool
def charge(ctx: RunContext[None], amount: int) -> str:
    """Charge an amount through the ledger service."""
    if APPROVAL and amount == 20 and not ctx.tool_call_approved:
        raise ApprovalRequired()  # a deferred tool call: a tether approval
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


with tether.open(DB) as app:
    runner = TetherAgentRunner(app)
    for RUN_ID, CRASH in RUNS:  # noqa: B007 (crash() reads CRASH) one after the other
        result = runner.run_sync(agent, "charge 10, then 20 and 5", run_id=RUN_ID)
        out = {"status": str(result.status), "output": result.output}
        print(json.dumps({"id": RUN_ID, **out, "waiting_for": result.waiting_for}), flush=True)
