"""What tracing costs a step: bench/steps.py's W1 with tracing off and on, in one run.

    python bench/tracing.py            # 7 rounds: about 20 s
    python bench/tracing.py --quick    # 3 rounds

W1 is one run of 1000 sequential steps (the same ~1 KB step body as bench/steps.py), on
SQLite with tether's defaults, reported as µs per step (medians). Modes, interleaved in
every round so the shared machine's noise hits them alike, each on a fresh database:

off      ``tether.open(db)``: no tracing (the engine checks ``journal.trace`` once a call)
noop     ``tracing=Tracing(NoOpTracerProvider())``: nothing listens; the run's root span
         is the API's no-op, so tether skips its calls' hooks
floor    no tracing; the step's function itself starts one SDK span with the attributes
         tether gives a step's (a child of a run span, current around the body) and ends
         it: what the SDK charges any tracer of a step, in the step's own setting
simple   ``tracing=Tracing(provider)``, a SimpleSpanProcessor handing every span, as it
         ends, to an exporter that discards it: the whole span cost on the step's thread,
         inside the timed run (the goal is judged on this one)
batch    the same with a BatchSpanProcessor (the usual production set-up): spans queued,
         exported (discarded) on its thread every 512 spans

Prints each mode's µs per step (wall clock and CPU time) and its ratio to ``off``;
``simple`` - ``floor`` is tether's own share of a traced step. The goal is ``simple``
<= 1.3x ``off`` in CPU time. Needs tether[otel] and opentelemetry-sdk (both in the
``test`` extra).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry import context, trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import NoOpTracerProvider

import tether
from common import body, remove_db

STEPS = 1000
GOAL = 1.3


class Discard(SpanExporter):
    """A no-op exporter: counts the spans it is given and drops them."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def _tracing(mode: str) -> tuple[Any, Discard | None, TracerProvider | None]:
    if mode == "off":
        return None, None, None
    if mode == "noop":
        return tether.Tracing(NoOpTracerProvider()), None, None
    sink, provider = Discard(), TracerProvider()
    cls = BatchSpanProcessor if mode == "batch" else SimpleSpanProcessor
    provider.add_span_processor(cls(sink))
    return (None if mode == "floor" else tether.Tracing(provider)), sink, provider


def _spanned(provider: TracerProvider, db: str) -> Callable[[int], dict[str, Any]]:
    """The step body inside one SDK span per call, as ``floor`` measures."""
    tracer = provider.get_tracer("floor")
    parent = trace.set_span_in_context(tracer.start_span("invoke_agent bench"))
    attrs = {"tether.run.id": "0" * 26, "tether.step.kind": "step", "tether.step.name": "work"}

    def spanned(k: int) -> dict[str, Any]:
        span = tracer.start_span(
            "step work",
            parent,
            attributes={
                **attrs,
                "tether.position": k,
                "tether.replayed": False,
                "tether.idempotency_key": f"{db}:{k}:work:0123456789abcdef",
                "tether.attempt": 1,
            },
            start_time=time.time_ns(),
        )
        token = context.attach(trace.set_span_in_context(span))
        try:
            return body(k)
        finally:
            context.detach(token)
            span.end()

    return spanned


def w1(db: str, mode: str) -> tuple[float, float]:
    """µs per step of one run of STEPS steps (tracing ``mode``) on a fresh file: wall
    clock, and this process's CPU time (less sensitive to a busy machine)."""
    remove_db(db)
    tracing, sink, provider = _tracing(mode)
    app = tether.open(db, tracing=tracing)
    fn = _spanned(provider, db) if mode == "floor" and provider is not None else body

    @app.agent(name="bench")
    def agent(run: tether.Run, steps: int) -> int:
        total = 0
        for k in range(1, steps + 1):
            total += run.step("work", fn, k)["step"]
        return total

    app.run(agent, 3)  # warm: imports, statements prepared
    t0, c0 = time.perf_counter(), time.process_time()
    app.run(agent, STEPS)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    app.close()
    if provider is not None:
        provider.shutdown()  # a batch processor exports what it queued
        assert sink is not None and sink.spans >= STEPS, (mode, sink.spans)
    return elapsed / STEPS * 1e6, cpu / STEPS * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 rounds")
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args()
    rounds = args.rounds or (3 if args.quick else 7)
    modes = ("off", "noop", "floor", "simple", "batch")
    samples: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "bench.db")
        for r in range(rounds):
            order = modes if r % 2 == 0 else tuple(reversed(modes))
            for mode in order:
                samples[mode].append(w1(db, mode))
    print(f"W1 ({STEPS} sequential steps, SQLite normal), medians of {rounds} rounds")
    print("                  wall µs/step  ratio   CPU µs/step  ratio")
    off = [statistics.median(x[i] for x in samples["off"]) for i in (0, 1)]
    for mode in modes:
        wall, cpu = (statistics.median(x[i] for x in samples[mode]) for i in (0, 1))
        verdict = ""
        if mode == "simple":
            met = "met" if cpu / off[1] <= GOAL else "MISSED"  # CPU: the steadier measure
            verdict = f"  (goal <= {GOAL:.1f}x CPU: {met})"
        print(
            f"  tracing {mode:<6} {wall:9.1f}  {wall / off[0]:5.2f}x"
            f"  {cpu:10.1f}  {cpu / off[1]:5.2f}x{verdict}"
        )
    pairs = zip(samples["simple"], samples["floor"], strict=True)
    share = statistics.median(s[1] - f[1] for s, f in pairs)
    print(f"  tether's share of a traced step (simple - floor, CPU): {share:.1f} µs")


if __name__ == "__main__":
    main()
