"""Compaction of a conversation: the summary that replaces old turns, and when to write one.

A :class:`Compaction` replaces messages ``1..upto`` of a session in its prompt view
with a summary; the messages themselves stay stored. :class:`CompactPolicy` is the
automatic kind (``app.session(…, compact_at_tokens=…, summarize=…)``), and
:func:`cut_point` decides which part of the prompt view a summary replaces.
``Session.compact`` and ``Session.auto_compact`` (tether.context.conversation) use them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tether.model import codec
from tether.store.context_records import CompactionRecord

SUMMARY_ROLE = "system"
KEEP_LAST = 6  # messages a compaction keeps verbatim unless told otherwise

Summarizer = Callable[[list[dict[str, Any]]], Any]
"""``summarize(messages) -> summary``: the messages are the prompt-view entries the summary
replaces (the previous summary first, if any); the summary is a str or structured content."""


@dataclass(frozen=True, slots=True)
class Compaction:
    """A summary that replaces messages ``1..upto`` in the prompt view."""

    session_id: str
    upto: int
    summary: Any
    sha256: str
    tokens_before: int  # the prompt view's tokens before this compaction…
    tokens_after: int  # …and right after it
    at: float

    def as_prompt(self) -> dict[str, Any]:
        """The summary as the first message of the prompt view (role ``system``)."""
        return {"role": SUMMARY_ROLE, "content": self.summary}


@dataclass(frozen=True, slots=True)
class CompactPolicy:
    """Automatic compaction: once the prompt view passes ``at_tokens``, summarise all but
    the last ``keep_last`` messages with ``summarize``."""

    at_tokens: int
    summarize: Summarizer
    keep_last: int = KEEP_LAST


class _Turn(Protocol):
    @property
    def role(self) -> str: ...


def cut_point(window: Sequence[_Turn], keep_last: int) -> int:
    """How many messages of ``window`` (the prompt view after its summary) a compaction
    keeping the last ``keep_last`` replaces; 0 or less: none. The kept part never starts
    with a tool result, which stays with its call."""
    cut = len(window) - keep_last
    while 0 < cut < len(window) and window[cut].role == "tool":
        cut -= 1
    return cut


def make_policy(
    at_tokens: int | None, summarize: Summarizer | None, keep_last: int
) -> CompactPolicy | None:
    """The automatic compaction policy of ``app.session(…)`` (None: compact by hand)."""
    if at_tokens is None and summarize is None:
        return None
    if at_tokens is None or summarize is None or at_tokens <= 0:
        raise ValueError(
            f"automatic compaction needs both compact_at_tokens (> 0) and summarize; got "
            f"compact_at_tokens={at_tokens!r}, summarize={summarize!r}"
        )
    return CompactPolicy(at_tokens, summarize, keep_last)


def compaction_of(session_id: str, row: CompactionRecord) -> Compaction:
    """The compaction of a stored record."""
    return Compaction(
        session_id,
        row.upto,
        codec.decode(row.body),
        row.sha256,
        row.tokens_before,
        row.tokens_after,
        row.at,
    )
