"""Every API endpoint × role × tenant, with the status each must answer, on both backends.

Tokens are real (``app.tokens.create``): a viewer, an approver and an operator limited to
tenant ``acme``, and an admin (every tenant). Runs belong to ``acme`` (own) or to
``globex`` (other). Another tenant's run is 404 (as an unknown id), before any role check;
a role below the endpoint's is 403; no token is 401. An allowed act answers what the run's
state makes of it: 409 for resolve (the run has no call in doubt), retry (the run has
not failed) and budget (the run waits for an approval, not its budget) still shows the
request got past authorization.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from _server import OTHER, OWN, ROLES, bearer, client, done_run, register, tokens, waiting_run
from fastapi.testclient import TestClient

import tether
from tether.server import create_app

pytestmark = pytest.mark.conformance

# endpoint                      | none | viewer approver operator admin (own tenant's run)
#                                        | viewer approver operator admin (other tenant's run)
MATRIX = """
GET  /api/me                      401   200 200 200 200   200 200 200 200
GET  /api/runs                    401   200 200 200 200   200 200 200 200
GET  /api/runs/{run}              401   200 200 200 200   404 404 404 200
GET  /api/runs/{run}/events       401   200 200 200 200   404 404 404 200
GET  /api/runs/{run}/state        401   200 200 200 200   404 404 404 200
GET  /api/runs/{run}/audit        401   200 200 200 200   404 404 404 200
GET  /api/diff                    401   200 200 200 200   404 404 404 200
GET  /api/approvals               401   200 200 200 200   200 200 200 200
GET  /api/costs                   401   200 200 200 200   200 200 200 200
GET  /api/queues                  401   403 403 403 200   403 403 403 200
GET  /api/workers                 401   403 403 403 200   403 403 403 200
GET  /metrics                     401   403 403 403 200   403 403 403 200
GET  /api/runs/{run}/live         401   200 200 200 200   404 404 404 200
GET  /api/live/runs               401   200 200 200 200   200 200 200 200
POST /api/runs/{run}/fork         401   403 403 201 201   404 404 404 201
POST /api/runs/{run}/approvals/send 401 403 200 200 200   404 404 404 200
POST /api/runs/{run}/resolve      401   403 409 409 409   404 404 404 409
POST /api/runs/{run}/signals/go   401   403 200 200 200   404 404 404 200
POST /api/runs/{run}/cancel       401   403 403 200 200   404 404 404 200
POST /api/runs/{run}/retry        401   403 403 409 409   404 404 404 409
POST /api/runs/{run}/budget       401   403 403 409 409   404 404 404 409
GET  /openapi.json                200   200 200 200 200   200 200 200 200
GET  /                            200   200 200 200 200   200 200 200 200
POST /api/logout                  204   204 204 204 204   204 204 204 204
"""
# public on purpose: the schema (it describes the API and holds no data), the home page
# (a pointer to the schema), and logout (it only clears the caller's own cookie);
# POST /api/login takes a token in its body: tests/conformance/test_server_api.py

BODIES: dict[str, Any] = {
    "fork": {"step": 1},
    "send": {"decision": "approve", "reason": "matrix"},
    "resolve": {"happened": False},
    "go": {"payload": {"n": 1}},
    "cancel": {"reason": "matrix"},
    "retry": None,
    "budget": {"add": {"steps": 1}},
}


def _cells() -> list[tuple[str, str, str | None, str, int]]:
    cells = []
    for line in MATRIX.strip().splitlines():
        method, path, none, *codes = line.split()
        cells.append((method, path, None, OWN, int(none)))
        for i, role in enumerate(ROLES):
            cells.append((method, path, role, OWN, int(codes[i])))
            cells.append((method, path, role, OTHER, int(codes[4 + i])))
    return cells


CELLS = _cells()


def _id(cell: tuple[str, str, str | None, str, int]) -> str:
    method, path, role, tenant, _ = cell
    return f"{method} {path} {role or 'none'} {tenant}"


@pytest.fixture
def world(app: tether.App) -> dict[str, Any]:
    register(app)
    made = tokens(app)
    api = client(app, poll=0.01)
    api.app.state.tether.stopping.set()  # a live stream sends what is there, then ends
    return {"tokens": made, "api": api}


@pytest.fixture(scope="module")
def matrix_world(module_app: tether.App) -> dict[str, Any]:
    """One store, tokens and API for every cell of the matrix (a cell makes its own runs
    and reads only those); each cell gets its own client, so no cookie crosses cells."""
    register(module_app)
    made = tokens(module_app)
    asgi = create_app(module_app, poll=0.01)
    asgi.state.tether.stopping.set()  # a live stream sends what is there, then ends
    return {"app": module_app, "tokens": made, "asgi": asgi}


@pytest.mark.parametrize("cell", CELLS, ids=[_id(c) for c in CELLS])
def test_every_endpoint_role_and_tenant(
    matrix_world: dict[str, Any], cell: tuple[str, str, str | None, str, int]
) -> None:
    method, path, role, tenant, expected = cell
    app, api = matrix_world["app"], TestClient(matrix_world["asgi"])
    run = waiting_run(app, tenant)  # a fresh run for every cell: acts change runs
    url = path.replace("{run}", run)
    if path == "/api/diff":
        url += f"?a={run}&b={done_run(app, OWN)}"
    token = None if role is None else matrix_world["tokens"][role]
    answer = _send(api.request, method, url, token)
    assert answer.status_code == expected, answer.text
    if expected >= 400:
        assert set(answer.json()["error"]) >= {"type", "message"}
    if expected == 404:  # another tenant's run answers as an unknown id does
        unknown = _send(api.request, method, url.replace(run, "0" * 24), token)
        assert unknown.status_code == 404
        assert unknown.json()["error"]["message"] == answer.json()["error"]["message"].replace(
            run, "0" * 24
        )


def _send(request: Callable[..., Any], method: str, url: str, token: str | None) -> Any:
    last = url.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
    body = BODIES.get(last) if method == "POST" else None
    return request(method, url, headers=bearer(token), json=body)


def test_a_forbidden_act_is_audited_and_changes_nothing(
    app: tether.App, world: dict[str, Any]
) -> None:
    run = waiting_run(app, OWN)
    before = app.get(run).seq
    answer = world["api"].post(
        f"/api/runs/{run}/approvals/send",
        headers=bearer(world["tokens"]["viewer"]),
        json={"decision": "approve"},
    )
    assert answer.status_code == 403
    assert app.get(run).seq == before
    refused = [a for a in app.audit(run) if a.action == "access.refused"]
    assert [a.actor for a in refused] == ["viewer-1"]


def test_a_tenant_lists_its_runs_alone(app: tether.App, world: dict[str, Any]) -> None:
    own, other = waiting_run(app, OWN), waiting_run(app, OTHER)
    for role in ("viewer", "approver", "operator"):
        listed = world["api"].get("/api/runs", headers=bearer(world["tokens"][role])).json()
        assert {r["id"] for r in listed["runs"]} == {own}
        inbox = world["api"].get("/api/approvals", headers=bearer(world["tokens"][role])).json()
        assert {i["run_id"] for i in inbox["items"]} == {own}
    listed = world["api"].get("/api/runs", headers=bearer(world["tokens"]["admin"])).json()
    assert {r["id"] for r in listed["runs"]} == {own, other}


def test_a_revoked_token_is_refused_at_once(app: tether.App, world: dict[str, Any]) -> None:
    token = world["tokens"]["viewer"]
    assert world["api"].get("/api/me", headers=bearer(token)).status_code == 200
    app.tokens.revoke("viewer-1")
    answer = world["api"].get("/api/me", headers=bearer(token))
    assert answer.status_code == 401
    assert answer.json()["error"]["type"] == "Unauthorized"
