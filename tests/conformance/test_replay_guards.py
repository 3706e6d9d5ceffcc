"""What replay and the effects table guard, each checked on both stores.

- A tool called with other arguments at a recorded position is nondeterminism, named
  with both argument digests (completed and in-flight calls alike): replay never hands
  one call's result to another call.
- The idempotency key is exactly ``{run_id}:{position}:{name}:{16 hex of the args
  digest}``, wherever it shows (the tool's argument, ``current_step()``, the effects
  table, the run's state, a compensation's key).
- A key the effects table has completed returns its recorded result, the tool not
  called again, even when the log lost the completion.
- A snapshot keeps a tool step's key: a run loaded from a snapshot still compensates it.

The assertions are on the error and the store, never on the status a run ends in after
nondeterminism (that is the run's policy, not replay's).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from _conformance import T0, Backend

import tether
from tether.model import codec

pytestmark = pytest.mark.conformance


class Crash(BaseException):
    """The process dies inside a tool call (after its intent, before its completion)."""


@pytest.fixture
def clocked(backend: Backend) -> Iterator[tether.App]:
    a = tether.open(backend.url, clock=tether.FakeClock(T0))
    yield a
    a.close()


def _tool_digest(*args: Any, **kwargs: Any) -> str:
    return codec.digest({"args": list(args), "kwargs": kwargs})


# -- a tool's arguments are part of what replay checks ---------------------------------


@pytest.mark.parametrize(
    ("risk", "recorded"), [("write", "completed"), ("write", "in flight"), ("read", "completed")]
)
def test_a_tool_replayed_with_other_arguments_is_nondeterminism(
    clocked: tether.App, risk: str, recorded: str
) -> None:
    """A read tool's call records no intent (nothing is in flight to check), but its
    completed call's arguments are checked on replay as a write tool's are."""
    app = clocked
    to = {"value": "alice"}
    sent: list[str] = []
    caught: list[tether.NondeterminismError] = []

    @app.tool(risk=risk)
    def send(to: str, *, idempotency_key: str) -> str:
        sent.append(to)
        if recorded == "in flight" and len(sent) == 1:
            raise Crash
        return f"sent to {to}"

    @app.agent
    def mail(run: tether.Run) -> str:
        try:
            out = str(run.tool(send, to=to["value"]))
        except tether.NondeterminismError as e:
            caught.append(e)
            raise
        run.wait("go")
        return out

    if recorded == "completed":
        rid = app.run(mail).id
        app.signal(rid, "go")
    else:
        with pytest.raises(Crash):
            app.run(mail)
        (rid,) = [r.id for r in app.runs()]
    step = app.get(rid).steps[0]
    assert step.input_digest == _tool_digest(to="alice")
    to["value"] = "bob"  # the code changed under the run: it now sends to someone else
    with pytest.raises(tether.TetherError):
        app.resume(rid)
    (err,) = caught
    old, new = _tool_digest(to="alice")[:12], _tool_digest(to="bob")[:12]
    assert (err.run_id, err.position) == (rid, 1)
    assert (err.expected, err.found) == (f"tool send(args {old})", f"tool send(args {new})")
    assert "position 1" in str(err) and old in str(err) and new in str(err)
    assert sent == ["alice"]  # bob's call never ran, nor was alice's result handed to it
    assert app.get(rid).steps[0].input_digest == _tool_digest(to="alice")


def test_a_credential_in_changed_arguments_is_not_hashed_into_the_error(
    clocked: tether.App,
) -> None:
    """The arguments changed, and now hold a credential (redacted by the default rules):
    the NondeterminismError, which the blocked run's record keeps, names the digest of the
    redacted arguments, never a hash of the credential itself (a short one could be found
    again from it)."""
    app = clocked
    note = {"value": "hello"}

    @app.tool(risk="write")
    def post(text: str, *, idempotency_key: str) -> str:
        return "posted"

    @app.agent
    def poster(run: tether.Run) -> str:
        out = str(run.tool(post, note["value"]))
        run.wait("go")
        return out

    rid = app.run(poster).id
    app.signal(rid, "go")
    note["value"] = "my key is sk-proj-" + "ab12" * 10  # the code changed under the run
    with pytest.raises(tether.NondeterminismError) as raised:
        app.resume(rid)
    redacted, raw = (
        _tool_digest(note["value"]),
        codec.digest({"args": [note["value"]], "kwargs": {}}, redacted=False),
    )
    assert redacted != raw
    assert f"args {redacted[:12]}" in str(raised.value)
    kept = [repr(app.get(rid)), *(e.data for e in app.events(rid))]  # the block's record
    assert redacted[:12] in "".join(kept) and raw[:12] not in str(raised.value) + "".join(kept)


def test_a_tool_replayed_with_the_same_arguments_reuses_its_result(clocked: tether.App) -> None:
    app = clocked
    sent: list[str] = []

    @app.tool(risk="write")
    def send(to: str, cc: str | None) -> str:
        sent.append(to)
        return f"sent to {to}"

    @app.agent
    def mail(run: tether.Run) -> str:
        out = str(run.tool(send, "alice", cc=None))
        run.wait("go")
        return out

    rid = app.run(mail).id
    app.signal(rid, "go")
    done = app.resume(rid)
    assert (done.status, done.output, done.reused[0]) == ("completed", "sent to alice", (1, "send"))
    assert sent == ["alice"]


# -- the key's format ----------------------------------------------------------------


def test_the_idempotency_key_format_is_pinned(clocked: tether.App) -> None:
    app = clocked
    seen: dict[str, str] = {}
    undone: list[str] = []

    def undo(result: str, to: str, *, idempotency_key: str) -> None:
        undone.append(idempotency_key)

    @app.tool(risk="write", compensate=undo)
    def send(to: str, *, idempotency_key: str) -> str:
        seen["tool"] = idempotency_key
        seen["tool current"] = tether.current_step().idempotency_key
        return "ok"

    def fetch(n: int, *, page: int) -> int:
        seen["step"] = tether.current_step().idempotency_key
        return n

    @app.agent
    def flow(run: tether.Run) -> None:
        run.step("fetch", fetch, 7, page=2)
        run.tool(send, to="alice")
        raise ValueError("fails after the tool: its undo runs")

    with pytest.raises(tether.RunFailed):
        app.run(flow)
    (rid,) = [r.id for r in app.runs()]
    tool_digest = _tool_digest(to="alice")
    tool_key = f"{rid}:2:send:{tool_digest[:16]}"
    assert seen == {
        "step": f"{rid}:1:fetch:{codec.digest([[7], {'page': 2}])[:16]}",
        "tool": tool_key,
        "tool current": tool_key,
    }
    for key in seen.values():
        assert re.fullmatch(rf"{rid}:\d+:[a-z]+:[0-9a-f]{{16}}", key), key
    state = app.get(rid)
    assert state.steps[1].key == tool_key
    effect = app.effect(tool_key)
    # the call was undone: its row says so (an undone effect is never reused by a fork)
    assert effect is not None and (effect.status, effect.position, effect.tool) == (
        "compensated",
        2,
        "send",
    )
    undo_digest = codec.digest({"of": 2, "key": tool_key})
    assert undone == [f"{rid}:3:undo:send:{undo_digest[:16]}"]
    assert state.steps[2].key == undone[0]


# -- the effects table's dedup ----------------------------------------------------------


@pytest.mark.parametrize("on_doubt", ["retry", "ask"])
def test_a_key_completed_in_the_effects_table_returns_its_result(
    clocked: tether.App, backend: Backend, on_doubt: str
) -> None:
    """The process died after the tool's effect was recorded in the effects table but the
    log has no completion (a lost write, a restored log): the resume must return the
    recorded result, without calling the tool again and without asking a human. Here the
    call was on its second attempt (the first one failed and was retried): the step's
    record keeps that count."""
    app = clocked
    rid, calls = _crashed_in_a_call(app, on_doubt, retried=True)
    key = calls[0]
    state = app.get(rid)
    assert (state.steps[0].status, state.steps[0].key, state.steps[0].attempts) == (
        "running",
        key,
        2,
    )
    assert app.effect(key).status == "intent"  # type: ignore[union-attr]
    backend.sql(
        f"UPDATE effects SET status = 'completed', result = '{{\"charge\": 1}}' WHERE key = '{key}'"
    )
    done = app.resume(rid)
    assert (done.status, done.output) == ("completed", {"charge": 1})
    assert calls == [key, key]  # not called again
    step = app.get(rid).steps[0]
    assert (step.status, step.output, step.key) == ("completed", {"charge": 1}, key)
    assert step.attempts == 2
    assert step.input_digest == _tool_digest(30)  # the args check still holds on replay
    completed = [e for e in app.events(rid) if e.type == "step.completed"]
    assert [e.payload()["key"] for e in completed] == [key]
    assert completed[0].payload()["duration"] == 0  # no call was made


def _crashed_in_a_call(
    app: tether.App, on_doubt: str, *, retried: bool = False
) -> tuple[str, list[str]]:
    """A run whose process died in its write tool's call (after the intent); the run's
    id and the keys the tool was called with (it answers {"charge": n} at its n-th).
    ``retried``: the crash is in the second attempt, the first having failed."""
    calls: list[str] = []
    policy = tether.Retry(max_attempts=3, backoff=0) if retried else None

    @app.tool(risk="write", on_doubt=on_doubt, retry=policy)
    def charge(amount: int, *, idempotency_key: str) -> dict[str, int]:
        calls.append(idempotency_key)
        if retried and len(calls) == 1:
            raise ConnectionError("the payment API did not answer")
        if len(calls) == 1 + retried:
            raise Crash
        return {"charge": len(calls)}

    @app.agent
    def pay(run: tether.Run) -> object:
        return run.tool(charge, 30)

    with pytest.raises(Crash):
        app.run(pay)
    (rid,) = [r.id for r in app.runs()]
    return rid, calls


def test_a_key_completed_in_the_effects_table_is_found_without_its_intent(
    clocked: tether.App, backend: Backend
) -> None:
    """The log lost even the call's intent (restored from before it), the effects table
    kept the completed call: the resume returns the recorded result, as the call's first
    attempt, without calling the tool again."""
    app = clocked
    rid, calls = _crashed_in_a_call(app, "retry")
    key = calls[0]
    types = [e.type for e in app.events(rid)]
    assert types[2] == "tool.intent"  # after run.created and run.started
    seq = "key & 4294967295" if backend.name == "sqlite" else "seq"
    backend.sql(f"DELETE FROM events WHERE {seq} >= 3")  # the intent and what follows it
    backend.sql("DELETE FROM snapshots")
    backend.sql(
        f"UPDATE effects SET status = 'completed', result = '{{\"charge\": 1}}' WHERE key = '{key}'"
    )
    assert not app.get(rid).steps
    done = app.resume(rid)
    assert (done.status, done.output, calls) == ("completed", {"charge": 1}, [key])
    step = app.get(rid).steps[0]
    assert (step.status, step.key, step.attempts) == ("completed", key, 1)


@pytest.mark.parametrize("on_doubt", ["retry", "ask"])
@pytest.mark.parametrize("status", ["compensating", "compensated"])
def test_a_key_undone_in_the_effects_table_is_not_taken_for_a_result(
    clocked: tether.App, backend: Backend, status: str, on_doubt: str
) -> None:
    """The effects table holds the call's result, but the call was undone since (a
    compensation marked its row), and the log has no completion (a restored log): the
    undone result is not returned as the call's; the call is in doubt again: a tool that
    dedups is called again with its key, or a person is asked, told it was a crash."""
    app = clocked
    rid, calls = _crashed_in_a_call(app, on_doubt)
    key = calls[0]
    backend.sql(
        f"UPDATE effects SET status = '{status}', result = '{{\"charge\": 1}}' WHERE key = '{key}'"
    )
    done = app.resume(rid)
    if on_doubt == "retry":
        assert (done.status, done.output, calls) == ("completed", {"charge": 2}, [key, key])
        return
    assert (done.status, calls) == ("waiting", [key])
    waiting = app.get(rid).waiting or {}
    assert (waiting["kind"], waiting["key"], waiting["reason"]) == ("doubt", key, "crash")


# -- snapshots keep what compensation needs ------------------------------------------


@pytest.mark.parametrize("ending", ["failure", "cancel"])
def test_a_run_loaded_from_a_snapshot_still_compensates_its_tools(
    backend: Backend, ending: str
) -> None:
    app = tether.open(backend.url, clock=tether.FakeClock(T0), snapshot_every=1)
    undone: list[tuple[str, str]] = []
    try:

        def refund(result: str, order: str, *, idempotency_key: str) -> None:
            undone.append((result, order))

        @app.tool(risk="write", compensate=refund)
        def charge(order: str) -> str:
            return f"charged {order}"

        @app.agent
        def order(run: tether.Run) -> None:
            run.tool(charge, "o-1")
            run.wait("go")
            raise ValueError("out of stock")

        rid = app.run(order).id
        state = app.get(rid)  # folds 1 event or more: caches a snapshot
        loaded = app.store.load(rid)
        assert loaded.snapshot is not None and loaded.snapshot.seq == state.seq
        assert not loaded.events  # the next load starts from the snapshot alone
        tool = state.steps[0]
        assert tool.key is not None and app.get(rid).steps[0].key == tool.key
        if ending == "failure":
            app.signal(rid, "go")
            with pytest.raises(tether.RunFailed):
                app.resume(rid)
        else:
            app.cancel(rid, compensate=True, by="ops")
        assert undone == [("charged o-1", "o-1")]
        assert app.get(rid).status == ("failed" if ending == "failure" else "cancelled")
    finally:
        app.close()
