"""Conversations: get or create a session with its compaction policy (checked first)."""

from __future__ import annotations

from typing import Any

from tether.context.conversation import Session, Summarizer, make_policy, open_session
from tether.engine.deps import Deps
from tether.errors import InvalidInput
from tether.model import inputs


def session(
    deps: Deps,
    session_id: str,
    *,
    owner: str | None = None,
    compact_at_tokens: int | None = None,
    summarize: Summarizer | None = None,
    keep_last: int = 6,
) -> Session:
    """Get or create the conversation ``session_id`` (see :meth:`tether.App.session`)."""
    inputs.name(session_id, "the session id")
    inputs.optional_name(owner, "owner")
    if compact_at_tokens is not None:
        inputs.integer(compact_at_tokens, "compact_at_tokens", low=1)
    inputs.integer(keep_last, "keep_last", low=0)
    policy = make_policy(compact_at_tokens, summarize, keep_last)
    return open_session(deps.store, deps.clock, session_id, owner=owner, policy=policy)


def of(deps: Deps, value: Any) -> Session:
    """A Session, or the session of that id (created if new); InvalidInput for anything
    else."""
    if isinstance(value, Session):
        return value
    if isinstance(value, str):
        return session(deps, value)
    raise InvalidInput(
        f"a session is a Session or its session id (a str), not {inputs.show(value)}"
    )
