"""Spans of a run exported over OTLP/HTTP (protobuf) by the OpenTelemetry exporter to a
receiver on 127.0.0.1: a tiny http.server that decodes each POST to /v1/traces."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import tether

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


class _Receiver(BaseHTTPRequestHandler):
    received: list[ExportTraceServiceRequest]
    paths: list[str]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.paths.append(self.path)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.received.append(request)
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, type[_Receiver]]]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    handler = type("Receiver", (_Receiver,), {"received": [], "paths": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", handler
    finally:
        server.shutdown()
        server.server_close()


def test_spans_reach_an_otlp_receiver(
    tmp_path: Path, receiver: tuple[str, type[_Receiver]]
) -> None:
    endpoint, handler = receiver
    provider = TracerProvider(resource=Resource.create({"service.name": "refunds"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    app = tether.open(str(tmp_path / "t.db"), tracing=tether.Tracing(provider))
    try:

        @app.tool(risk="read")
        def lookup(order: str) -> int:
            return 30

        @app.agent
        def refund(run: tether.Run, order: str) -> int:
            run.llm("ask", lambda **kw: {"usage": {"input_tokens": 4}}, model="m1")
            return int(run.tool(lookup, order))

        handle = app.run(refund, "o-1")
    finally:
        app.close()
    assert provider.force_flush(10_000)
    provider.shutdown()
    assert handler.paths and set(handler.paths) == {"/v1/traces"}
    spans = [
        span
        for request in handler.received
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    assert sorted(s.name for s in spans) == [
        "chat m1",
        "execute_tool lookup",
        "invoke_agent refund",
    ]
    assert len({s.trace_id for s in spans}) == 1
    root = next(s for s in spans if s.name == "invoke_agent refund")
    attrs = {a.key: a.value for a in root.attributes}
    assert attrs["tether.run.id"].string_value == handle.id
    assert attrs["gen_ai.agent.name"].string_value == "refund"
    scopes = {
        scope.scope.name
        for r in handler.received
        for rs in r.resource_spans
        for scope in rs.scope_spans
    }
    assert scopes == {"tether"}
    chat = next(s for s in spans if s.name == "chat m1")
    chat_attrs = {a.key: a.value for a in chat.attributes}
    assert chat_attrs["gen_ai.usage.input_tokens"].int_value == 4
    assert chat.parent_span_id == root.span_id
