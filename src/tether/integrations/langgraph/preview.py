"""What ``tether show``, ``state`` and ``diff`` display of a LangGraph value: a short,
plain-JSON preview (the value itself is stored serialized, by content; see thread.py)."""

from __future__ import annotations

from typing import Any

LIMIT = 48  # characters of a string shown


def preview(value: Any, depth: int = 0) -> Any:
    """A JSON-plain rendering of ``value``: scalars as they are (strings cut at
    :data:`LIMIT`), a message as ``"<type>: <content>"`` (with its tool calls), lists and
    dicts element by element (three levels deep), anything else by its type's name."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return value if len(value) <= LIMIT else value[:LIMIT] + "…"
    content = getattr(value, "content", None)
    kind = getattr(value, "type", None)
    if isinstance(kind, str) and content is not None:
        text = f"{kind}: {preview(content if isinstance(content, str) else str(content))}"
        calls = getattr(value, "tool_calls", None)
        if calls:
            text += " " + ", ".join(f"{c['name']}({c.get('args')})" for c in calls)
        return preview(text)
    if depth < 3 and isinstance(value, list | tuple):
        return [preview(v, depth + 1) for v in value]
    if depth < 3 and isinstance(value, dict):
        return {str(k): preview(v, depth + 1) for k, v in value.items()}
    return f"<{type(value).__name__}>"
