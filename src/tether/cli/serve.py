"""``tether serve``: the HTTP API (:mod:`tether.server`) under uvicorn."""

from __future__ import annotations

import argparse
import contextlib
import signal
from collections.abc import Iterator
from typing import Any

from tether.cli.arguments import whole_number
from tether.cli.context import Command, CommandError, Context
from tether.store.urls import redact

_STOP = (signal.SIGINT, signal.SIGTERM)


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=whole_number(0, 65535), default=8700, help="the port (default 8700)"
    )


def _serve(args: argparse.Namespace, ctx: Context) -> int:
    try:  # the server sits above the CLI and needs the server extra: imported when it runs
        import uvicorn

        from tether.server import create_app
    except ImportError as e:
        raise CommandError(str(e), 1) from None
    app = ctx.app()
    reader = ctx.reader(ctx.read_url) if ctx.read_url is not None else None
    api = create_app(app, reader=reader)
    stopping = api.state.tether.stopping

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            stopping.set()  # live streams end, so shutting down waits for none of them
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn's own raises the signal again once shut down (exit -15); a stop
            # asked for is a clean exit here, as for `tether worker`
            old = {sig: signal.signal(sig, self.handle_exit) for sig in _STOP}
            try:
                yield
            finally:
                for sig, handler in old.items():
                    signal.signal(sig, handler)

    config = uvicorn.Config(
        api, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=5
    )
    ctx.print(
        f"tether serve: http://{args.host}:{args.port}/ on {redact(app.url or '')}"
        f"{f', GET requests on {redact(reader.url)}' if reader is not None else ''} (the API "
        f"under /api, its schema at /openapi.json; every request needs a token); Ctrl-C or "
        f"SIGTERM stops it"
    )
    Server(config).run()
    return 0


COMMANDS = (
    Command(
        "serve",
        "serve the HTTP API (needs tether[server])",
        _serve_arguments,
        _serve,
        "Serves the HTTP API over the database (--db, or --app's): runs, their state, "
        "events and diffs, the approvals inbox, decisions, forks, queues and workers, with "
        "live updates as server-sent events. Every request needs an API token (`tether "
        "token create`), sent as `Authorization: Bearer <token>`, or a browser session "
        "from POST /api/login. Set TETHER_SESSION_SECRET to keep sessions across restarts "
        "and servers. See docs/server.md.",
    ),
)
