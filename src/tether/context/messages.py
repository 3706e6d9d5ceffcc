"""Messages of a conversation as a model sees them, and what identifies one.

A :class:`Message` is one stored message of a session; its *view key* (role, content
hash and the meta a model sees) is what lets a recorded prompt refer to stored
messages instead of copying them (``Session.prompt_refs`` in
tether.context.conversation).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.model import codec
from tether.store.context_records import MessageRecord

ROLES = ("system", "user", "assistant", "tool")
VIEW_KEYS = ("name", "tool_call_id", "tool_calls")  # meta a model sees beside role and content


@dataclass(frozen=True, slots=True)
class Message:
    """One stored message of a session. ``id`` is ``"<session>#<seq>"``."""

    session_id: str
    seq: int
    role: str
    content: Any
    sha256: str  # of the content (its canonical JSON): equal content, equal hash
    meta: Mapping[str, Any] = field(default_factory=dict)
    at: float = 0.0
    run_id: str | None = None  # the run that added it, if any

    @property
    def id(self) -> str:
        """``"<session>#<seq>"``."""
        return f"{self.session_id}#{self.seq}"

    def as_prompt(self) -> dict[str, Any]:
        """The message as a chat model takes it: role, content and the model-facing meta
        (``name``, ``tool_call_id``, ``tool_calls``)."""
        out = {"role": self.role, "content": self.content}
        out.update((k, self.meta[k]) for k in VIEW_KEYS if k in self.meta)
        return out


def message_of(session_id: str, row: MessageRecord) -> Message:
    """The message of a stored record."""
    return Message(
        session_id,
        row.seq,
        row.role,
        codec.decode(row.body),
        row.sha256,
        codec.decode(row.meta),
        row.at,
        row.run_id,
    )


def view_key(role: str, sha: str, meta: Mapping[str, Any]) -> str:
    """What identifies a message as a model sees it: role, content hash, model-facing meta."""
    return codec.digest([role, sha, {k: meta[k] for k in VIEW_KEYS if k in meta}])


def entry_key(entry: Mapping[str, Any]) -> str | None:
    """The view key of a prompt entry; None when it cannot be a stored message (other keys)."""
    if not isinstance(entry.get("role"), str) or "content" not in entry:
        return None
    if any(k not in ("role", "content", *VIEW_KEYS) for k in entry):
        return None
    return view_key(entry["role"], codec.digest(entry["content"]), entry)
