"""Compaction (tether.context.conversation) on SQLite and PostgreSQL: a summary replaces old turns
in the prompt view, the originals stay, a second compaction with nothing new writes
nothing, and a summariser that fails or is SIGKILLed leaves the session as it was."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from _conformance import Backend

import tether
from tether.context.conversation import Session

pytestmark = pytest.mark.conformance


def summary_of(entries: list[dict[str, Any]]) -> str:
    """A deterministic summariser: which contents it replaced."""
    return "summary: " + " | ".join(str(e["content"]) for e in entries)


def _fill(s: Session, n: int) -> None:
    for k in range(1, n + 1):
        s.add("user" if k % 2 else "assistant", f"m{k}")


def test_a_summary_replaces_older_turns_and_the_originals_stay(app: tether.App) -> None:
    s = app.session("s-1")
    _fill(s, 8)
    seen: list[list[dict[str, Any]]] = []

    def summarize(entries: list[dict[str, Any]]) -> str:
        seen.append(entries)
        return summary_of(entries)

    c = s.compact(summarize, keep_last=3)
    assert c is not None and c.upto == 5 and c.summary == "summary: m1 | m2 | m3 | m4 | m5"
    assert [e["content"] for e in seen[0]] == ["m1", "m2", "m3", "m4", "m5"]
    view = app.session("s-1").prompt_view()
    assert view == [
        {"role": "system", "content": "summary: m1 | m2 | m3 | m4 | m5"},
        {"role": "assistant", "content": "m6"},
        {"role": "user", "content": "m7"},
        {"role": "assistant", "content": "m8"},
    ]
    assert [m.content for m in s.messages()] == [f"m{k}" for k in range(1, 9)]
    assert c.tokens_after < c.tokens_before
    assert s.compactions() == [c]


def test_a_second_compaction_with_nothing_new_writes_nothing(
    app: tether.App, backend: Backend
) -> None:
    s = app.session("s-1")
    _fill(s, 6)
    assert s.compact(summary_of, keep_last=2) is not None
    calls: list[int] = []

    def counting(entries: list[dict[str, Any]]) -> str:
        calls.append(1)
        return summary_of(entries)

    assert s.compact(counting, keep_last=2) is None
    assert app.session("s-1").compact(counting, keep_last=2) is None  # a fresh object too
    assert calls == [] and backend.sql("SELECT count(*) FROM compactions")[0][0] == 1


def test_compaction_is_incremental_and_keeps_tool_results_with_their_call(
    app: tether.App,
) -> None:
    s = app.session("s-1")
    _fill(s, 4)
    s.compact(summary_of, keep_last=1)
    s.add("user", "m5")
    s.add("assistant", "calling search", tool_calls=[{"id": "c1", "name": "search"}])
    s.add("tool", "found it", name="search", tool_call_id="c1")
    s.add("tool", "and more", name="search", tool_call_id="c1")
    seen: list[list[dict[str, Any]]] = []
    c = s.compact(lambda e: seen.append(e) or "second", keep_last=2)
    # keep_last=2 would start the kept part at a tool result: the call stays with it
    assert c is not None and c.upto == 5
    assert [e["content"] for e in seen[0]] == ["summary: m1 | m2 | m3", "m4", "m5"]
    assert [m["content"] for m in s.prompt_view()] == [
        "second",
        "calling search",
        "found it",
        "and more",
    ]
    assert len(s.compactions()) == 2 and len(s.messages()) == 8


def test_a_failing_summariser_leaves_the_session_as_it_was(
    app: tether.App, backend: Backend
) -> None:
    s = app.session("s-1")
    _fill(s, 6)
    before = s.prompt_view()

    def broken(entries: list[dict[str, Any]]) -> str:
        raise TimeoutError("the model timed out")

    with pytest.raises(TimeoutError):
        s.compact(broken, keep_last=2)
    assert app.session("s-1").prompt_view() == before
    assert backend.sql("SELECT count(*) FROM compactions")[0][0] == 0
    with pytest.raises(tether.EncodeError, match="summary of session 's-1'"):
        s.compact(lambda e: object(), keep_last=2)
    assert backend.sql("SELECT count(*) FROM compactions")[0][0] == 0


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import tether

    app = tether.open(sys.argv[1])
    session = app.session("s-1")

    def summarize(entries):
        print("summarising", len(entries), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # the process dies mid-compaction

    session.compact(summarize, keep_last=2)
    print("not reached", flush=True)
    """
)


def test_a_compaction_killed_midway_leaves_the_session_readable_and_unchanged(
    app: tether.App, backend: Backend
) -> None:
    s = app.session("s-1", owner="u-7")
    _fill(s, 10)
    before_view, before_messages = s.prompt_view(), s.messages()
    child = subprocess.run(
        [sys.executable, "-c", CHILD, backend.url], capture_output=True, text=True, timeout=60
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert child.stdout.strip() == "summarising 8"
    again = tether.open(backend.url)
    try:
        fresh = again.session("s-1", owner="u-7")
        assert fresh.prompt_view() == before_view and fresh.messages() == before_messages
        assert fresh.compactions() == []
        c = fresh.compact(summary_of, keep_last=2)  # and it compacts afterwards
        assert c is not None and c.upto == 8
    finally:
        again.close()


def test_automatic_compaction_by_token_count(app: tether.App) -> None:
    s = app.session(
        "s-1", compact_at_tokens=120, summarize=lambda e: f"{len(e)} earlier", keep_last=2
    )
    for k in range(30):
        s.add("user", f"message {k}: " + "word " * 10)  # ~17 tokens each
        assert s.tokens() <= 120 + 40, k  # compacted as soon as it passes the threshold
    compactions = s.compactions()
    assert len(compactions) >= 3
    assert all(c.tokens_before > 120 for c in compactions)
    assert len(s.messages()) == 30
    view = s.prompt_view()
    assert view[0]["role"] == "system" and view[-1]["content"].startswith("message 29")


def test_auto_compact_by_hand_and_its_errors(app: tether.App) -> None:
    s = app.session("s-1")
    _fill(s, 6)
    assert s.auto_compact(summary_of, at_tokens=10_000) is None  # under the threshold
    c = s.auto_compact(summary_of, at_tokens=10, keep_last=1)
    assert c is not None and c.upto == 5
    with pytest.raises(ValueError, match="auto_compact needs summarize= and at_tokens="):
        s.auto_compact()
    with pytest.raises(ValueError, match="needs both compact_at_tokens"):
        app.session("s-2", compact_at_tokens=100)
    with pytest.raises(ValueError, match="keep_last must be >= 0"):
        s.compact(summary_of, keep_last=-1)
