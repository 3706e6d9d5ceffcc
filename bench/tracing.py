"""What tracing costs a step: bench/steps.py's W1 with tracing off and on, in one run.

    python bench/tracing.py            # 7 rounds: about 20 s
    python bench/tracing.py --quick    # 3 rounds

W1 is one run of 1000 sequential steps (the same ~1 KB step body as bench/steps.py), on
SQLite with tether's defaults, reported as µs per step (medians). Modes, interleaved in
every round so the shared machine's noise hits them alike, each on a fresh database:

off      ``tether.open(db)``: no tracing (the engine checks ``journal.trace`` once a call)
noop     ``tracing=Tracing(NoOpTracerProvider())``: tether's hooks run, the API's no-op
         spans record nothing: tether's own share of the cost
simple   ``tracing=Tracing(provider)``, a SimpleSpanProcessor handing every span, as it
         ends, to an exporter that discards it: the whole span cost on the step's thread
batch    the same with a BatchSpanProcessor (the usual production set-up): spans queued,
         exported (discarded) on its thread

Prints each mode's µs per step (wall clock and CPU time) and its ratio to ``off``, and
the SDK's own cost of one span; the goal is ``simple`` <= 1.3x ``off`` in CPU time.
Needs tether[otel] and opentelemetry-sdk (both in the ``test`` extra).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
    cls = SimpleSpanProcessor if mode == "simple" else BatchSpanProcessor
    provider.add_span_processor(cls(sink))
    return tether.Tracing(provider), sink, provider


def w1(db: str, mode: str) -> tuple[float, float]:
    """µs per step of one run of STEPS steps (tracing ``mode``) on a fresh file: wall
    clock, and this process's CPU time (less sensitive to a busy machine)."""
    remove_db(db)
    tracing, sink, provider = _tracing(mode)
    app = tether.open(db, tracing=tracing)

    @app.agent(name="bench")
    def agent(run: tether.Run, steps: int) -> int:
        total = 0
        for k in range(1, steps + 1):
            total += run.step("work", body, k)["step"]
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


def span_floor(n: int = 2000) -> float:
    """µs per span of the OpenTelemetry SDK alone (start with 5 attributes, end; the
    simple processor and discarding exporter): the part of ``simple`` that is not tether's."""
    _, _, provider = _tracing("simple")
    assert provider is not None
    tracer = provider.get_tracer("floor")
    attrs = {"a": 1, "b": "x", "c": "y", "d": "z", "e": False}
    t0 = time.process_time()
    for _ in range(n):
        tracer.start_span("step work", attributes=attrs).end()
    elapsed = time.process_time() - t0
    provider.shutdown()
    return elapsed / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 rounds")
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args()
    rounds = args.rounds or (3 if args.quick else 7)
    modes = ("off", "noop", "simple", "batch")
    samples: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    floor: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "bench.db")
        for r in range(rounds):
            order = modes if r % 2 == 0 else tuple(reversed(modes))
            for mode in order:
                samples[mode].append(w1(db, mode))
            floor.append(span_floor())
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
    span = statistics.median(floor)
    print(f"  the SDK alone: {span:.1f} CPU µs per span (start + end; included in simple, batch)")


if __name__ == "__main__":
    main()
