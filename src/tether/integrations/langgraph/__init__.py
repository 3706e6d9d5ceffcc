"""LangGraph on tether: :class:`TetherSaver`, a checkpointer keeping each thread as a run,
and :class:`TetherStore`, LangGraph's long-term memory on ``app.memory``.

Install with ``pip install 'tether[langgraph]'``. See docs/langgraph.md.
"""

from tether.integrations import missing

try:
    import langgraph.checkpoint.base
    import langgraph.store.base  # noqa: F401
except ModuleNotFoundError as e:  # the extra is not installed
    raise missing("langgraph", e) from e

from tether.integrations.langgraph.saver import AGENT, TetherSaver
from tether.integrations.langgraph.store import TetherStore

__all__ = ["AGENT", "TetherSaver", "TetherStore"]
