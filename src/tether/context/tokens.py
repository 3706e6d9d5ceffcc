"""Counting tokens: what a piece of a prompt costs a model.

With ``tiktoken`` installed (``pip install tiktoken``: optional, not a
dependency of tether) text is counted with its ``o200k_base`` encoding
(``cl100k_base`` when that one is missing). Without it, tether estimates **one
token per 4 characters**, rounded up: close to what English prose and JSON cost
on current models, and deterministic, which is what budgets and tests need. A message costs its
content's tokens plus :data:`MESSAGE_OVERHEAD` (role and separators).

Structured content (dicts, lists) is counted as its JSON text.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 4  # role, separators: what every chat message costs besides its content


@lru_cache(maxsize=1)
def _encoder() -> Callable[[str], int] | None:
    """tiktoken's counter when it is installed and has an encoding, else None."""
    try:
        tiktoken = importlib.import_module("tiktoken")  # optional: not a dependency
    except ImportError:
        return None
    for name in ("o200k_base", "cl100k_base"):
        try:
            enc = tiktoken.get_encoding(name)
        except Exception:  # encodings are downloaded on first use; offline, estimate
            continue
        return lambda text: len(enc.encode(text, disallowed_special=()))
    return None


def counter() -> str:
    """Which counter is in use: ``"tiktoken"`` or ``"estimate (4 chars/token)"``."""
    return "tiktoken" if _encoder() is not None else f"estimate ({CHARS_PER_TOKEN} chars/token)"


def text_of(content: Any) -> str:
    """The text a model receives for ``content``: a str as is, anything else as JSON."""
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False, separators=(",", ":"), default=str)


def count(content: Any) -> int:
    """Tokens of ``content`` (a str, or structured content counted as JSON)."""
    text = text_of(content)
    if not text:
        return 0
    enc = _encoder()
    if enc is not None:
        return enc(text)
    return -(-len(text) // CHARS_PER_TOKEN)


def count_message(message: Mapping[str, Any]) -> int:
    """Tokens of one chat message: its content and other fields, plus the overhead."""
    extra = {k: v for k, v in message.items() if k not in ("role", "content")}
    return MESSAGE_OVERHEAD + count(message.get("content", "")) + (count(extra) if extra else 0)
