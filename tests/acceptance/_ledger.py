"""A small external service on 127.0.0.1 that performs an effect: appending to a ledger.

``aware=True``: honours the ``Idempotency-Key`` header (a repeated key returns the
first response and appends nothing). ``aware=False``: every POST appends.
``hang=True``: the service performs the effect, then holds every response until
``release()`` (a call that hangs after it took effect, as a slow API does).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Ledger:
    """The service: start(), url, entries, stop()."""

    def __init__(self, *, aware: bool, hang: bool = False) -> None:
        self.aware = aware
        self.requests = 0  # every POST received, whether it appended or not
        self.released = threading.Event()
        if not hang:
            self.released.set()
        self.entries: list[dict[str, Any]] = []
        self.by_key: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Ledger:
        self.thread.start()
        return self

    def release(self) -> None:
        """Answer the held requests (and every later one at once)."""
        self.released.set()

    def stop(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()

    def charge(self, body: dict[str, Any], key: str | None) -> dict[str, Any]:
        with self.lock:
            self.requests += 1
            if self.aware and key and key in self.by_key:
                return self.by_key[key]
            entry = {"n": len(self.entries) + 1, "amount": body.get("amount"), "key": key}
            self.entries.append(entry)
            response = {"charge_id": entry["n"]}
            if key:
                self.by_key[key] = response
            return response

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        ledger = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                out = json.dumps(ledger.charge(body, self.headers.get("Idempotency-Key")))
                ledger.released.wait(60)  # a hanging service: the effect is done, no answer
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(out.encode())

            def log_message(self, *args: Any) -> None:
                pass

        return Handler
