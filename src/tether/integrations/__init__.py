"""Integrations: tether under other agent frameworks, each an optional extra.

``tether.integrations.langgraph`` (``pip install 'tether[langgraph]'``): a LangGraph
checkpointer that keeps each thread as a tether run. Nothing below this package imports
it; it uses the App and the store's protocol only.
"""
