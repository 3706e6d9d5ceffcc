"""LangGraph on tether: :class:`TetherSaver`, a checkpointer keeping each thread as a run.

Install with ``pip install 'tether[langgraph]'``. See docs/langgraph.md.
"""

from tether.integrations.langgraph.saver import AGENT, TetherSaver

__all__ = ["AGENT", "TetherSaver"]
