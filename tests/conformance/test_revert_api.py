"""``POST /api/runs/{id}/revert`` on both backends: an operator's token reverts one effect
(recorded under its name, audited), a lesser role is 403 and another tenant's run 404
(nothing undone), a refusal is 409 with its reason."""

from __future__ import annotations

from typing import Any

import pytest
from _server import OTHER, OWN, bearer, client, tokens

import tether

pytestmark = pytest.mark.conformance


@pytest.fixture
def world(app: tether.App) -> dict[str, Any]:
    undone: list[str] = []

    def unbook(result: str, name: str, *, idempotency_key: str) -> None:
        undone.append(name)

    @app.tool(risk="write", compensate=unbook)
    def book(name: str, *, idempotency_key: str) -> str:
        return name

    @app.agent(name="trip")
    def trip(run: tether.Run) -> list[str]:
        return [run.tool(book, n) for n in ("flight", "hotel")]

    def started(tenant: str) -> str:
        return app.run_in(app.session(f"s-{tenant}", owner=tenant), "trip").id

    return {"api": client(app), "tokens": tokens(app), "undone": undone, "start": started}


def test_an_operator_reverts_one_effect(app: tether.App, world: dict[str, Any]) -> None:
    run = world["start"](OWN)
    answer = world["api"].post(
        f"/api/runs/{run}/revert",
        headers=bearer(world["tokens"]["operator"]),
        json={"step": 2, "reason": "hotel full"},
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["id"], body["step"], body["tool"], body["by"]) == (run, 2, "book", "operator-1")
    assert body["key"].startswith(f"{run}:2:undo:book:") and body["resumed"] is False
    assert world["undone"] == ["hotel"]
    r = app.get(run).revert_of(2)
    assert r is not None and r.detail is not None and r.detail["by"] == "operator-1"
    assert app.get(run).status == "completed"
    assert "revert" in {a.action for a in app.audit(run)}
    seen = world["api"].get(f"/api/runs/{run}", headers=bearer(world["tokens"]["viewer"]))
    assert seen.status_code == 200, seen.text
    (shown,) = seen.json()["state"]["reverts"]
    assert (shown["position"], shown["status"], shown["key"]) == (2, "completed", body["key"])


@pytest.mark.parametrize("role", ["viewer", "approver"])
def test_a_lesser_role_is_forbidden(app: tether.App, world: dict[str, Any], role: str) -> None:
    run = world["start"](OWN)
    seq = app.get(run).seq
    answer = world["api"].post(
        f"/api/runs/{run}/revert", headers=bearer(world["tokens"][role]), json={"step": 1}
    )
    assert answer.status_code == 403, answer.text
    assert world["undone"] == [] and app.get(run).seq == seq


def test_another_tenant_s_run_is_not_found(app: tether.App, world: dict[str, Any]) -> None:
    run = world["start"](OTHER)
    answer = world["api"].post(
        f"/api/runs/{run}/revert", headers=bearer(world["tokens"]["operator"]), json={"step": 1}
    )
    assert answer.status_code == 404, answer.text
    assert world["undone"] == []


def test_a_refusal_is_409_with_its_reason(app: tether.App, world: dict[str, Any]) -> None:
    run = world["start"](OWN)
    who = bearer(world["tokens"]["operator"])
    url = f"/api/runs/{run}/revert"
    assert world["api"].post(url, headers=who, json={"step": 1}).status_code == 200
    again = world["api"].post(url, headers=who, json={"step": 1})
    assert again.status_code == 409
    error = again.json()["error"]
    assert error["type"] == "RevertRefused" and "already reverted" in error["message"]
    assert world["api"].post(url, headers=who, json={"step": 0}).status_code == 422
    assert world["undone"] == ["flight"]
