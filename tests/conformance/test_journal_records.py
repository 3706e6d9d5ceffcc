"""What the journal writes, pinned field by field on both backends: a failure's context, a
retry's time, a step's attempt and duration, a tool's result in the effects table, the
time a waiting run is due, and the positions a fan-out takes. Each assertion here kills
mutants of tether.engine.journal that the behavioural tests let through (tools/mutation.sh)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import tether
from tether import FakeClock
from tether.engine.journal import MAX_INPUT_REPR
from tether.errors import EncodeError, InvalidState, RunFailed

pytestmark = pytest.mark.conformance

T0 = 1_000.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def app(backend: Any, clock: FakeClock) -> Any:
    a = tether.open(backend.url, clock=clock)
    yield a
    a.close()


def _payloads(app: tether.App, run_id: str, type_: str) -> list[dict[str, Any]]:
    return [e.payload() for e in app.events(run_id) if e.type == type_]


def _only_run(app: tether.App) -> str:
    (record,) = app.runs()
    return record.id


# -- a failure's context ---------------------------------------------------------------


def test_a_failed_step_names_its_step_position_kind_input_and_time(
    app: tether.App, clock: FakeClock
) -> None:
    @app.agent
    def agent(run: tether.Run, x: dict[str, str]) -> Any:
        run.step("first", lambda: 1)
        clock.advance(5)

        def boom(value: dict[str, str]) -> None:
            raise ValueError("the service said no")

        return run.step("boom", boom, x, retry=tether.Retry(max_attempts=1))

    with pytest.raises(RunFailed, match=r"failed in step 'boom' \(position 2\)"):
        app.run(agent, {"k": "v"})
    run_id = _only_run(app)
    failure = dict(app.get(run_id).failure or {})
    (failed,) = _payloads(app, run_id, "step.failed")
    assert failure["step"] == "boom"
    assert failure["position"] == 2
    assert failure["kind"] == "step"
    assert failure["input"] == "(({'k': 'v'},), {})"
    assert failure["input_digest"] == failed["digest"] and len(failed["digest"]) == 64
    assert failure["type"] == "ValueError"
    assert failure["message"] == "the service said no"
    assert failure["at"] == T0 + 5
    assert "raise ValueError" in failure["traceback"]
    assert failed["error"]["at"] == T0 + 5
    assert failed["retry_at"] is None and failed["attempt"] == 1


def test_a_long_input_is_cut_in_the_failure_context(app: tether.App) -> None:
    @app.agent
    def agent(run: tether.Run, text: str) -> Any:
        def boom(value: str) -> None:
            raise ValueError("no")

        return run.step("boom", boom, text, retry=tether.Retry(max_attempts=1))

    with pytest.raises(RunFailed):
        app.run(agent, "x" * (MAX_INPUT_REPR * 2))
    shown = app.get(_only_run(app)).failure["input"]  # type: ignore[index]
    assert len(shown) == MAX_INPUT_REPR + 1 and shown.endswith("…")
    assert shown[:-1] == repr((("x" * (MAX_INPUT_REPR * 2),), {}))[:MAX_INPUT_REPR]


def test_an_input_exactly_at_the_limit_is_kept_whole(app: tether.App) -> None:
    @app.agent
    def agent(run: tether.Run, text: str) -> Any:
        def boom(value: str) -> None:
            raise ValueError("no")

        return run.step("boom", boom, text, retry=tether.Retry(max_attempts=1))

    whole = repr((("",), {}))
    text = "y" * (MAX_INPUT_REPR - len(whole))
    with pytest.raises(RunFailed):
        app.run(agent, text)
    shown = app.get(_only_run(app)).failure["input"]  # type: ignore[index]
    assert shown == repr(((text,), {})) and len(shown) == MAX_INPUT_REPR


def test_an_error_outside_any_step_has_no_step_in_its_context(
    app: tether.App, clock: FakeClock
) -> None:
    @app.agent
    def agent(run: tether.Run) -> None:
        run.step("fine", lambda: 1)
        clock.advance(2)
        raise KeyError("the agent's own bug")

    with pytest.raises(RunFailed):
        app.run(agent)
    failure = dict(app.get(_only_run(app)).failure or {})
    assert failure["type"] == "KeyError"
    assert (failure["step"], failure["position"], failure["kind"]) == (None, None, None)
    assert (failure["input"], failure["input_digest"]) == (None, None)
    assert failure["at"] == T0 + 2


def test_an_unstorable_error_message_is_stored_escaped(app: tether.App) -> None:
    """A lone surrogate (a model's truncated emoji) in an error message is stored as its
    escape: the failure is recorded, not lost to an encoding error."""

    @app.agent
    def agent(run: tether.Run) -> None:
        def boom() -> None:
            raise ValueError("half an emoji: \ud83d!")

        run.step("boom", boom, retry=tether.Retry(max_attempts=1))

    with pytest.raises(RunFailed):
        app.run(agent)
    failure = dict(app.get(_only_run(app)).failure or {})
    assert failure["message"] == "half an emoji: \\ud83d!"
    assert "\\ud83d" in failure["traceback"]


def test_a_plain_non_ascii_message_is_kept_as_is(app: tether.App) -> None:
    @app.agent
    def agent(run: tether.Run) -> None:
        def boom() -> None:
            raise ValueError("café ☕ refusé")

        run.step("boom", boom, retry=tether.Retry(max_attempts=1))

    with pytest.raises(RunFailed):
        app.run(agent)
    assert app.get(_only_run(app)).failure["message"] == "café ☕ refusé"  # type: ignore[index]


def test_an_unstorable_result_names_its_path_under_the_result(app: tether.App) -> None:
    @app.agent
    def agent(run: tether.Run) -> Any:
        return run.step("odd", lambda: {"rows": [1, object()]})

    with pytest.raises(RunFailed) as raised:
        app.run(agent)
    err = raised.value.__cause__ or raised.value
    failure = dict(app.get(_only_run(app)).failure or {})
    assert failure["type"] == "tether.errors.EncodeError"
    assert failure["step"] == "odd" and failure["position"] == 1 and failure["kind"] == "step"
    assert "builtins.object at $.rows[1]." in failure["message"]
    assert "step 'odd' (position 1)" in failure["message"]
    if isinstance(err, EncodeError):
        assert err.path == "$.rows[1]" and err.type_name == "builtins.object"


def test_an_unstorable_result_raised_in_the_agent_keeps_its_path(app: tether.App) -> None:
    @app.agent
    def agent(run: tether.Run) -> Any:
        try:
            run.step("odd", lambda: {"a": {"b": object()}})
        except EncodeError as e:
            return {"path": e.path, "type": e.type_name}
        return None

    h = app.run(agent)
    assert h.output == {"path": "$.a.b", "type": "builtins.object"}


def test_a_result_key_that_reads_like_the_result_s_own_path_is_kept_in_the_path(
    app: tether.App,
) -> None:
    @app.agent
    def agent(run: tether.Run) -> Any:
        try:
            run.step("odd", lambda: {"$.output": object()})
        except EncodeError as e:
            return e.path
        return None

    assert app.run(agent).output == "$['$.output']"  # only the leading "$.output" is cut


def test_a_result_holding_a_literal_secret_fails_in_its_step(app: tether.App) -> None:
    @app.agent
    def agent(run: tether.Run) -> Any:
        run.step("first", lambda: 1)
        return run.step("leaky", lambda: {"k": tether.Secret("hunter2")})

    with pytest.raises(RunFailed):
        app.run(agent)
    failure = dict(app.get(_only_run(app)).failure or {})
    assert (failure["step"], failure["position"], failure["kind"]) == ("leaky", 2, "step")
    assert "step 'leaky''s result holds a tether.Secret at $.k" in failure["message"]


# -- retries and records -------------------------------------------------------------------


def test_a_retry_is_due_its_delay_after_the_failure(app: tether.App, clock: FakeClock) -> None:
    attempts: list[int] = []

    @app.agent
    def agent(run: tether.Run) -> Any:
        def flaky() -> str:
            attempts.append(1)
            clock.advance(3)
            if len(attempts) == 1:
                raise ConnectionError("reset")
            return "ok"

        return run.step("flaky", flaky, retry=tether.Retry(max_attempts=3, backoff=7, jitter=0))

    app.inline_sleep_max = 1_000
    h = app.run(agent)
    assert h.output == "ok"
    (failed,) = _payloads(app, h.id, "step.failed")
    assert failed["retry_at"] == T0 + 3 + 7
    assert failed["attempt"] == 1
    (done,) = _payloads(app, h.id, "step.completed")
    assert done["attempt"] == 2
    assert done["pos"] == 1 and done["kind"] == "step" and done["name"] == "flaky"


def test_the_next_attempt_waits_for_the_recorded_retry_time(
    app: tether.App, clock: FakeClock
) -> None:
    seen: list[float] = []

    @app.agent
    def agent(run: tether.Run) -> Any:
        def flaky() -> str:
            seen.append(clock.now())
            if len(seen) == 1:
                clock.advance(1)
                raise ConnectionError("reset")
            return "ok"

        return run.step(
            "flaky",
            flaky,
            retry=tether.Retry(max_attempts=2, backoff=500, max_delay=1_000, jitter=0),
        )

    h = app.run(agent)
    assert h.output == "ok"
    (failed,) = _payloads(app, h.id, "step.failed")
    assert failed["retry_at"] == T0 + 1 + 500
    assert seen == [T0, T0 + 1 + 500]


def test_a_step_records_its_duration_in_seconds(app: tether.App) -> None:
    """Measured on the process's timer, not the injected clock: only its form is pinned."""

    @app.agent
    def agent(run: tether.Run) -> Any:
        return [run.step("one", lambda: 1), run.step("two", lambda: 2)]

    h = app.run(agent)
    for done in _payloads(app, h.id, "step.completed"):
        d = done["duration"]
        assert isinstance(d, float) and d >= 0 and d == round(d, 6)


# -- the effects table ---------------------------------------------------------------------


def test_a_tool_s_result_is_kept_with_its_key(app: tether.App) -> None:
    @app.tool
    def send(to: str) -> dict[str, Any]:
        return {"sent": to, "id": 7}

    @app.agent
    def agent(run: tether.Run) -> Any:
        return run.tool(send, "ada")

    h = app.run(agent)
    (done,) = _payloads(app, h.id, "step.completed")
    effect = app.effect(done["key"])
    assert effect is not None and effect.status == "completed"
    assert effect.result is not None and json.loads(effect.result) == {"sent": "ada", "id": 7}
    assert (effect.run_id, effect.position, effect.tool) == (h.id, 1, "send")


# -- waiting ---------------------------------------------------------------------------------


def test_a_sleeping_run_is_due_when_its_timer_ends(app: tether.App) -> None:
    @app.agent
    def agent(run: tether.Run) -> None:
        run.sleep(3_600)

    h = app.run(agent)
    assert h.status == "waiting"
    record = app.record(h.id)
    assert record.available_at == T0 + 3_600 and record.waiting_for == "timer"
    assert record.lease_owner is None


def test_an_approval_with_a_timeout_is_due_at_its_timeout(app: tether.App) -> None:
    @app.agent
    def agent(run: tether.Run) -> Any:
        return run.approve("ship", timeout=600)

    h = app.run(agent)
    assert h.status == "waiting"
    assert h.waiting is not None and "ship" in json.dumps(h.waiting)
    record = app.record(h.id)
    assert record.available_at == T0 + 600 and record.waiting_for == "approval:ship"


# -- positions -------------------------------------------------------------------------------


def test_a_fan_out_takes_one_position_per_branch_and_later_calls_follow(app: tether.App) -> None:
    @app.agent
    def agent(run: tether.Run) -> Any:
        run.step("before", lambda: 0)
        run.map("item", lambda x: x * 2, [1, 2, 3])
        run.parallel(lambda: run.step("p", lambda: "p"), lambda: run.step("q", lambda: "q"))
        return run.step("after", lambda: 9)

    h = app.run(agent)
    steps = [(s.position, s.name) for s in app.get(h.id).steps]
    assert steps[0] == (1, "before")
    assert [p for p, _ in steps] == [1, 2, 3, 4, 5, 6, 7]
    assert steps[-1] == (7, "after")
    assert {n for _, n in steps[4:6]} == {"p", "q"}
    again = app.resume(h.id)  # a replay takes the same positions: nothing runs again
    assert again.output == 9


def test_a_fan_out_inside_a_branch_is_refused(app: tether.App) -> None:
    @app.agent
    def agent(run: tether.Run) -> Any:
        return run.parallel(lambda: run.parallel(lambda: run.step("inner", lambda: 1)))

    with pytest.raises((RunFailed, InvalidState), match=r"inside a branch of run\.parallel"):
        app.run(agent)


def _held(hold: asyncio.Event | None, value: str) -> Any:
    """An async call that returns ``value`` once ``hold`` is set (at once without one)."""

    async def call() -> str:
        if hold is not None:
            await asyncio.wait_for(hold.wait(), 30)
        return value

    return call


def test_a_concurrent_task_s_second_call_while_another_is_in_flight_is_refused(
    app: tether.App,
) -> None:
    @app.agent
    async def agent(run: tether.AsyncRun) -> Any:
        hold = asyncio.Event()
        slow = _held(hold, "slow")

        async def branch() -> str:
            await run.step("one", lambda: 1)
            try:
                return await run.step("two", lambda: 2)  # "slow" is still in flight
            finally:
                hold.set()

        return await asyncio.gather(run.step("slow", slow), branch())

    with pytest.raises((RunFailed, InvalidState), match="second journaled call of a concurrent"):
        app.run(agent)


def test_a_concurrent_task_may_make_calls_one_after_another_when_nothing_else_is_in_flight(
    app: tether.App,
) -> None:
    @app.agent
    async def agent(run: tether.AsyncRun) -> Any:
        async def branch() -> list[int]:
            return [await run.step("one", lambda: 1), await run.step("two", lambda: 2)]

        first = await asyncio.gather(branch())
        second = await asyncio.create_task(branch())
        return [first, second, await run.step("three", lambda: 3)]

    h = app.run(agent)
    assert h.output == [[[1, 2]], [1, 2], 3]
    assert [(s.position, s.name) for s in app.get(h.id).steps] == [
        (1, "one"), (2, "two"), (3, "one"), (4, "two"), (5, "three"),
    ]  # fmt: skip


def test_a_fan_out_from_another_thread_is_refused_by_its_name(app: tether.App) -> None:
    @app.agent
    def agent(run: tether.Run) -> Any:
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            fan = pool.submit(run.parallel, lambda: run.step("a", lambda: 1), lambda: 2)
            return fan.result()

    with pytest.raises(
        (RunFailed, InvalidState), match=r"fan-out 'of 2 branches' was called from a thread"
    ):
        app.run(agent)


def test_a_taken_signal_names_the_event_that_took_it(app: tether.App, backend: Any) -> None:
    @app.agent
    def agent(run: tether.Run) -> Any:
        run.step("a", lambda: 1)  # a fast step's record waits for the next append
        return run.wait("go")

    rid = app.start(agent)
    app.signal(rid, "go", {"n": 1})  # kept until the wait takes it
    assert app.resume(rid).output == {"n": 1}
    (took,) = [e for e in app.events(rid) if e.type == "step.completed" and e.payload()["pos"] == 2]
    assert backend.sql("SELECT taken_seq FROM signals") == [(took.seq,)]


# -- calls of concurrent asyncio tasks ---------------------------------------------------------


def test_a_task_may_take_a_second_call_while_only_its_own_first_is_in_flight(
    app: tether.App,
) -> None:
    @app.agent
    async def agent(run: tether.AsyncRun) -> Any:
        async def branch() -> list[int]:
            return await asyncio.gather(run.step("one", lambda: 1), run.step("two", lambda: 2))

        return await asyncio.create_task(branch())

    assert app.run(agent).output == [1, 2]


def test_the_agent_s_own_calls_are_never_refused_while_a_task_s_call_is_in_flight(
    app: tether.App,
) -> None:
    @app.agent
    async def agent(run: tether.AsyncRun) -> Any:
        hold = asyncio.Event()
        slow = _held(hold, "s")

        async def sub() -> str:
            return await run.step("side", slow)  # another task's call, in flight till "b"

        side = asyncio.create_task(sub())
        await asyncio.sleep(0)  # the task takes its position first
        a = await run.step("a", lambda: "a")
        b = run.step("b", lambda: "b")  # the agent's second call while "side" runs
        hold.set()
        return [a, await b, await side]

    h = app.run(agent)
    assert h.output == ["a", "b", "s"]
    assert [s.name for s in app.get(h.id).steps] == ["side", "a", "b"]


def test_a_task_with_a_call_still_in_flight_counts_as_in_flight(app: tether.App) -> None:
    """Task one has two calls in flight and one of them ends: task two's second call is
    still refused, since when it is taken depends on when one's other call ends."""

    @app.agent
    async def agent(run: tether.AsyncRun) -> Any:
        first_done, hold = asyncio.Event(), asyncio.Event()
        quick, slow = _held(None, "q"), _held(hold, "s")

        async def one() -> list[str]:
            q = run.step("quick", quick)
            s = run.step("slow", slow)
            out = await q
            first_done.set()
            return [out, await s]

        async def two() -> str:
            await run.step("t1", lambda: 1)
            await asyncio.wait_for(first_done.wait(), 30)
            try:
                return await run.step("t2", lambda: 2)  # "slow" of task one is in flight
            finally:
                hold.set()

        return await asyncio.gather(asyncio.create_task(one()), asyncio.create_task(two()))

    with pytest.raises((RunFailed, InvalidState), match="second journaled call of a concurrent"):
        app.run(agent)
