"""Adapters that put tether under agent frameworks: durable runs without rewriting the agent.

Each module imports its framework, installed through the extra of the same name, and
importing this package imports none of them:

- ``tether.integrations.langgraph`` (``tether[langgraph]``): a LangGraph checkpointer and
  store that keep each thread as a tether run;
- ``tether.integrations.openai_agents`` (``tether[openai-agents]``): a durable runner and a
  Session for the OpenAI Agents SDK;
- ``tether.integrations.pydantic_ai`` (``tether[pydantic-ai]``): durable execution and a
  message history for pydantic-ai.

They use the App and the store's protocol only; nothing below this package imports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.engine.births import loop_running
from tether.errors import Conflict, InvalidState, NotFound
from tether.model import inputs

if TYPE_CHECKING:
    from tether.app import App
    from tether.engine.executor import RunHandle


def missing(extra: str, error: ModuleNotFoundError) -> ImportError:
    """The error an integration raises when its framework is not installed: which module
    is missing and the one command that installs it."""
    return ImportError(
        f"this tether integration needs {error.name!r}, which is not installed: "
        f"pip install 'tether[{extra}]'"
    )


async def execute(
    app: App, agent: str, args: tuple[Any, ...], run_id: str, queue: str
) -> RunHandle:
    """Execute the run ``run_id`` of ``agent`` (registered on ``app``) in this process, in
    the running event loop. A new run is created under this process's lease with its
    first events in one transaction and executed at once (``app.arun``'s path: no enqueue,
    no claim, no read of its log), ``queue`` named in its row; an existing one is resumed
    (``app.aresume``, which raises as it does). InvalidInput for an id ``app.start``
    would refuse."""
    ex = app._executor
    inputs.run_id(run_id)
    if ex.tracing is not None and _exists(app, run_id):  # no span for a refused creation
        return await app.aresume(run_id)
    try:
        prepared = ex.create(app._registry.resolve(agent), args, {}, run_id=run_id, queue=queue)
    except Conflict:  # the id exists: a resume, or another process created it meanwhile
        return await app.aresume(run_id)
    return await ex.acontinue_run(prepared)


def _exists(app: App, run_id: str) -> bool:
    try:
        app.record(run_id)
    except NotFound:
        return False
    return True


def outside_loop(runner: str) -> None:
    """Refuse ``runner``'s ``run_sync`` in a thread that runs an event loop (a web handler,
    a notebook): it starts a loop of its own, which Python refuses inside another. Checked
    before anything is created."""
    if not loop_running():
        return
    raise InvalidState(
        f"{runner}.run_sync starts an event loop of its own, which Python refuses inside "
        f"another (this thread runs one): from async code, await {runner}.run(...). "
        f"Nothing was created."
    )
