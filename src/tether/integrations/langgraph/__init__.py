"""LangGraph on tether: :class:`TetherSaver`, a checkpointer keeping each thread as a run,
and :class:`TetherStore`, LangGraph's long-term memory on ``app.memory``.

Install with ``pip install 'tether[langgraph]'``. See docs/langgraph.md.
"""

from tether.integrations.langgraph.saver import AGENT, TetherSaver
from tether.integrations.langgraph.store import TetherStore

__all__ = ["AGENT", "TetherSaver", "TetherStore"]
