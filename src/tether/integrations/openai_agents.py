"""The OpenAI Agents SDK on tether: durable runs, exactly-once tools, approvals, sessions.

``TetherRunner(app).run(agent, input, run_id=...)`` runs an SDK agent as a tether run
(an ``async def`` agent named ``openai-agents``). The agent is not rewritten; its
copy for the run has:

- its model wrapped (:class:`TetherModel`): every ``get_response`` is a ``run.llm``
  step named after the agent, whose recorded output (the model's items) and usage are
  returned on replay without calling the model again;
- every function tool wrapped: each call is a ``run.tool`` named after the tool, its
  arguments the model's ``call_id`` and JSON arguments, so its idempotency key
  (``tether.current_step().idempotency_key`` inside the tool) derives from the run and
  the ``call_id``; a completed call is never repeated;
- a tool whose ``needs_approval`` holds asks first: ``run.approve("<tool>:<call_id>")``,
  and the run waits without a process until ``tether approve|deny`` (a denial is told
  to the model, as the SDK does);
- its handoffs wrapped the same way.

Calling ``run`` again with the same ``run_id`` (after a crash, from any process)
resumes: the SDK's loop runs again from the top, and every model response and tool
result already recorded is replayed in place. The SDK ``Agent`` object is not stored:
the process that resumes passes it again. Streaming is refused
(:meth:`TetherModel.stream_response`), never silently undurable.

:class:`TetherSession` is the SDK's ``Session`` protocol on a tether session.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import operator
import threading
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from tether.integrations import execute, missing, outside_loop

try:
    from agents import (
        Agent,
        FunctionTool,
        Handoff,
        Model,
        ModelResponse,
        ModelSettings,
        ModelTracing,
        RunConfig,
        RunContextWrapper,
        Runner,
        Tool,
        TResponseInputItem,
        Usage,
    )
    from agents.agent_output import AgentOutputSchemaBase
    from agents.items import TResponseOutputItem
    from agents.memory import SessionSettings
    from agents.run_config import ToolExecutionConfig
    from agents.tool_context import ToolContext
    from openai.types.responses.response_prompt_param import ResponsePromptParam
    from pydantic import BaseModel, TypeAdapter
except ModuleNotFoundError as e:  # the extra is not installed
    raise missing("openai-agents", e) from e

from tether.app import App
from tether.context.compaction import Summarizer
from tether.engine.registry import tool as declare_tool
from tether.engine.runtime import AsyncRun
from tether.errors import ApprovalDenied, InvalidState
from tether.model.clock import new_run_id
from tether.model.status import RunStatus

__all__ = [
    "AGENT_NAME",
    "QUEUE",
    "REMOVED",
    "AgentNotBound",
    "AgentRunResult",
    "TetherModel",
    "TetherRunner",
    "TetherSession",
]

AGENT_NAME = "openai-agents"  # the tether agent every SDK run is a run of
QUEUE = "openai-agents"  # the queue the runs are created in (executed inline, not by workers)

_ITEM = TypeAdapter[TResponseOutputItem](TResponseOutputItem)
_USAGE = TypeAdapter(Usage)


@dataclass(frozen=True, slots=True)
class AgentRunResult:
    """What :meth:`TetherRunner.run` returns: the run's id and status, and once it
    completed, the final output (a structured output as its JSON form) and the name of
    the agent that produced it. ``waiting_for`` names what a waiting run waits for
    (``approval:<tool>:<call_id>``)."""

    run_id: str
    status: str
    final_output: Any = None
    last_agent: str | None = None
    waiting_for: str | None = None


@dataclass(frozen=True, slots=True)
class _Binding:
    """What a run of this process executes: the SDK objects tether cannot store."""

    agent: Agent[Any]
    context: Any
    run_config: RunConfig
    copies: _Durable


@dataclass(frozen=True, slots=True)
class _Turn:
    """The run the durable copies journal into, and the SDK's contexts of its tool calls."""

    run: AsyncRun
    contexts: dict[str, ToolContext[Any]]


_BOUND: dict[str, _Binding] = {}
_LOCK = threading.Lock()
# the run executing in this context (_run_agent sets it): the copies outlive runs
_ACTIVE: contextvars.ContextVar[_Turn] = contextvars.ContextVar("tether_openai_agents_turn")
_KEPT = 64  # the agents whose durable copies a runner keeps


class TetherRunner:
    """Runs OpenAI Agents SDK agents durably on ``app`` (see the module's docstring).

    ``risk``: a tether risk per tool name (``read``, ``write``: the default, or
    ``irreversible``). ``on_doubt``: what a write tool's call interrupted by a crash
    does on resume: ``"retry"`` (call it again with the same idempotency key: say so
    when your tools pass ``tether.current_step().idempotency_key`` on to a service that
    dedups by it) or ``"ask"`` (the run waits for ``tether resolve``; the default,
    since tether cannot know that a tool dedups). ``approvers``: who may decide the
    approvals of ``needs_approval`` tools (None: anyone).
    """

    def __init__(
        self,
        app: App,
        *,
        risk: Mapping[str, str] | None = None,
        on_doubt: str | None = None,
        approvers: list[str] | None = None,
    ) -> None:
        self.app = app
        self.risk, self.on_doubt, self.approvers = dict(risk or {}), on_doubt, approvers
        self._copies: dict[int, _Durable] = {}  # by id(agent): see _durable
        if AGENT_NAME not in app.agents():
            app.agent(name=AGENT_NAME)(_run_agent)

    async def run(
        self,
        agent: Agent[Any],
        input: str | list[TResponseInputItem],
        *,
        run_id: str | None = None,
        context: Any = None,
        max_turns: int = 10,
        run_config: RunConfig | None = None,
    ) -> AgentRunResult:
        """Run ``agent`` on ``input`` as the tether run ``run_id`` (a new id when None),
        or resume that run when it exists: recorded model calls and tool calls are
        reused. Returns when the run completes or waits (an approval); raises
        RunFailed when it fails. ``input`` must be JSON (a str, or input items as dicts).
        """
        rid = new_run_id() if run_id is None else run_id  # "" is refused (execute)
        config = run_config or RunConfig()
        binding = _Binding(agent, context, config, self._durable(agent, config))
        with _LOCK:
            _BOUND[rid] = binding
        try:
            args = (agent.name, _input_json(input), max_turns)
            handle = await execute(self.app, AGENT_NAME, args, rid, QUEUE)
        except InvalidState:  # waiting, and still undecided
            if self.app.get(rid).status != RunStatus.WAITING:
                raise
            return self.result(rid)
        finally:
            with _LOCK:
                _BOUND.pop(rid, None)
        return _result(rid, handle.status, handle.output, handle.waiting)

    def _durable(self, agent: Agent[Any], config: RunConfig) -> _Durable:
        """The durable copies of ``agent``'s graph: those of an earlier run while nothing
        they were made from changed (the agents, their tools and handoffs, the config's
        model, this runner's settings), else new ones. Making them costs more than a
        turn of the SDK with an instant model (its agents and tools validate themselves)."""
        copies = self._copies.get(id(agent))
        if copies is None or not copies.current(agent, config, self):
            if len(self._copies) >= _KEPT:
                self._copies.clear()
            copies = _Durable(config, self)
            copies.agent(agent)
            self._copies[id(agent)] = copies
        return copies

    def run_sync(
        self,
        agent: Agent[Any],
        input: str | list[TResponseInputItem],
        *,
        run_id: str | None = None,
        context: Any = None,
        max_turns: int = 10,
        run_config: RunConfig | None = None,
    ) -> AgentRunResult:
        """:meth:`run` outside an event loop (in one of its own)."""
        outside_loop("TetherRunner")
        kw: dict[str, Any] = {"run_id": run_id, "context": context, "max_turns": max_turns}
        return asyncio.run(self.run(agent, input, run_config=run_config, **kw))

    def result(self, run_id: str) -> AgentRunResult:
        """The run's result as it stands (NotFound for an unknown run)."""
        state = self.app.get(run_id)
        return _result(run_id, state.status, state.output, state.waiting)


def _result(
    run_id: str, status: str, output: Any, waiting: Mapping[str, Any] | None
) -> AgentRunResult:
    out = output if isinstance(output, dict) else {}
    wait = None if waiting is None else f"{waiting.get('kind')}:{waiting.get('name')}"
    return AgentRunResult(run_id, status, out.get("final_output"), out.get("last_agent"), wait)


class AgentNotBound(BaseException):
    """A process resumed a run of an SDK agent it does not have (``tether resume``, a
    worker): the run pauses, unchanged (a BaseException: not the agent's failure), until
    ``TetherRunner(app).run(agent, input, run_id=...)`` resumes it with the agent."""


def _input_json(value: Any) -> Any:
    if isinstance(value, str):
        return value
    return [v.model_dump(mode="json") if isinstance(v, BaseModel) else v for v in value]


async def _run_agent(run: AsyncRun, agent: str, input: Any, max_turns: int) -> dict[str, Any]:
    """The tether agent of every SDK run: the SDK's own loop, on a durable copy of the
    agent bound to this run by :meth:`TetherRunner.run`."""
    with _LOCK:
        binding = _BOUND.get(run.id)
    if binding is None:
        raise AgentNotBound(
            f"run {run.id} runs the OpenAI Agents SDK agent {agent!r}, which this process "
            f"does not have: resume it with TetherRunner(app).run(agent, input, "
            f"run_id={run.id!r}) rather than `tether resume` or a worker"
        )
    copies = binding.copies
    durable = copies.agent(binding.agent)
    config = replace(binding.run_config, model=None)
    if copies.gated:
        # An approval and its tool call are two positions taken by one tool task: run the
        # calls of a response one at a time, so no sibling takes a position in between.
        execution = config.tool_execution or ToolExecutionConfig()
        one = replace(execution, max_function_tool_concurrency=1)
        config = replace(config, tool_execution=one)
    token = _ACTIVE.set(_Turn(run, {}))
    try:
        result = await Runner.run(
            durable, input, context=binding.context, max_turns=max_turns, run_config=config
        )
    finally:
        _ACTIVE.reset(token)
    final = result.final_output
    if isinstance(final, BaseModel):
        final = final.model_dump(mode="json")
    return {"final_output": final, "last_agent": result.last_agent.name}


class _Durable:
    """The durable copies of a graph of agents: their models, tools and handoffs, which
    journal into the run executing in the current context (``_ACTIVE``)."""

    def __init__(self, config: RunConfig, runner: TetherRunner) -> None:
        self.config = config
        self.settings = (dict(runner.risk), runner.on_doubt, runner.approvers)
        # id(original) -> (original, what it was made from, its copy)
        self.copies: dict[int, tuple[Agent[Any], list[Any], Agent[Any]]] = {}
        self.gated = False  # whether a tool may need an approval

    def current(self, agent: Agent[Any], config: RunConfig, runner: TetherRunner) -> bool:
        """Whether these copies still copy ``agent`` (and every agent they reached) as
        they are now, for ``config``'s model and ``runner``'s settings."""
        first = self.copies.get(id(agent))
        return (
            first is not None
            and first[0] is agent
            and config.model is self.config.model
            and config.model_provider is self.config.model_provider
            and (runner.risk, runner.on_doubt, runner.approvers) == self.settings
            and len(self.copies) <= _KEPT  # handoffs that return new agents add theirs
            and all(_same(made, _made_from(a)) for a, made, _ in self.copies.values())
        )

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        entry = self.copies.get(id(agent))
        if entry is not None and entry[0] is agent:
            return entry[2]
        copy = agent.clone(model=TetherModel(self._model(agent), None, agent.name))
        self.copies[id(agent)] = (agent, _made_from(agent), copy)  # handoffs may come back
        copy.tools = [self.tool(t) for t in agent.tools]
        copy.handoffs = [self.handoff(h) for h in agent.handoffs]
        return copy

    def _model(self, agent: Agent[Any]) -> Model:
        config = self.config
        if isinstance(config.model, Model):
            return config.model
        if isinstance(config.model, str):
            return config.model_provider.get_model(config.model)
        if isinstance(agent.model, Model):
            return agent.model
        return config.model_provider.get_model(agent.model)

    def handoff(self, h: Agent[Any] | Handoff[Any, Any]) -> Any:
        if isinstance(h, Agent):
            return self.agent(h)
        invoke = h.on_invoke_handoff

        async def on_invoke(ctx: RunContextWrapper[Any], arguments: str) -> Agent[Any]:
            return self.agent(await invoke(ctx, arguments))

        return replace(h, on_invoke_handoff=on_invoke)

    def tool(self, t: Tool) -> Tool:
        if not isinstance(t, FunctionTool):
            return t  # hosted tools run at the provider: inside the model call's step
        self.gated = self.gated or t.needs_approval is not False
        risk, on_doubt, approvers = self.settings
        return _durable_tool(t, risk.get(t.name, "write"), on_doubt, approvers)


def _made_from(agent: Agent[Any]) -> list[Any]:
    """What a durable copy of ``agent`` is made from: its fields, its tools' and
    handoffs' (compared by identity: a field set anew, or a list changed in place)."""
    made = [*vars(agent).values(), *agent.tools, *agent.handoffs]
    for part in (*agent.tools, *agent.handoffs):
        if isinstance(part, FunctionTool | Handoff):
            made += vars(part).values()
    return made


def _same(a: list[Any], b: list[Any]) -> bool:  # by identity, item by item
    return len(a) == len(b) and all(map(operator.is_, a, b))


def _turn(what: str) -> _Turn:
    try:
        return _ACTIVE.get()
    except LookupError:
        raise InvalidState(f"{what} of a TetherRunner's agent called outside its run") from None


def _durable_tool(
    t: FunctionTool, risk: str, on_doubt: str | None, approvers: list[str] | None
) -> FunctionTool:
    """``t`` with each call a ``run.tool`` (and an approval first when it needs one)."""
    invoke_sdk = t.on_invoke_tool

    async def invoke(call_id: str, arguments: str) -> Any:
        return await invoke_sdk(_turn(f"tool {t.name!r}").contexts[call_id], arguments)

    invoke.__qualname__ = invoke.__name__ = t.name
    declared = declare_tool(risk=risk, on_doubt=on_doubt, name=t.name)(invoke)

    async def on_invoke(ctx: ToolContext[Any], arguments: str) -> Any:
        turn, call_id = _turn(f"tool {t.name!r}"), ctx.tool_call_id
        if await _needs_approval(t, ctx, arguments, call_id):
            gate = f"{t.name}:{call_id}"
            payload = {"tool": t.name, "call_id": call_id, "arguments": arguments}
            try:
                await turn.run.approve(gate, payload, approvers=approvers)
            except ApprovalDenied as denied:
                return f"Tool call {t.name} was not approved ({denied})."
        turn.contexts[call_id] = ctx
        try:
            return await turn.run.tool(declared, call_id, arguments)
        finally:
            turn.contexts.pop(call_id, None)

    return replace(t, on_invoke_tool=on_invoke, needs_approval=False)


async def _needs_approval(t: FunctionTool, ctx: ToolContext[Any], arguments: str, cid: str) -> bool:
    need = t.needs_approval
    if isinstance(need, bool):
        return need
    params = json.loads(arguments) if arguments else {}
    verdict = need(ctx, params, cid)
    return bool(await verdict) if isinstance(verdict, Awaitable) else bool(verdict)


class TetherModel(Model):
    """A model whose every response is a journaled ``run.llm`` step named after its
    agent: its output items and usage are recorded, and returned on replay without
    calling ``inner`` again. ``run``: the run it journals into; None: the one a
    :class:`TetherRunner` executes in the current context."""

    def __init__(self, inner: Model, run: AsyncRun | None, name: str) -> None:
        self.inner = inner
        self.run = run
        self.name = name

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        live: list[ModelResponse] = []  # what is recorded of it, when the model is called

        async def call() -> dict[str, Any]:
            response = await self.inner.get_response(
                system_instructions,
                input,
                model_settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )
            live.append(_kept(response))
            return _dump(response)

        recorded = await self._run().llm(self.name, call)
        return live[0] if live else _load(recorded)  # a replay rebuilds the same

    def _run(self) -> AsyncRun:
        return self.run or _turn(f"the model of agent {self.name!r}").run

    def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> Any:
        """Refused: a streamed response would not be journaled (use TetherRunner.run)."""
        raise InvalidState(
            f"run {self._run().id}: streaming the model of agent {self.name!r} is not durable; "
            f"TetherRunner.run journals whole responses (Runner.run_streamed is refused)"
        )


def _dump(r: ModelResponse) -> dict[str, Any]:
    return {
        "output": [_ITEM.dump_python(item, mode="json") for item in r.output],
        "usage": _USAGE.dump_python(r.usage, mode="json"),
        "response_id": r.response_id,
        "request_id": r.request_id,
    }


def _kept(r: ModelResponse) -> ModelResponse:
    """What :func:`_load` gives back of ``r`` once recorded (without validating again)."""
    return ModelResponse(list(r.output), r.usage, r.response_id, r.request_id)


def _load(d: Mapping[str, Any]) -> ModelResponse:
    return ModelResponse(
        output=[_ITEM.validate_python(item) for item in d["output"]],
        usage=_USAGE.validate_python(d["usage"]),
        response_id=d.get("response_id"),
        request_id=d.get("request_id"),
    )


REMOVED = "openai-agents.removed"  # the meta op of a message recording a removal


class TetherSession:
    """The SDK's ``Session`` protocol on the tether session ``session_id``
    (``app.session``): pass it as ``Runner.run(..., session=TetherSession(app, "s-1"))``.

    Every item the SDK adds is a message of the session (its role: the item's role,
    ``tool`` for a tool's output, ``assistant`` for the model's other items; its
    content: the item). Tether's sessions are append-only, so :meth:`pop_item` and
    :meth:`clear_session` append a message recording which seqs they remove: the items
    disappear from :meth:`get_items`, and ``session.messages()`` keeps everything that
    was said and removed, with when.

    Compaction is tether's (``owner``, ``compact_at_tokens``, ``summarize`` and
    ``keep_last`` as ``app.session``; or ``self.session.compact(summarize)``): once the
    session is compacted, :meth:`get_items` starts with the summary (a ``system``
    message) followed by the items after the messages it replaces.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        app: App,
        session_id: str,
        *,
        owner: str | None = None,
        compact_at_tokens: int | None = None,
        summarize: Summarizer | None = None,
        keep_last: int = 6,
    ) -> None:
        self.session_id = session_id
        self.session = app.session(
            session_id,
            owner=owner,
            compact_at_tokens=compact_at_tokens,
            summarize=summarize,
            keep_last=keep_last,
        )
        self._seen = 0  # the last seq read
        self._live: list[tuple[int, TResponseInputItem]] = []  # (seq, item), oldest first

    def _refresh(self) -> list[tuple[int, TResponseInputItem]]:
        for m in self.session.messages(after=self._seen):
            self._seen = m.seq
            if m.meta.get("op") == REMOVED:
                gone = set(m.content["seqs"])
                self._live = [(seq, item) for seq, item in self._live if seq not in gone]
            elif m.meta.get("op") == "openai-agents.item":
                self._live.append((m.seq, m.content))
        return self._live

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first (the latest ``limit`` when given)."""
        live = self._refresh()
        base, _ = self.session.window()
        items: list[TResponseInputItem] = []
        if base is not None:
            summary = base.summary if isinstance(base.summary, str) else json.dumps(base.summary)
            items.append({"role": "system", "content": summary})
            live = [(seq, item) for seq, item in live if seq > base.upto]
        items += [item for _, item in live]
        return items if limit is None else items[-limit:] if limit > 0 else []

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items``, one message each."""
        for item in items:
            data = _input_json([item])[0]
            self.session.add(_role(data), data, op="openai-agents.item")

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item (None when there is none); the removal is
        a message of the session."""
        live = self._refresh()
        if not live:
            return None
        seq, item = live[-1]
        self._remove([seq])
        return item

    async def clear_session(self) -> None:
        """Remove every item; the removal is one message of the session."""
        live = self._refresh()
        if live:
            self._remove([seq for seq, _ in live])

    def _remove(self, seqs: list[int]) -> None:
        self.session.add("system", {"seqs": seqs}, op=REMOVED)
        self._refresh()


def _role(item: Mapping[str, Any]) -> str:
    role = item.get("role")
    if role in ("user", "assistant", "system"):
        return str(role)
    if role == "developer":
        return "system"
    kind = str(item.get("type", ""))
    return "tool" if kind.endswith("_output") else "assistant"
