"""Traces (tether.open(tracing=...)): the spans of runs, recorded with the OpenTelemetry
SDK's in-memory exporter, on both stores: the span tree and its GenAI and tether
attributes, a later execution in the same trace with its replayed calls marked, errors,
fork lineage, a queued run's trace, and content only when asked for, never a secret."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from _conformance import Backend

import tether

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import NoOpTracer, NoOpTracerProvider, StatusCode

pytestmark = pytest.mark.conformance

TOKEN = "tok-4c1d9e7f2a6b"  # a Secret's value: must appear in no span
API_KEY = "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"  # the default redaction rules match it


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def _open(backend: Backend, exporter: InMemorySpanExporter, **tracing: Any) -> tether.App:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return tether.open(backend.url, tracing=tether.Tracing(provider, **tracing))


@pytest.fixture
def app(backend: Backend, spans: InMemorySpanExporter) -> Iterator[tether.App]:
    a = _open(backend, spans)
    yield a
    a.close()


def _model(**kwargs: Any) -> dict[str, Any]:
    return {"text": "ok", "usage": {"input_tokens": 12, "output_tokens": 5}}


def _tree(app: tether.App) -> Any:
    @app.tool(risk="read")
    def lookup(order: str) -> dict[str, Any]:
        return {"order": order, "total": 30}

    @app.agent
    def refund(run: tether.Run, order: str) -> Any:
        found = run.step("parse", str.upper, order)
        run.llm("ask", _model, model="gpt-test", messages=[{"role": "user", "content": order}])
        info = run.tool(lookup, found)
        run.approve("send", payload=info)
        return info["total"]

    return refund


def _by_name(spans: list[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for s in spans:
        out.setdefault(s.name, []).append(s)
    return out


def test_a_run_is_a_tree_of_genai_spans_and_its_resume_continues_the_trace(
    app: tether.App, spans: InMemorySpanExporter
) -> None:
    handle = app.run(_tree(app), "o-1")
    assert handle.status == "waiting"
    first = spans.get_finished_spans()
    names = [s.name for s in first]
    calls = ["step parse", "chat gpt-test", "execute_tool lookup", "approve send"]
    assert names == [*calls, "invoke_agent refund"]
    root = first[-1]
    assert root.parent is None
    assert all(
        s.parent is not None and s.parent.span_id == root.context.span_id for s in first[:-1]
    )
    assert dict(root.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "refund",
        "gen_ai.agent.id": "refund",
        "tether.run.id": handle.id,
        "tether.run.status": "waiting",
    }
    step, chat, tool, approve = (dict(s.attributes or {}) for s in first[:-1])
    assert step["tether.position"] == 1 and step["tether.step.kind"] == "step"
    assert step["tether.attempt"] == 1 and step["tether.replayed"] is False
    assert step["tether.idempotency_key"].startswith(f"{handle.id}:1:parse:")
    assert "gen_ai.operation.name" not in step
    assert chat["gen_ai.operation.name"] == "chat"
    assert chat["gen_ai.request.model"] == "gpt-test"
    assert (chat["gen_ai.usage.input_tokens"], chat["gen_ai.usage.output_tokens"]) == (12, 5)
    assert first[1].kind.name == "CLIENT"
    assert tool["gen_ai.operation.name"] == "execute_tool"
    assert tool["gen_ai.tool.name"] == "lookup" and tool["tether.position"] == 3
    assert tool["gen_ai.tool.call.id"] == tool["tether.idempotency_key"]
    assert approve["tether.waiting"] == "approval:send" and approve["tether.position"] == 4
    # content is off by default
    everything = [k for s in first for k in (s.attributes or {})]
    assert not [k for k in everything if k.startswith(("gen_ai.input", "gen_ai.output"))]
    assert "gen_ai.tool.call.arguments" not in everything and "tether.input" not in everything
    # the trace context is stored with the run
    created = tether.decode(app.events(handle.id)[0].data)
    _version, trace_id, span_id, _flags = created["trace"].split("-")
    assert trace_id == f"{root.context.trace_id:032x}"
    assert span_id == f"{root.context.span_id:016x}"

    spans.clear()
    app.approve(handle.id, "send", by="alice")
    assert app.resume(handle.id).output == 30
    second = spans.get_finished_spans()
    root2 = second[-1]
    assert root2.name == "invoke_agent refund"
    assert root2.context.trace_id == root.context.trace_id  # one trace
    assert root2.parent is not None and root2.parent.span_id == root.context.span_id
    assert root2.attributes is not None and root2.attributes["tether.run.status"] == "completed"
    replayed = second[:-1]
    assert [s.name for s in replayed] == calls
    for s in replayed:
        assert s.attributes is not None and s.attributes["tether.replayed"] is True
        assert s.end_time == s.start_time  # not timed again: it ran before
        assert s.parent is not None and s.parent.span_id == root2.context.span_id


def test_failures_and_retries_are_recorded_on_their_spans(
    app: tether.App, spans: InMemorySpanExporter
) -> None:
    tries: list[int] = []

    def flaky() -> str:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("reset by peer")
        return "ok"

    def broken() -> None:
        raise ValueError("bad row 7")

    @app.agent
    def etl(run: tether.Run) -> None:
        run.step("fetch", flaky, retry=tether.Retry(max_attempts=2, backoff=0.0, jitter=0.0))
        run.step("load", broken)

    with pytest.raises(tether.RunFailed):
        app.run(etl)
    got = _by_name(spans.get_finished_spans())
    fetch, load, root = got["step fetch"][0], got["step load"][0], got["invoke_agent etl"][0]
    assert fetch.status.status_code == StatusCode.UNSET
    assert fetch.attributes is not None and fetch.attributes["tether.attempt"] == 2
    assert [e.name for e in fetch.events] == ["exception", "tether.wait"]
    assert fetch.events[0].attributes is not None
    assert fetch.events[0].attributes["exception.type"] == "ConnectionError"
    assert load.status.status_code == StatusCode.ERROR
    assert "bad row 7" in (load.status.description or "")
    assert [e.name for e in load.events] == ["exception"]
    assert root.status.status_code == StatusCode.ERROR
    assert any(e.name == "exception" for e in root.events)


def test_waits_sleeps_and_a_fork_lineage(app: tether.App, spans: InMemorySpanExporter) -> None:
    @app.agent
    def patient(run: tether.Run) -> Any:
        run.sleep(0.01, name="nap")
        got = run.wait("go")
        run.step("after", lambda: got)
        return got

    handle = app.run(patient)
    assert handle.status == "waiting"
    app.signal(handle.id, "go", {"n": 1})
    assert app.resume(handle.id).output == {"n": 1}
    got = _by_name(spans.get_finished_spans())
    nap = got["sleep nap"]
    assert [s.attributes["tether.replayed"] for s in nap if s.attributes] == [False, True]
    wait = got["wait go"]
    assert [dict(s.attributes or {}).get("tether.waiting") for s in wait] == ["signal:go", None]
    assert [s.attributes["tether.replayed"] for s in wait if s.attributes] == [False, False]
    first_root = got["invoke_agent patient"][0]

    spans.clear()
    fork = app.fork(handle.id, step="after", when="before")
    assert app.resume(fork).status == "completed"
    forked = _by_name(spans.get_finished_spans())
    root = forked["invoke_agent patient"][0]
    assert root.attributes is not None and root.attributes["tether.fork.parent"] == handle.id
    assert root.attributes["tether.fork.at"] == 2
    assert root.context.trace_id != first_root.context.trace_id  # a run of its own…
    assert [link.context.trace_id for link in root.links] == [first_root.context.trace_id]


def test_decisions_task_variables_and_undo_calls_have_spans(
    app: tether.App, spans: InMemorySpanExporter
) -> None:
    undone: list[str] = []

    @app.tool(risk="write", compensate=lambda booking, order: undone.append(booking))
    def book(order: str) -> str:
        return f"booking-{order}"

    @app.agent
    def trip(run: tether.Run, order: str) -> Any:
        run.decide("route", "rail", why="cheaper")
        run.vars["order"] = order
        run.tool(book, order)
        run.approve("pay")  # waits: denied below, which compensates
        return "paid"

    handle = app.run(trip, "o-1")
    assert handle.status == "waiting"
    app.deny(handle.id, "pay", by="ann")  # ApprovalDenied fails the run: its booking undone
    with pytest.raises(tether.RunFailed):  # replays the decision, the var and the booking
        app.resume(handle.id)
    assert undone == ["booking-o-1"]
    got = _by_name(spans.get_finished_spans())
    for name in ("decide route", "var vars.order"):
        replayed = [dict(s.attributes or {})["tether.replayed"] for s in got[name]]
        assert replayed[0] is False and set(replayed[1:]) == {True}, (name, replayed)
    undo = got["compensate undo:book"]
    assert len(undo) == 1 and undo[0].attributes is not None
    assert undo[0].attributes["tether.replayed"] is False
    assert undo[0].attributes["tether.step.kind"] == "compensate"


class _Crash(BaseException):
    """Stands for the process dying during an undo (not an Exception: nothing records it)."""


def test_an_undo_done_before_a_crash_is_a_replayed_span_when_the_compensation_resumes(
    app: tether.App, spans: InMemorySpanExporter
) -> None:
    undone: list[str] = []

    def cancel(booking: str, order: str) -> None:
        if order == "o-1" and "crashed" not in undone:
            undone.append("crashed")
            raise _Crash
        undone.append(booking)

    @app.tool(risk="write", compensate=cancel)
    def book(order: str) -> str:
        return f"booking-{order}"

    @app.agent
    def trip(run: tether.Run) -> Any:
        run.tool(book, "o-1")
        run.tool(book, "o-2")
        raise ValueError("no seats")

    with pytest.raises(_Crash):  # o-2 undone, then the process "dies" undoing o-1
        app.run(trip)
    (record,) = app.runs()
    with pytest.raises(tether.RunFailed):
        app.resume(record.id)
    assert undone == ["booking-o-2", "crashed", "booking-o-1"]
    failure = app.get(record.id).failure
    assert failure is not None and "compensation_failures" not in failure
    undo = [dict(s.attributes or {}) for s in _by_name(spans.get_finished_spans())[
        "compensate undo:book"
    ]]  # fmt: skip
    assert [(a["tether.position"], a["tether.replayed"]) for a in undo] == [
        (3, False), (4, False), (3, True), (4, False),  # the crashed call's span, then again
    ]  # fmt: skip


def test_an_undo_s_content_is_the_recorded_result_and_arguments(
    backend: Backend, spans: InMemorySpanExporter
) -> None:
    app = _open(backend, spans, capture_content=True)
    try:

        def cancel(booking: str, order: str, *, seats: int) -> None: ...

        @app.tool(risk="write", compensate=cancel)
        def book(order: str, *, seats: int) -> str:
            return f"booking-{order}"

        @app.agent
        def trip(run: tether.Run) -> Any:
            run.tool(book, "o-7", seats=2)
            raise ValueError("no seats")

        with pytest.raises(tether.RunFailed):
            app.run(trip)
    finally:
        app.close()
    (undo,) = _by_name(spans.get_finished_spans())["compensate undo:book"]
    assert dict(undo.attributes or {})["tether.input"] == '[["booking-o-7","o-7"],{"seats":2}]'


def test_a_queued_run_is_traced_from_its_enqueue(
    app: tether.App, spans: InMemorySpanExporter
) -> None:
    @app.agent
    def job(run: tether.Run, n: int) -> int:
        return int(run.step("inc", lambda: n + 1))

    run_id = app.start(job, 1)
    app.worker(concurrency=1, poll=0.01).run(until_idle=True, install_signals=False)
    assert app.get(run_id).output == 2
    got = _by_name(spans.get_finished_spans())
    enq, root = got["enqueue job"][0], got["invoke_agent job"][0]
    assert enq.attributes is not None and enq.attributes["tether.run.id"] == run_id
    assert root.context.trace_id == enq.context.trace_id
    assert root.parent is not None and root.parent.span_id == enq.context.span_id


def test_a_run_executed_in_one_go_by_id_is_traced_once(
    app: tether.App, spans: InMemorySpanExporter
) -> None:
    import asyncio

    from tether.integrations import execute

    @app.agent
    async def job(run: tether.AsyncRun, n: int) -> int:
        return int(await run.step("inc", lambda: n + 1))

    first = asyncio.run(execute(app, "job", (1,), "one-go", "inline"))
    again = asyncio.run(execute(app, "job", (1,), "one-go", "inline"))  # exists: resumed
    assert (first.output, again.output, app.record("one-go").queue) == (2, 2, "inline")
    roots = _by_name(spans.get_finished_spans())["invoke_agent job"]
    assert len(roots) == 1 and roots[0].status.status_code != StatusCode.ERROR  # no refusal
    d = app._registry.resolve("job")
    with pytest.raises(tether.Conflict):  # created meanwhile elsewhere: its span ends refused
        app._executor.create(d, (1,), {}, run_id="one-go")
    roots = _by_name(spans.get_finished_spans())["invoke_agent job"]
    assert len(roots) == 2 and roots[1].status.status_code == StatusCode.ERROR


def test_content_only_when_asked_and_never_a_secret(
    backend: Backend, spans: InMemorySpanExporter
) -> None:
    app = _open(backend, spans, capture_content=True)
    try:

        @app.tool(risk="read", secret=["token"])
        def call_api(path: str, token: str) -> dict[str, Any]:
            return {"path": path, "echo": f"used {token}"}

        def chat(messages: list[Any], model: str) -> dict[str, Any]:
            return {"text": f"your key is {API_KEY}", "usage": {"input_tokens": 1}}

        @app.agent
        def agent(run: tether.Run) -> Any:
            run.step("auth", len, tether.Secret(TOKEN))
            run.llm("ask", chat, messages=[{"role": "user", "content": "hi"}], model="m1")
            return run.tool(call_api, "/orders", TOKEN)

        assert app.run(agent).status == "completed"
    finally:
        app.close()
    got = _by_name(spans.get_finished_spans())
    chat_attrs = dict(got["chat m1"][0].attributes or {})
    assert '"content":"hi"' in chat_attrs["gen_ai.input.messages"]
    assert "your key is" in chat_attrs["gen_ai.output.messages"]
    tool_attrs = dict(got["execute_tool call_api"][0].attributes or {})
    assert "/orders" in tool_attrs["gen_ai.tool.call.arguments"]
    assert "used" in tool_attrs["gen_ai.tool.call.result"]
    step_attrs = dict(got["step auth"][0].attributes or {})
    assert step_attrs["tether.output"] == str(len(TOKEN))
    dumped = repr(
        [(s.attributes, [e.attributes for e in s.events]) for g in got.values() for s in g]
    )
    assert TOKEN not in dumped
    assert API_KEY not in dumped


def test_a_no_op_tracer_provider_traces_nothing_and_stores_no_context(backend: Backend) -> None:
    app = tether.open(backend.url, tracing=tether.Tracing(NoOpTracerProvider()))
    try:

        @app.agent
        def one(run: tether.Run) -> int:
            return int(run.step("s", lambda: 1))

        handle = app.run(one)
        assert handle.output == 1
        assert "trace" not in tether.decode(app.events(handle.id)[0].data)
        assert app.resume(handle.id).output == 1
    finally:
        app.close()


class _Counting(NoOpTracer):
    """The API's no-op tracer, listing the spans it is asked for."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def start_span(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.asked.append(name)
        return super().start_span(name, *args, **kwargs)


class _CountingProvider(NoOpTracerProvider):
    def __init__(self) -> None:
        self.tracer = _Counting()

    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        return self.tracer


def test_when_nothing_listens_only_the_run_span_is_asked_for(backend: Backend) -> None:
    # a no-op tracer makes no span of its own (here: it hands back the caller's): the
    # calls are not traced, and the agent's own spans still nest in the caller's
    noop, spans = _CountingProvider(), InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    mine = provider.get_tracer("mine")
    app = tether.open(backend.url, tracing=tether.Tracing(noop))

    def nested() -> int:
        with mine.start_as_current_span("mine"):
            return 1

    @app.agent
    def quiet(run: tether.Run) -> int:
        return int(run.step("a", nested)) + int(run.step("b", nested))

    try:
        with mine.start_as_current_span("caller") as caller:
            assert app.run(quiet).output == 2
    finally:
        app.close()
    assert noop.tracer.asked == ["invoke_agent quiet"]
    got = _by_name(spans.get_finished_spans())
    assert [s.parent.span_id for s in got["mine"] if s.parent] == [caller.context.span_id] * 2


class _DropRuns(Sampler):
    """Drops the runs' spans, samples every other."""

    def should_sample(
        self,
        parent_context: Any,
        trace_id: int,
        name: str,
        kind: Any = None,
        attributes: Any = None,
        links: Any = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        drop = name.startswith("invoke_agent")
        return SamplingResult(Decision.DROP if drop else Decision.RECORD_AND_SAMPLE, attributes)

    def get_description(self) -> str:
        return "DropRuns"


def test_a_sampler_is_asked_for_every_call_when_it_drops_the_run(backend: Backend) -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider(sampler=_DropRuns())
    provider.add_span_processor(SimpleSpanProcessor(spans))
    app = tether.open(backend.url, tracing=tether.Tracing(provider))

    @app.agent
    def sampled(run: tether.Run) -> int:
        return int(run.step("a", lambda: 1)) + int(run.step("b", lambda: 2))

    try:
        handle = app.run(sampled)
    finally:
        app.close()
    got = spans.get_finished_spans()
    assert [s.name for s in got] == ["step a", "step b"]
    assert got[0].context.trace_id == got[1].context.trace_id
    assert got[0].parent is not None and got[0].parent == got[1].parent  # the dropped run's
    assert (got[1].attributes or {})["tether.run.id"] == handle.id


def test_tracing_is_refused_unless_true_false_or_a_tracing(backend: Backend) -> None:
    with pytest.raises(tether.InvalidInput, match="tracing is True"):
        tether.open(backend.url, tracing="yes")
    with pytest.raises(tether.InvalidInput, match="capture_content"):
        tether.Tracing(capture_content="yes")  # type: ignore[arg-type]


def test_async_agents_and_fan_outs_are_traced_alike(backend: Backend) -> None:
    import asyncio

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    app = tether.open(backend.url, tracing=tether.Tracing(provider))

    async def fetch(n: int) -> int:
        await asyncio.sleep(0)
        return n * 10

    def nested() -> None:  # the step's span is current inside the call: ours nest in it
        with provider.get_tracer("mine").start_as_current_span("mine"):
            pass

    @app.agent
    async def gather(run: tether.AsyncRun) -> list[int]:
        got = await asyncio.gather(run.step("a", fetch, 1), run.step("b", fetch, 2))
        await run.step("nested", nested)
        return list(got) + await run.map("m", lambda x: x + 1, [5, 6])

    try:
        assert app.run(gather).output == [10, 20, 6, 7]
    finally:
        app.close()
    got = _by_name(spans.get_finished_spans())
    root = got["invoke_agent gather"][0]
    calls = ["step a", "step b", "step nested", "step m[0]", "step m[1]"]
    for position, name in enumerate(calls, 1):
        (span,) = got[name]
        assert span.parent is not None and span.parent.span_id == root.context.span_id, name
        assert span.attributes is not None and span.attributes["tether.position"] == position
    (mine,) = got["mine"]
    assert mine.parent is not None
    assert mine.parent.span_id == got["step nested"][0].context.span_id
