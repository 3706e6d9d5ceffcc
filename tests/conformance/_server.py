"""What the API tests share: agents, real tokens (``app.tokens``) and clients."""

from __future__ import annotations

from typing import Any

import pytest

import tether

pytest.importorskip("fastapi", reason="the server extra: pip install 'tether[server]'")

from fastapi.testclient import TestClient

from tether.server import create_app

ROLES = ("viewer", "approver", "operator", "admin")
OWN, OTHER = "acme", "globex"


def register(app: tether.App) -> dict[str, Any]:
    """The agents the API tests run: one waits for an approval (of anyone), one completes."""

    @app.agent(name="refund")
    def refund(run: tether.Run, order: str) -> Any:
        facts = run.step("lookup", lambda: {"order": order, "amount": 30})
        decision = run.approve("send", payload=facts)
        return {"sent": order, "by": decision["by"]}

    @app.agent(name="done")
    def done(run: tether.Run, n: int) -> int:
        return int(run.step("double", lambda: n * 2))

    return {"refund": refund, "done": done}


def waiting_run(app: tether.App, tenant: str, queue: bool = False) -> str:
    """A run of ``tenant`` waiting for approval ``send``."""
    session = app.session(f"s-{tenant}", owner=tenant)
    if queue:
        return app.start_in(session, "refund", "O-1")
    return app.run_in(session, "refund", "O-1").id


def done_run(app: tether.App, tenant: str) -> str:
    """A completed run of ``tenant``."""
    return app.run_in(app.session(f"s-{tenant}", owner=tenant), "done", 21).id


def tokens(app: tether.App) -> dict[str, str]:
    """A real token per role, limited to tenant OWN (admin: every tenant)."""
    made = {}
    for role in ROLES:
        tenant = None if role == "admin" else OWN
        _, made[role] = app.tokens.create(f"{role}-1", role, tenant)
    return made


def client(app: tether.App, **options: Any) -> TestClient:
    """The API over ``app`` in a test client (a real ASGI app, no network)."""
    return TestClient(create_app(app, **options))


def bearer(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}
