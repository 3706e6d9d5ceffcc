"""Sessions and messages (tether.context.conversation) on SQLite and PostgreSQL: order, content
dedup, owners, runs in a session, and model prompts recorded as references."""

from __future__ import annotations

from typing import Any

import pytest
from _conformance import Backend

import tether
from tether.context.conversation import Message, Session, load_session, pack

pytestmark = pytest.mark.conformance

BIG = "the checkout p99 rose after the 14:02 deploy; " * 40  # ~1.9 KB


def model(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """A deterministic chat model: its reply names how many messages it saw."""
    return {
        "content": f"reply to {len(messages)} messages",
        "usage": {"input_tokens": 10 * len(messages), "output_tokens": 5},
    }


def test_messages_keep_their_order_seq_content_and_meta(app: tether.App) -> None:
    s = app.session("s-1", owner="u-7")
    added = [
        s.add("system", "be brief"),
        s.add("user", "hello"),
        s.add("assistant", {"text": "hi", "scores": (0.5, 1)}, model="m-1"),
        s.add("tool", "42", name="calc", tool_call_id="c1", args={"x": 6}),
    ]
    assert [m.seq for m in added] == [1, 2, 3, 4]
    assert [m.id for m in added] == ["s-1#1", "s-1#2", "s-1#3", "s-1#4"]
    read = app.session("s-1").messages()
    assert read == added
    assert read[2].content == {"text": "hi", "scores": (0.5, 1)}  # tuples survive
    assert read[3].meta == {"name": "calc", "tool_call_id": "c1", "args": {"x": 6}}
    assert read[3].as_prompt() == {
        "role": "tool",
        "content": "42",
        "name": "calc",
        "tool_call_id": "c1",
    }
    assert [m.seq for m in s.messages(after=1, upto=3)] == [2, 3]
    assert s.message(2).content == "hello"
    with pytest.raises(tether.NotFound, match=r"no message #9.*session.messages\(\)"):
        s.message(9)


def test_two_sessions_number_their_messages_independently(app: tether.App) -> None:
    a, b = app.session("a"), app.session("b")
    a.add("user", "x")
    b.add("user", "y")
    a.add("user", "z")
    assert [m.seq for m in a.messages()] == [1, 2] and [m.seq for m in b.messages()] == [1]


def test_identical_content_is_stored_once(app: tether.App, backend: Backend) -> None:
    s = app.session("s-1")
    first = s.add("user", BIG)
    for role in ("tool", "user", "assistant", "tool"):
        again = s.add(role, BIG)
        assert again.sha256 == first.sha256 and again.seq > first.seq
    other = app.session("s-2").add("user", BIG)
    assert other.sha256 == first.sha256
    bodies = backend.sql(
        f"SELECT count(*), sum(size) FROM message_bodies WHERE sha256 = '{first.sha256}'"
    )
    assert bodies[0][0] == 1 and bodies[0][1] < len(BIG) + 10
    assert backend.sql("SELECT count(*) FROM messages")[0][0] == 6
    assert all(m.content == BIG for m in s.messages())


def test_an_owner_mismatch_is_a_clear_error(app: tether.App) -> None:
    app.session("s-1", owner="u-7").add("user", "mine")
    with pytest.raises(tether.Conflict, match=r"session 's-1' belongs to owner 'u-7', not 'u-8'"):
        app.session("s-1", owner="u-8")
    same = app.session("s-1")  # no owner given: any owner is fine
    assert same.owner == "u-7" and [m.content for m in same.messages()] == ["mine"]
    app.session("free")
    with pytest.raises(tether.Conflict, match=r"belongs to owner None, not 'u-7'"):
        app.session("free", owner="u-7")


def test_bad_roles_and_ids_say_what_to_pass(app: tether.App) -> None:
    s = app.session("s-1")
    with pytest.raises(ValueError, match=r"role 'bot' is not one of system, user, assistant, tool"):
        s.add("bot", "hi")
    with pytest.raises(tether.EncodeError, match=r"user message of session 's-1'.*object"):
        s.add("user", {"conn": object()})
    with pytest.raises(ValueError, match="non-empty str"):
        app.session("")
    assert s.messages() == []


def test_a_run_in_a_session_records_it_and_sees_it(app: tether.App, backend: Backend) -> None:
    s = app.session("s-1", owner="u-7")
    s.add("user", "what broke?")
    seen: list[Session | None] = []

    @app.agent
    def reply(run: tether.Run) -> str:
        seen.append(run.session)
        assert run.session is not None
        out = run.llm("reply", model, messages=run.session.prompt_view())
        run.session.add("assistant", out["content"])
        return str(out["content"])

    handle = app.run_in(s, reply)
    assert handle.status == "completed" and handle.output == "reply to 1 messages"
    row = app.store.get_run(handle.id)
    assert row.session_id == "s-1" and row.owner == "u-7"
    assert app.events(handle.id)[0].payload()["session"] == "s-1"
    assert seen[0] is not None and seen[0].id == "s-1"
    assert [(m.role, m.run_id) for m in s.messages()] == [("user", None), ("assistant", handle.id)]
    second = app.run_in("s-1", reply)  # by id
    assert s.runs() == [handle.id, second.id]
    assert s.messages()[-1].content == "reply to 2 messages"

    @app.agent
    def alone(run: tether.Run) -> bool:
        return run.session is None

    assert app.run(alone).output is True


class Crash(BaseException):
    """Stands for the process dying mid-run."""


def test_a_replayed_run_adds_its_messages_once(app: tether.App) -> None:
    s = app.session("s-1")
    s.add("user", "go")
    crash = [True]

    @app.agent
    def chat(run: tether.Run) -> int:
        assert run.session is not None
        out = run.llm("reply", model, messages=run.session.prompt_view())
        run.session.add("assistant", out["content"])
        run.session.add("assistant", "and one more thing")
        if crash and crash.pop():
            raise Crash
        return len(run.session.messages())

    with pytest.raises(Crash):
        app.run_in(s, chat)
    run_id = s.runs()[0]
    resumed = tether.open(app.url)  # another process: the session comes from the run row
    resumed.agent(chat)
    try:
        handle = resumed.resume(run_id)
    finally:
        resumed.close()
    assert handle.status == "completed" and handle.output == 3
    assert [m.content for m in s.messages()] == ["go", "reply to 1 messages", "and one more thing"]


def _chat(app: tether.App, s: Session, turns: int) -> list[str]:
    """``turns`` turns: a user message (~1 KB), one model call on the prompt view, the reply.
    Returns the run ids."""

    @app.agent(name="turn")
    def turn(run: tether.Run) -> None:
        assert run.session is not None
        out = run.llm("reply", model, messages=run.session.prompt_view())
        run.session.add("assistant", out["content"])

    ids = []
    for k in range(turns):
        s.add("user", f"turn {k}: " + "x" * 1000)
        ids.append(app.run_in(s, turn).id)
    return ids


def _llm_event(app: tether.App, run_id: str) -> tether.Event:
    return next(e for e in app.events(run_id) if e.type == "step.completed")


def test_a_model_prompt_is_stored_as_references_not_a_copy(app: tether.App) -> None:
    s = app.session("s-1")
    ids = _chat(app, s, 60)
    sizes = [len(_llm_event(app, i).data) for i in ids]
    # The 60th call saw 119 messages (~60 KB), the 3rd saw 5: same event size, give or
    # take the digits of larger numbers.
    assert max(sizes) - sizes[2] < 24, sizes
    assert max(sizes) < 1200
    prompt = _llm_event(app, ids[-1]).payload()["prompt"]
    assert prompt == {"refs": [["m", 1, 119]], "digest": prompt["digest"]}
    assert s.resolve_prompt(prompt) == s.prompt_view()[:119]


def test_prompt_entries_outside_the_session_are_stored_once_by_hash(app: tether.App) -> None:
    s = app.session("s-1")
    s.add("user", "hello")
    system = {"role": "system", "content": "You are the on-call assistant. " * 20}

    @app.agent
    def turn(run: tether.Run) -> None:
        assert run.session is not None
        run.llm("reply", model, messages=[system, *run.session.prompt_view()])

    first, second = app.run_in(s, turn).id, app.run_in(s, turn).id
    p1, p2 = (_llm_event(app, i).payload()["prompt"] for i in (first, second))
    assert p1["refs"][0][0] == "h" and p1["refs"][1] == ["m", 1, 1]
    assert p2["refs"] == p1["refs"]
    assert s.resolve_prompt(p2) == [system, {"role": "user", "content": "hello"}]
    assert len(_llm_event(app, second).data) < 600  # the 600-byte system text is not in it


def test_a_model_call_outside_a_session_records_no_prompt(app: tether.App) -> None:
    @app.agent
    def plain(run: tether.Run) -> Any:
        return run.llm("reply", model, messages=[{"role": "user", "content": "hi"}])

    handle = app.run(plain)
    assert "prompt" not in _llm_event(app, handle.id).payload()


def test_a_tampered_message_fails_prompt_resolution(app: tether.App, backend: Backend) -> None:
    s = app.session("s-1")
    s.add("user", "original")
    prompt = s.prompt_refs(s.prompt_view())
    edited = pack('"edited"').hex()  # a well-formed body, with other content
    literal = f"X'{edited}'" if backend.name == "sqlite" else f"'\\x{edited}'::bytea"
    backend.sql(f"UPDATE message_bodies SET body = {literal}")
    with pytest.raises(tether.StoreError, match="do not rebuild the recorded prompt"):
        app.session("s-1").resolve_prompt(prompt)


def test_messages_as_objects_make_the_same_refs(app: tether.App) -> None:
    s = app.session("s-1")
    msgs: list[Message] = [s.add("user", "a"), s.add("assistant", "b"), s.add("user", "a")]
    refs = s.prompt_refs(msgs)
    assert refs["refs"] == [["m", 1, 3]]
    swapped = s.prompt_refs([msgs[1], msgs[0]])  # "a" after "b" is message 3: one range
    assert swapped["refs"] == [["m", 2, 3]]
    assert s.resolve_prompt(swapped) == [msgs[1].as_prompt(), msgs[0].as_prompt()]
    c = s.add("user", "c")
    reversed_ = s.prompt_refs([c, msgs[1]])  # out of order: two ranges
    assert reversed_["refs"] == [["m", 4, 4], ["m", 2, 2]]


def _stored(backend: Backend) -> int:
    """Bytes of event data and message bodies (what grows with a conversation)."""
    events = backend.sql("SELECT coalesce(sum(length(data)), 0) FROM events")[0][0]
    bodies = backend.sql("SELECT coalesce(sum(size), 0) FROM message_bodies")[0][0]
    return int(events) + int(bodies)


def test_each_turn_stores_what_it_adds_whatever_came_before(
    app: tether.App, backend: Backend
) -> None:
    s = app.session("s-1")

    @app.agent
    def turn(run: tether.Run) -> None:
        assert run.session is not None
        run.session.reply("reply", model, messages=run.session.prompt_view())

    growth = []
    for k in range(40):
        before = _stored(backend)
        s.add("user", f"turn {k:02d}: " + "y" * 1000)
        app.run_in(s, turn)
        growth.append(_stored(backend) - before)
    # turn 40 sends the model 79 messages, turn 2 sends 3: each stores the same
    assert max(growth[1:]) - min(growth[1:]) < 24, growth
    assert growth[-1] < 1800  # ~1 KB of user text, the reply once, the journal entry


def _crash_then_resume(app: tether.App, s: Session, agent: Any) -> tether.RunHandle:
    """Run ``agent`` in ``s`` until it raises Crash, resume it in another App (as another
    process would), and check what the replied "hi" conversation holds afterwards."""
    with pytest.raises(Crash):
        app.run_in(s, agent)
    again = tether.open(app.url)
    again.agent(agent)
    try:
        handle = again.resume(s.runs()[0])
    finally:
        again.close()
    assert handle.output == [model([{"role": "user", "content": "hi"}]), "just text"]
    assert [m.content for m in s.messages()] == ["hi", "reply to 1 messages", "just text"]
    return handle


def test_reply_stores_the_reply_once_and_returns_it_on_replay(
    app: tether.App, backend: Backend
) -> None:
    s = app.session("s-1")
    s.add("user", "hi")
    crash = [True]

    def plain(messages: list[dict[str, Any]]) -> str:
        return "just text"

    @app.agent
    def chat(run: tether.Run) -> list[Any]:
        assert run.session is not None
        out = run.session.reply("reply", model, messages=run.session.prompt_view())
        text = run.session.reply("plain", plain, messages=run.session.prompt_view())
        if crash and crash.pop():
            raise Crash
        return [out, text]

    handle = _crash_then_resume(app, s, chat)
    outputs = [e.payload()["output"] for e in app.events(handle.id) if e.type == "step.completed"]
    assert outputs[0]["content"] == {"$message": 2} and outputs[1] == {"$message": 3}
    assert outputs[0]["usage"] == model([{}])["usage"]
    journal = (
        "SELECT count(*) FROM events WHERE type = 'step.completed' AND data LIKE '%reply to 1%'"
    )
    assert backend.sql(journal) == [(0,)]  # the reply is in the session only
    with pytest.raises(TypeError, match=r"reply\(\) journals a model call, so it needs a run"):
        s.reply("x", model, messages=[])


def test_areply_in_an_async_agent_stores_the_reply_once_and_returns_it_on_replay(
    app: tether.App,
) -> None:
    s = app.session("s-async")
    s.add("user", "hi")
    crash = [True]
    calls: list[int] = []

    async def amodel(messages: list[dict[str, Any]]) -> dict[str, Any]:
        calls.append(len(messages))
        return model(messages)

    @app.agent
    async def achat(run: tether.AsyncRun) -> list[Any]:
        assert run.session is not None
        out = await run.session.areply("reply", amodel, messages=run.session.prompt_view())
        plain = await run.session.areply("plain", lambda messages: "just text", messages=[])
        with pytest.raises(TypeError, match=r"await run.session.areply"):
            run.session.reply("sync", model, messages=[])
        if crash and crash.pop():
            raise Crash
        return [out, plain]

    handle = _crash_then_resume(app, s, achat)
    assert calls == [1]  # the model was called once; the replay read its reply back
    outputs = [e.payload()["output"] for e in app.events(handle.id) if e.type == "step.completed"]
    assert outputs[0]["content"] == {"$message": 2} and outputs[1] == {"$message": 3}

    @app.agent
    def sync_agent(run: tether.Run) -> None:
        assert run.session is not None
        coro = run.session.areply("x", model, messages=[])
        with pytest.raises(TypeError, match=r"areply\(\) journals a model call.*async def"):
            coro.send(None)

    app.run_in(s, sync_agent)


def test_a_fork_of_a_session_run_does_not_add_the_parents_messages_again(
    app: tether.App,
) -> None:
    s = app.session("s-1")
    s.add("user", "start")

    @app.agent
    def two_turns(run: tether.Run, last: str) -> int:
        assert run.session is not None
        run.session.reply("first", model, messages=run.session.prompt_view())
        run.session.add("user", "next")
        run.session.reply("second", model, messages=run.session.prompt_view())
        run.session.add("user", last)
        return len(run.session.messages())

    parent = app.run_in(s, two_turns, "bye")
    assert parent.output == 5
    child = app.fork(parent.id, step="first", input={"args": ["fork says bye"], "kwargs": {}})
    grandchild = app.fork(child, step="first")
    app.resume(child)
    contents = [m.content for m in s.messages()]
    # the fork replays "first" and the add after it; it runs "second" and its adds afresh
    assert contents == [
        "start",
        "reply to 1 messages",
        "next",
        "reply to 3 messages",
        "bye",
        "reply to 5 messages",
        "fork says bye",
    ]
    assert [m.run_id for m in s.messages()[-2:]] == [child, child]
    app.resume(grandchild)  # a fork of a fork: its prefix is its grandparent's
    assert len(s.messages()) == 9 and s.messages()[-1].run_id == grandchild


def test_a_queued_run_in_a_session_is_executed_by_a_worker_in_it(
    app: tether.App, backend: Backend
) -> None:
    s = app.session("s-q", owner="u-3")
    s.add("user", "what broke?")
    crash = [True]

    @app.agent
    def reply(run: tether.Run, tone: str) -> str:
        assert run.session is not None and run.session.id == "s-q"
        out = run.llm("reply", model, messages=run.session.prompt_view())
        run.session.add("assistant", f"{tone}: {out['content']}")
        if crash and crash.pop():  # the first worker dies after the add
            raise tether.LeaseLost("this worker lost its lease")
        return str(out["content"])

    run_id = app.start_in(s, reply, "brief", queue="chat", priority=2)
    row = app.store.get_run(run_id)
    assert (row.status, row.session_id, row.owner, row.queue) == ("queued", "s-q", "u-3", "chat")
    assert app.events(run_id)[0].payload()["session"] == "s-q"
    assert s.runs() == [run_id]
    assert app.start_in("s-q", reply, "brief", queue="chat", run_id=run_id) == run_id

    first = app.worker(queues=["chat"], concurrency=1)
    assert first.run(until_idle=True).completed == 0  # it stopped after adding its reply
    app.store.remove_worker(first.id, expire_leases=True)  # as when a dead worker's expires
    other = tether.open(backend.url)  # another worker process
    other.agent(reply)
    try:
        stats = other.worker(queues=["chat"], concurrency=1).run(until_idle=True)
    finally:
        other.close()
    assert stats.completed == 1
    done = app.get(run_id)
    assert done.status == "completed" and done.output == "reply to 1 messages"
    # the reply recorded by the first worker is not added again by the second
    assert [(m.role, m.content, m.run_id) for m in s.messages()] == [
        ("user", "what broke?", None),
        ("assistant", "brief: reply to 1 messages", run_id),
    ]


def test_a_queued_run_in_a_session_refuses_bad_input_and_creates_nothing(
    app: tether.App,
) -> None:
    @app.agent
    def noop(run: tether.Run) -> None:
        return None

    with pytest.raises(tether.NotFound, match="no agent named 'nope'"):
        app.start_in("s-new", "nope")
    with pytest.raises(ValueError, match="session id"):
        app.start_in("", noop)
    with pytest.raises(tether.EncodeError, match=r"kwargs\.client"):
        app.start_in("s-new", noop, client=object())
    with pytest.raises(ValueError, match="delay"):
        app.start_in("s-new", noop, delay="soon")
    assert app.runs(limit=10) == []
    with pytest.raises(tether.NotFound):
        load_session(app.store, app.clock, "s-new")  # no session was created either
