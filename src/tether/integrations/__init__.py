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


def missing(extra: str, error: ModuleNotFoundError) -> ImportError:
    """The error an integration raises when its framework is not installed: which module
    is missing and the one command that installs it."""
    return ImportError(
        f"this tether integration needs {error.name!r}, which is not installed: "
        f"pip install 'tether[{extra}]'"
    )
