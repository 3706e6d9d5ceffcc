"""pydantic-ai on tether: durable runs, exactly-once tools, approvals, a message store.

Built on pydantic-ai's public durable-execution surface (``pydantic_ai.durable_exec``),
as its Temporal, DBOS and Prefect back ends are: :class:`TetherDurability` is a
durability capability whose operation back end journals each durable unit in the
current tether run:

- a model request is a ``run.llm`` step (its response and usage recorded, in
  pydantic-ai's own JSON form);
- a function tool call is a ``run.tool`` named after the tool, its arguments the
  model's ``tool_call_id`` and the tool's arguments, so its idempotency key
  (``tether.current_step().idempotency_key`` in the tool) derives from the run and the
  ``tool_call_id``;
- any other unit (discovery, capability operations) is a ``run.step``.

``TetherAgentRunner(app).run(agent, prompt, run_id=...)`` runs the agent (which lists
``TetherDurability()`` in its ``capabilities``) as a tether run; calling it again with the
same ``run_id`` resumes it. Deferred tools that need approval (``requires_approval``,
with ``DeferredToolRequests`` among the agent's output types) become tether approvals
named ``<tool>:<tool_call_id>``: the run waits without a process until ``tether
approve|deny``, then the agent goes on with the decisions. Outside a tether run the
capability is transparent.

:class:`TetherMessageHistory` keeps a conversation's ``ModelMessage`` list in a tether
session.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.integrations import execute, missing, outside_loop

try:
    from pydantic import BaseModel
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolDenied
    from pydantic_ai.agent import EventStreamHandler
    from pydantic_ai.durable_exec import (
        JSON_CODEC,
        BaseDurabilityCapability,
        DurableOperationBackend,
        DurableOperationId,
        JournalCallableOperationBackend,
        ModelRequestId,
        RoleBasedOperationConfig,
        ToolsetCallToolId,
    )
    from pydantic_ai.durable_exec._spec import DurabilityEngineSpec
    from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
except ModuleNotFoundError as e:  # the extra is not installed
    raise missing("pydantic-ai", e) from e

from tether.app import App
from tether.engine.registry import tool as declare_tool
from tether.engine.runtime import AsyncRun
from tether.errors import ApprovalDenied, InvalidState
from tether.model.clock import new_run_id
from tether.model.status import RunStatus

__all__ = [
    "AGENT_NAME",
    "QUEUE",
    "AgentNotBound",
    "TetherAgentRunner",
    "TetherDurability",
    "TetherMessageHistory",
    "TetherRunResult",
]

AGENT_NAME = "pydantic-ai"  # the tether agent every pydantic-ai run is a run of
QUEUE = "pydantic-ai"  # the queue the runs are created in (executed inline, not by workers)

_RUN: contextvars.ContextVar[AsyncRun | None] = contextvars.ContextVar(
    "tether_pydantic_ai_run", default=None
)


_RUNS: contextvars.ContextVar[list[int]] = contextvars.ContextVar("tether_pydantic_ai_runs")
# the body of the tool call a declared tool executes (set around each run.tool)
_BODY: contextvars.ContextVar[Callable[[], Awaitable[object]]] = contextvars.ContextVar(
    "tether_pydantic_ai_tool_body"
)
_DECLARED = 256  # the tools a capability keeps declared


class TetherDurability(BaseDurabilityCapability[Any]):
    """The durability capability: ``Agent(..., capabilities=[TetherDurability()])``.

    ``risk``: a tether risk per tool name (``read``; ``write``, the default;
    ``irreversible``). ``on_doubt``: what a write tool's call cut by a crash does on
    resume: ``"retry"`` (call again with the same key, for tools that pass
    ``tether.current_step().idempotency_key`` on) or ``"ask"`` (the default: the run
    waits for ``tether resolve``).
    """

    engine_spec = DurabilityEngineSpec(
        engine_name="tether",
        durable_unit_noun="step",
        durable_unit_plural="steps",
        durable_container_noun="run",
        codec=JSON_CODEC,  # tether journals JSON
        wrapped_toolset_kinds=frozenset({"function"}),
        toolset_lifecycles={"function": "enter-always"},
        unsupported_runtime_toolset_kinds=frozenset({"mcp", "dynamic"}),
        journal_discovery=False,
        # replay is by position: one tool call at a time, so positions follow the calls
        sequential_tools_in_durable_context=True,
    )

    def __init__(
        self,
        *,
        risk: dict[str, str] | None = None,
        on_doubt: str | None = None,
        name: str | None = None,
        event_stream_handler: EventStreamHandler[Any] | None = None,
    ) -> None:
        super().__init__(name=name, event_stream_handler=event_stream_handler)
        self.risk = dict(risk or {})
        self.on_doubt = on_doubt
        # (tool name, risk, on_doubt) -> its tether tool (see _Backend._declared)
        self._declared: dict[tuple[str, str, str | None], Callable[..., Any]] = {}

    @property
    def in_durable_context(self) -> bool:
        return _RUN.get() is not None

    def get_default_run_id(self) -> str | None:
        run = _RUN.get()
        if run is None:
            return None
        runs = _RUNS.get()  # agent.run calls of this tether run so far: the same on replay
        runs.append(len(runs) + 1)
        return f"{run.id}:{len(runs)}"

    def get_durable_operation_backend(self) -> DurableOperationBackend[Any]:
        config = RoleBasedOperationConfig[Any](model=None, event=None, capability=None, tool=None)
        return _Backend(self, agent_name=self.name, config=config)


class _Backend(JournalCallableOperationBackend[Any]):
    """Each durable unit, a journaled call of the current tether run."""

    def __init__(self, owner: TetherDurability, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.owner = owner

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: Any,
    ) -> object:
        run = _RUN.get()
        if run is None:  # outside a tether run: transparent
            return await body()
        if isinstance(operation_id, ModelRequestId):
            return await run.llm(self._agent(name), body)
        if isinstance(operation_id, ToolsetCallToolId):
            return await self._tool(run, cache_key, body)
        return await run.step(name, body)

    def _agent(self, name: str) -> str:
        return name.split("__", 1)[0] or name

    async def _tool(
        self, run: AsyncRun, key: tuple[object, ...], body: Callable[[], Awaitable[object]]
    ) -> object:
        # pydantic-ai's cache identity of a tool call: (tool name, arguments, RunContext)
        if len(key) < 3 or not isinstance(key[0], str):
            raise InvalidState(
                f"run {run.id}: this pydantic-ai version identifies a tool call as {key!r}, "
                f"not (name, arguments, context); tether cannot key it by its tool_call_id"
            )
        tool_name, args, ctx = key[0], key[1], key[2]
        token = _BODY.set(body)
        try:
            declared = self._declared(tool_name)
            return await run.tool(declared, getattr(ctx, "tool_call_id", None), _jsonable(args))
        finally:
            _BODY.reset(token)

    def _declared(self, tool_name: str) -> Callable[..., Any]:
        """The tether tool of ``tool_name``'s calls (declared once: it validates itself), as
        its risk and on_doubt are now; each call executes the body it was given (``_BODY``)."""
        owner = self.owner
        risk, on_doubt = owner.risk.get(tool_name, "write"), owner.on_doubt
        declared = owner._declared.get((tool_name, risk, on_doubt))
        if declared is None:

            async def call(tool_call_id: str | None, arguments: Any) -> object:
                return await _BODY.get()()

            call.__qualname__ = call.__name__ = tool_name
            declared = declare_tool(risk=risk, on_doubt=on_doubt, name=tool_name)(call)
            if len(owner._declared) >= _DECLARED:
                owner._declared.clear()
            owner._declared[(tool_name, risk, on_doubt)] = declared
        return declared


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value


@dataclass(frozen=True, slots=True)
class TetherRunResult:
    """What :meth:`TetherAgentRunner.run` returns: the run's id and status, and once it
    completed, the agent's output (as JSON) and every message of the run (as pydantic-ai's
    JSON form: ``ModelMessagesTypeAdapter.validate_python`` rebuilds them).
    ``waiting_for`` names what a waiting run waits for (``approval:<tool>:<call_id>``)."""

    run_id: str
    status: str
    output: Any = None
    messages: list[Any] | None = None
    waiting_for: str | None = None


class AgentNotBound(BaseException):
    """A process resumed a pydantic-ai run whose Agent it does not have (``tether
    resume``, a worker): the run pauses, unchanged, until ``TetherAgentRunner(app).run(
    agent, prompt, run_id=...)`` resumes it with the agent."""


_BOUND: dict[str, tuple[Agent[Any, Any], Any]] = {}
_LOCK = threading.Lock()


class TetherAgentRunner:
    """Runs pydantic-ai agents durably on ``app`` (see the module's docstring). The agent
    lists :class:`TetherDurability` among its capabilities."""

    def __init__(self, app: App) -> None:
        self.app = app
        if AGENT_NAME not in app.agents():
            app.agent(name=AGENT_NAME)(_run_agent)

    async def run(
        self,
        agent: Agent[Any, Any],
        prompt: str,
        *,
        run_id: str | None = None,
        deps: Any = None,
        message_history: Sequence[ModelMessage] | None = None,
    ) -> TetherRunResult:
        """Run ``agent`` on ``prompt`` as the tether run ``run_id`` (a new id when None), or
        resume that run: recorded model requests and tool calls are reused. Returns when
        the run completes or waits (an approval); raises RunFailed when it fails."""
        history = ModelMessagesTypeAdapter.dump_python(list(message_history or []), mode="json")
        name = agent.name or "agent"
        rid = new_run_id() if run_id is None else run_id  # "" is refused (execute)
        with _LOCK:
            _BOUND[rid] = (agent, deps)
        try:
            handle = await execute(self.app, AGENT_NAME, (name, prompt, history), rid, QUEUE)
        except InvalidState:  # waiting, and still undecided
            if self.app.get(rid).status != RunStatus.WAITING:
                raise
            return self.result(rid)
        finally:
            with _LOCK:
                _BOUND.pop(rid, None)
        return _result(rid, handle.status, handle.output, handle.waiting)

    def run_sync(
        self, agent: Agent[Any, Any], prompt: str, *, run_id: str | None = None, deps: Any = None
    ) -> TetherRunResult:
        """:meth:`run` outside an event loop (in one of its own)."""
        outside_loop("TetherAgentRunner")
        return asyncio.run(self.run(agent, prompt, run_id=run_id, deps=deps))

    def result(self, run_id: str) -> TetherRunResult:
        """The run's result as it stands (NotFound for an unknown run)."""
        state = self.app.get(run_id)
        return _result(run_id, state.status, state.output, state.waiting)


def _result(
    run_id: str, status: str, output: Any, waiting: Mapping[str, Any] | None
) -> TetherRunResult:
    out = output if isinstance(output, dict) else {}
    wait = None if waiting is None else f"{waiting.get('kind')}:{waiting.get('name')}"
    return TetherRunResult(run_id, status, out.get("output"), out.get("messages"), wait)


async def _run_agent(run: AsyncRun, agent: str, prompt: str, history: list[Any]) -> dict[str, Any]:
    """The tether agent of every pydantic-ai run: ``agent.run`` with the durability
    capability journaling into this run, then one more ``agent.run`` per round of
    approvals, with the decisions."""
    with _LOCK:
        bound = _BOUND.get(run.id)
    if bound is None:
        raise AgentNotBound(
            f"run {run.id} runs the pydantic-ai agent {agent!r}, which this process does not "
            f"have: resume it with TetherAgentRunner(app).run(agent, prompt, run_id={run.id!r})"
        )
    pyd_agent, deps = bound
    token, runs = _RUN.set(run), _RUNS.set([])
    try:
        messages = ModelMessagesTypeAdapter.validate_python(history)
        result = await pyd_agent.run(prompt, deps=deps, message_history=messages or None)
        while isinstance(result.output, DeferredToolRequests) and result.output.approvals:
            decisions = await _decide(run, result.output)
            result = await pyd_agent.run(
                deps=deps, message_history=result.all_messages(), deferred_tool_results=decisions
            )
    finally:
        _RUNS.reset(runs)
        _RUN.reset(token)
    output = _jsonable(result.output)
    every = ModelMessagesTypeAdapter.dump_python(result.all_messages(), mode="json")
    return {"output": output, "messages": every}


async def _decide(run: AsyncRun, requests: DeferredToolRequests) -> DeferredToolResults:
    """One tether approval per call that needs one; the run waits until all are decided."""
    results = DeferredToolResults()
    for call in requests.approvals:
        gate = f"{call.tool_name}:{call.tool_call_id}"
        payload = {"tool": call.tool_name, "call_id": call.tool_call_id, "args": call.args}
        try:
            await run.approve(gate, payload)
            results.approvals[call.tool_call_id] = True
        except ApprovalDenied as denied:
            results.approvals[call.tool_call_id] = ToolDenied(f"not approved ({denied})")
    return results


class TetherMessageHistory:
    """A conversation's pydantic-ai messages kept in the tether session ``session_id``:
    ``history.load()`` gives the ``message_history`` of the next ``agent.run``, and
    ``history.save(result.new_messages())`` appends what it added (one session message
    per ``ModelMessage``; sessions are append-only, so the history stays auditable)."""

    def __init__(self, app: App, session_id: str, *, owner: str | None = None) -> None:
        self.session = app.session(session_id, owner=owner)

    def load(self) -> list[ModelMessage]:
        """Every message saved so far, oldest first."""
        saved = [m.content for m in self.session.messages() if m.meta.get("op") == "pydantic-ai"]
        return ModelMessagesTypeAdapter.validate_python(saved)

    def save(self, messages: Sequence[ModelMessage]) -> None:
        """Append ``messages`` (a run's ``new_messages()``)."""
        for data in ModelMessagesTypeAdapter.dump_python(list(messages), mode="json"):
            role = "user" if data.get("kind") == "request" else "assistant"
            self.session.add(role, data, op="pydantic-ai")
