"""A traced agent in a process of its own (tests/integration/test_tracing_crash.py):
``python _traced_agent.py DB SPANS GATE start|resume [RUN_ID]``. Its spans are written to
SPANS, one JSON object a line, by the OpenTelemetry SDK's console exporter as each ends.
``start`` runs the agent, which writes its run id to GATE in its third step and then
hangs there until the test kills the process; ``resume`` resumes the run to its end."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

import tether


def main() -> None:
    db, spans, gate, mode = sys.argv[1:5]
    out = open(spans, "a", buffering=1)  # noqa: SIM115 (open while the process lives)
    provider = TracerProvider()
    exporter = ConsoleSpanExporter(out=out, formatter=lambda s: s.to_json(indent=None) + "\n")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = tether.open(db, tracing=tether.Tracing(provider))

    def third() -> str:
        if mode == "start":
            Path(gate).write_text(tether.current_step().run_id)
            time.sleep(600)  # killed here
        return "c"

    @app.agent
    def pipeline(run: tether.Run) -> str:
        a = run.step("a", lambda: "a")
        b = run.step("b", lambda: "b")
        return a + b + run.step("c", third)

    if mode == "start":
        app.run(pipeline)
    else:
        print(app.resume(sys.argv[5]).output)


if __name__ == "__main__":
    main()
