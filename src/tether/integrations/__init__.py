"""Adapters that put tether under agent frameworks: durable runs without rewriting the agent.

Each module imports its framework, installed through the extra of the same name
(``pip install 'tether[openai-agents]'``); importing this package imports none of them.
"""
