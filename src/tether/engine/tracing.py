"""OpenTelemetry traces of runs (``tether[otel]``): GenAI-convention spans, off unless set.

``tether.open(url, tracing=True)`` traces with the global tracer provider,
``tracing=tether.Tracing(provider, capture_content=True)`` with ``provider`` (and the
prompts, arguments and results as span attributes). Nothing here imports OpenTelemetry
until tracing is configured: with it off, the engine checks ``journal.trace`` once per
call and pays nothing else. When nothing listens (the tracer makes no span of its own
for a run: the API's no-op, a disabled tracer) the run's calls are not traced either; a
sampler that drops a run is still asked about each of its calls.

One execution of a run is an ``invoke_agent {agent}`` span; each call is its child:
``chat {model}`` (``run.llm``), ``execute_tool {tool}`` (``run.tool``), ``step {name}``,
``approve``, ``wait`` and ``sleep {name}``. A run's first execution stores its span's
W3C ``traceparent`` in the ``run.created`` event, so every later execution (a resume in
another process, a worker's claim) is a child of it, in the same trace; a call the log
answers is a zero-length span marked ``tether.replayed=true``, never timed again.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from tether.engine.calls import _CURRENT, Call, Core, Slot, StepInfo, Suspended
from tether.errors import EncodeError, InvalidInput
from tether.model import codec, redact
from tether.model.steps import usage_of
from tether.version import __version__

if TYPE_CHECKING:
    from tether.engine.registry import AgentDef
    from tether.model.state import RunState
    from tether.store import RunRecord, Store

_P = TypeVar("_P")
_R = TypeVar("_R")
_NAMES = {"llm": "chat", "tool": "execute_tool"}  # kind -> gen_ai.operation.name


class Tracing:
    """How runs are traced: ``tracer_provider`` (None: OpenTelemetry's global one) and
    whether span attributes carry content (``capture_content``: prompts, tool arguments
    and results, step inputs and outputs: as stored, so never a Secret's value, and
    redacted by the process's rules). Pass as ``tether.open(url, tracing=...)``."""

    __slots__ = ("_tracer", "capture_content", "tracer_provider")

    def __init__(self, tracer_provider: Any = None, *, capture_content: bool = False) -> None:
        if not isinstance(capture_content, bool):
            raise InvalidInput(
                f"Tracing(capture_content=...) is True or False, not {capture_content!r}"
            )
        self.tracer_provider = tracer_provider
        self.capture_content = capture_content
        self._tracer: Any = None

    def __repr__(self) -> str:
        return f"Tracing({self.tracer_provider!r}, capture_content={self.capture_content!r})"


def configured(value: Any) -> Tracing | None:
    """``tether.open(tracing=...)``: None/False off, True the global provider, or a
    Tracing; checked (OpenTelemetry importable) before the store is opened."""
    if value is None or value is False:
        return None
    if value is True:
        value = Tracing()
    if not isinstance(value, Tracing):
        raise InvalidInput(
            f"tracing is True (the global tracer provider), False, or "
            f"tether.Tracing(tracer_provider, capture_content=...), not {value!r}"
        )
    tracer_of(value)  # says now when OpenTelemetry is missing
    return value


def tracer_of(tracing: Tracing) -> Any:
    """The tracer ``tracing``'s provider gives tether (made once)."""
    if tracing._tracer is None:
        try:
            from opentelemetry import trace
        except ImportError:
            raise InvalidInput("tracing needs OpenTelemetry: pip install 'tether[otel]'") from None
        provider = tracing.tracer_provider or trace.get_tracer_provider()
        tracing._tracer = provider.get_tracer("tether", __version__)
    return tracing._tracer


def start_run(
    tracing: Tracing,
    agent: str,
    run_id: str,
    *,
    session: str | None = None,
    version: str | None = None,
) -> RunTrace:
    """The root span of a new run's first execution, a child of the caller's span."""
    return RunTrace(tracing, agent, run_id, None, session=session, version=version)


def enqueued(tracing: Tracing, agent: str, run_id: str, queue: str) -> str | None:
    """An ``enqueue {agent}`` span (a child of the caller's) ended at once: the
    traceparent a queued run stores, whose executions are its children."""
    from opentelemetry import trace

    attrs = {"tether.run.id": run_id, "tether.queue": queue, "gen_ai.agent.name": agent}
    span = tracer_of(tracing).start_span(f"enqueue {agent}", attributes=attrs)
    span.end()
    return _traceparent(trace.set_span_in_context(span))


def resume_run(
    tracing: Tracing, store: Store, d: AgentDef, record: RunRecord, state: RunState
) -> RunTrace:
    """The root span of a later execution: a child of the span whose traceparent the
    run's ``run.created`` stored; a fork's (which copied its parent's): a new trace,
    linked to it."""
    first = store.read_events(record.id, upto=1)
    stored = codec.decode(first[0].data).get("trace") if first else None
    return RunTrace(
        tracing,
        d.name,
        record.id,
        stored if isinstance(stored, str) else None,
        session=record.session_id,
        version=d.version,
        fork_parent=state.parent_id,
        fork_at=state.fork_position,
    )


class RunTrace:
    """One execution's root span and its calls' spans (``journal.trace``)."""

    def __init__(
        self,
        tracing: Tracing,
        agent: str,
        run_id: str,
        parent: str | None,
        *,
        session: str | None = None,
        version: str | None = None,
        fork_parent: str | None = None,
        fork_at: int | None = None,
    ) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._trace, self._context = trace, context
        self.tracer = tracer_of(tracing)
        self.content = tracing.capture_content
        self.run_id = run_id
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
            "gen_ai.agent.id": f"{agent}@{version}" if version else agent,
            "tether.run.id": run_id,
        }
        if session is not None:
            attrs["gen_ai.conversation.id"] = session
        links = []
        ctx = None  # the caller's context: a new run joins the caller's trace
        if parent is not None:
            stored = TraceContextTextMapPropagator().extract({"traceparent": parent})
            if fork_parent is None:
                ctx = stored
            else:  # a fork copied its parent's run.created: its own trace, linked
                ctx = context.Context()
                links.append(trace.Link(trace.get_current_span(stored).get_span_context()))
        if fork_parent is not None:
            attrs["tether.fork.parent"] = fork_parent
            attrs["tether.fork.at"] = fork_at
        self.root = self.tracer.start_span(
            f"invoke_agent {agent}", context=ctx, attributes=attrs, links=links
        )
        self.ctx = trace.set_span_in_context(self.root)
        # nothing listens when the tracer made no span of its own (the API's no-op, a
        # disabled tracer): it would make none for the calls either, so they are not
        # traced. A span the sampler dropped is the tracer's own: the calls still ask it.
        above = trace.get_current_span(ctx).get_span_context().span_id
        self.live = self.root.is_recording() or self.root.get_span_context().span_id != above
        self._names: dict[tuple[str, str, str | None], tuple[str, dict[str, Any], Any]] = {}

    def traceparent(self) -> str | None:
        """The root span's W3C traceparent; None when it is not a real span (a no-op
        tracer provider)."""
        return _traceparent(self.ctx)

    def refused(self, exc: BaseException) -> None:
        """The run was not created (``exc``): its root span ends with the error."""
        _error(self.root, exc)
        self.root.end()

    # -- the execution ----------------------------------------------------

    def traced(self, fn: Callable[[_P], _R], prepared: _P) -> _R:
        """``fn(prepared)`` (the execution) under :meth:`execution`."""
        with self.execution() as ended:
            handle = fn(prepared)
            ended(handle)
            return handle

    async def atraced(self, fn: Callable[[_P], Awaitable[_R]], prepared: _P) -> _R:
        """``await fn(prepared)`` under :meth:`execution`."""
        with self.execution() as ended:
            handle = await fn(prepared)
            ended(handle)
            return handle

    @contextmanager
    def execution(self) -> Iterator[Callable[[Any], None]]:
        """Around the execution: the root span is current (the agent's own spans are its
        children); it ends with the run's status, or the error that ended it. Yields the
        function that takes the execution's handle."""
        token = self._context.attach(self.ctx)
        root = self.root

        def ended(handle: Any) -> None:
            root.set_attribute("tether.run.status", str(handle.status))

        try:
            yield ended
        except Exception as exc:
            _error(root, exc)
            raise
        except BaseException as exc:  # a pause (interrupt, worker stopping): not a failure
            root.set_attribute("tether.paused", type(exc).__name__)
            raise
        finally:
            self._context.detach(token)
            root.end()

    # -- the calls --------------------------------------------------------

    def call(self, slot: Slot, core: Core, args: Sequence[Any], kwargs: dict[str, Any]) -> Core:
        """``core`` (a step's, tool's or sleep's) traced: a zero-length replayed span when
        the log answers its position, else a span around its attempts."""
        if not self.live:
            return core
        if slot.done:
            self._replayed(slot, kwargs)
            return core
        return self._traced(slot, core, args, kwargs)

    def gate(self, slot: Slot, fn: Callable[[], Any]) -> Any:
        """An approval, a wait or a child (``fn`` asks or returns the answer), as a span:
        its request is a span that ends when the run starts waiting (``tether.waiting``).
        The span is current while ``fn`` runs: an inline child's run is a span under it."""
        if not self.live:
            return fn()
        if slot.done:
            self._replayed(slot, {})
            return fn()
        with self._gated(self._start(slot, (), {})):
            return fn()

    def agate(
        self, slot: Slot, now: Callable[[], _P], later: Callable[[_P], Awaitable[_R]]
    ) -> Coroutine[Any, Any, _R]:
        """:meth:`gate` of an async call: ``now()`` runs at once (an inline child takes its
        position and is created when called), ``later(now())`` when the coroutine is
        awaited; one span covers both, current in each."""
        if not self.live or slot.done:
            if self.live:
                self._replayed(slot, {})
            return later(now())  # type: ignore[return-value]
        span = self._start(slot, (), {})
        with self._gated(span, end=False):
            prepared = now()

        async def rest() -> _R:
            with self._gated(span):
                return await later(prepared)

        return rest()

    @contextmanager
    def _gated(self, span: Any, *, end: bool = True) -> Iterator[None]:
        """``span`` current inside; ended when the block ends (or fails)."""
        token = self._context.attach(self._trace.set_span_in_context(span))
        try:
            yield
        except Suspended as s:
            span.set_attribute("tether.waiting", s.waiting_for)
            end = True
            raise
        except Exception as exc:
            _error(span, exc)
            end = True
            raise
        finally:
            self._context.detach(token)
            if end:
                span.end()

    def _name(self, slot: Slot, kwargs: dict[str, Any]) -> tuple[str, dict[str, Any], Any]:
        """A call's span name, its attributes but the position's, and its span kind: the
        same for every call of one name (and model), so made once per execution."""
        kind, name = slot.kind, slot.name
        model = None
        if kind == "llm":
            model = kwargs.get("model")
            model = model if isinstance(model, str) and model else name
        named = self._names.get((kind, name, model))
        if named is None:
            named = _named(self._trace, self.run_id, kind, name, model)
            if len(self._names) < 256:  # calls named by their data: a bound, not a leak
                self._names[kind, name, model] = named
        return named

    def _start(
        self,
        slot: Slot,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        start: int | None = None,
        info: StepInfo | None = None,
    ) -> Any:
        """A call's span, begun at ``start`` (ns), with its first attempt's ``info``."""
        span_name, base, kind = self._name(slot, kwargs)
        attrs = {**base, "tether.position": slot.pos, "tether.replayed": False}
        if info is not None:
            _attempt(attrs, slot, info)
        if self.content:
            attrs[_CONTENT.get((slot.kind, "input"), "tether.input")] = _encoded(
                kwargs.get("messages", [list(args), kwargs])
            )
        return self.tracer.start_span(
            span_name, context=self.ctx, kind=kind, attributes=attrs, start_time=start
        )

    def _replayed(self, slot: Slot, kwargs: dict[str, Any]) -> None:
        span_name, base, _kind = self._name(slot, kwargs)
        attrs = {**base, "tether.position": slot.pos, "tether.replayed": True}
        rec = slot.recorded
        if rec is not None:
            attrs["tether.attempt"] = rec.attempts
            if rec.key:
                attrs["tether.idempotency_key"] = rec.key
        now = time.time_ns()  # zero-length: it ran in an earlier execution, not now
        self.tracer.start_span(span_name, self.ctx, attributes=attrs, start_time=now).end(now)

    def _traced(self, slot: Slot, core: Core, args: Sequence[Any], kwargs: dict[str, Any]) -> Core:
        # the span begins at the first attempt, given its attributes at once (cheaper than
        # setting them after: the SDK checks each value), timed from the call's start
        t0, span, context = time.time_ns(), None, self._context
        failed: BaseException | None = None  # the last attempt's error, recorded on the span
        try:
            cmd = next(core)
            while True:
                token = None
                if isinstance(cmd, Call):  # an attempt: the step's info is set (current_step)
                    info = _CURRENT.get()
                    if span is None:
                        span = self._start(slot, args, kwargs, t0, info)
                        current = self._trace.set_span_in_context(span)
                    elif info is not None:
                        span.set_attributes(_attempt({}, slot, info))
                    token = context.attach(current)  # the function's own spans nest here
                else:  # a retry's delay, or a sleep
                    if span is None:
                        span = self._start(slot, args, kwargs, t0)
                        current = self._trace.set_span_in_context(span)
                    span.add_event("tether.wait", {"tether.seconds": cmd.seconds})
                try:
                    value = yield cmd
                except BaseException as exc:
                    if token is not None:
                        context.detach(token)
                    if isinstance(exc, Exception):
                        _exception(span, exc)  # this attempt's failure (retried, or not)
                        failed = exc
                    cmd = core.throw(exc)
                else:
                    if token is not None:
                        context.detach(token)
                    cmd = core.send(value)
        except StopIteration as stop:
            span = span or self._start(slot, args, kwargs, t0)
            if slot.kind == "llm" or self.content:
                _result(span, slot.kind, stop.value, self.content)
            span.end()
            return stop.value
        except Suspended as s:
            span = span or self._start(slot, args, kwargs, t0)
            span.set_attribute("tether.waiting", s.waiting_for)
            span.end()
            raise
        except Exception as exc:
            span = span or self._start(slot, args, kwargs, t0)
            _error(span, exc, recorded=exc is failed)
            span.end()
            raise
        except BaseException:
            span = span or self._start(slot, args, kwargs, t0)
            span.end()
            raise


def _named(
    trace: Any, run_id: str, kind: str, name: str, model: str | None
) -> tuple[str, dict[str, Any], Any]:
    attrs: dict[str, Any] = {
        "tether.run.id": run_id,
        "tether.step.kind": kind,
        "tether.step.name": name,
    }
    op = _NAMES.get(kind)
    if op is not None:
        attrs["gen_ai.operation.name"] = op
    if kind == "llm":
        attrs["gen_ai.request.model"] = model
        return f"chat {model}", attrs, trace.SpanKind.CLIENT
    if kind == "tool":
        attrs["gen_ai.tool.name"] = name
        attrs["gen_ai.tool.type"] = "function"
        return f"execute_tool {name}", attrs, trace.SpanKind.INTERNAL
    return f"{kind} {name}", attrs, trace.SpanKind.INTERNAL


def _traceparent(ctx: Any) -> str | None:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=ctx)
    return carrier.get("traceparent")


def _attempt(attrs: dict[str, Any], slot: Slot, info: StepInfo) -> dict[str, Any]:
    """``attrs`` with an attempt's number and idempotency key."""
    key = attrs["tether.idempotency_key"] = info.idempotency_key
    attrs["tether.attempt"] = info.attempt
    if slot.kind == "tool":
        attrs["gen_ai.tool.call.id"] = key
    return attrs


def _result(span: Any, kind: str, value: Any, content: bool) -> None:
    if kind == "llm":
        usage = usage_of(value)
        if usage is not None:
            span.set_attributes(
                {
                    "gen_ai.usage.input_tokens": usage["input_tokens"],
                    "gen_ai.usage.output_tokens": usage["output_tokens"],
                }
            )
    if content:
        _content(span, kind, "output", value)


_CONTENT = {
    ("llm", "input"): "gen_ai.input.messages",
    ("llm", "output"): "gen_ai.output.messages",
    ("tool", "input"): "gen_ai.tool.call.arguments",
    ("tool", "output"): "gen_ai.tool.call.result",
}


def _content(span: Any, kind: str, way: str, value: Any) -> None:
    span.set_attribute(_CONTENT.get((kind, way), f"tether.{way}"), _encoded(value))


def _encoded(value: Any) -> str:
    """``value`` as the log stores it: a Secret as its marker, credentials redacted."""
    try:
        return codec.encode(value)
    except EncodeError as e:
        return f"<not stored: {e.type_name}>"


def _exception(span: Any, exc: BaseException) -> None:
    """An ``exception`` event, its message and stack redacted as a stored failure's are
    (the process's rules, and every Secret value it knows hidden)."""
    text = "".join(traceback.format_exception(exc))
    attrs = {
        "exception.message": redact.plain(str(exc)),
        "exception.stacktrace": redact.plain(text),
    }
    span.record_exception(exc, attributes=attrs)


def _error(span: Any, exc: BaseException, *, recorded: bool = False) -> None:
    from opentelemetry.trace import Status, StatusCode

    if not recorded:
        _exception(span, exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {redact.plain(str(exc))}"))
