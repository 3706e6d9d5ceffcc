"""The HTTP API on both backends: an approval round trip, sessions and CSRF, paging, and
errors as JSON 4xx (never a 500 for bad input)."""

from __future__ import annotations

from typing import Any

import pytest
from _server import OWN, bearer, client, done_run, register, tokens, waiting_run

import tether

pytestmark = pytest.mark.conformance


@pytest.fixture
def world(app: tether.App) -> dict[str, Any]:
    register(app)
    return {"tokens": tokens(app), "api": client(app)}


def test_an_approval_round_trip_over_http(app: tether.App, world: dict[str, Any]) -> None:
    api, approver = world["api"], bearer(world["tokens"]["approver"])
    run = waiting_run(app, OWN, queue=True)
    app.worker(poll=0.01).run(until_idle=True)  # executes it until it waits
    assert app.record(run).status == "waiting"
    inbox = api.get("/api/approvals", headers=approver).json()["items"]
    [item] = [i for i in inbox if i["run_id"] == run]
    assert item["kind"] == "approval" and item["name"] == "send"
    assert item["payload"] == {"order": "O-1", "amount": 30}  # what is approved

    answer = api.post(
        f"/api/runs/{run}/approvals/send",
        headers=approver,
        json={"decision": "approve", "reason": "checked the order"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "queued"
    app.worker(poll=0.01).run(until_idle=True)  # a worker continues it
    state = app.get(run)
    assert state.status == "completed"
    assert state.output == {"sent": "O-1", "by": "approver-1"}  # the token's name
    decided = next(s for s in state.steps if s.kind == "approve").output
    assert decided == {"approved": True, "by": "approver-1", "reason": "checked the order"}
    assert "approve" in {a.action for a in app.audit(run)}


def test_a_by_field_is_refused_and_nothing_is_decided(
    app: tether.App, world: dict[str, Any]
) -> None:
    run = waiting_run(app, OWN)
    answer = world["api"].post(
        f"/api/runs/{run}/approvals/send",
        headers=bearer(world["tokens"]["approver"]),
        json={"decision": "approve", "by": "alice"},
    )
    assert answer.status_code == 422
    assert "by" in answer.json()["error"]["message"]
    assert app.record(run).status == "waiting"


def test_a_second_decision_is_409(app: tether.App, world: dict[str, Any]) -> None:
    run = waiting_run(app, OWN)
    url, who = f"/api/runs/{run}/approvals/send", bearer(world["tokens"]["approver"])
    assert world["api"].post(url, headers=who, json={"decision": "deny"}).status_code == 200
    again = world["api"].post(url, headers=who, json={"decision": "approve"})
    assert again.status_code == 409
    assert again.json()["error"]["type"] == "DecisionRefused"


def test_a_cookie_session_needs_its_csrf_token_to_act(
    app: tether.App, world: dict[str, Any]
) -> None:
    api = world["api"]
    run = waiting_run(app, OWN)
    login = api.post("/api/login", json={"token": world["tokens"]["approver"]})
    assert login.status_code == 200
    cookie = login.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert world["tokens"]["approver"].lower() not in cookie  # the cookie holds no token
    csrf = login.json()["csrf_token"]
    me = api.get("/api/me").json()  # reads: the cookie alone
    assert me["name"] == "approver-1" and me["csrf_token"] == csrf
    url = f"/api/runs/{run}/approvals/send"
    refused = api.post(url, json={"decision": "approve"})
    assert refused.status_code == 403
    assert refused.json()["error"]["type"] == "CsrfFailed"
    wrong = api.post(url, json={"decision": "approve"}, headers={"X-CSRF-Token": "x" + csrf})
    assert wrong.status_code == 403
    assert app.record(run).status == "waiting"
    done = api.post(url, json={"decision": "approve"}, headers={"X-CSRF-Token": csrf})
    assert done.status_code == 200
    assert api.post("/api/logout").status_code == 204
    assert api.get("/api/me").status_code == 401


def test_a_bad_token_or_a_forged_cookie_is_401(app: tether.App, world: dict[str, Any]) -> None:
    api = world["api"]
    assert api.post("/api/login", json={"token": "tether_nope"}).status_code == 401
    assert api.get("/api/me", headers={"Authorization": "Basic abc"}).status_code == 401
    api.cookies.set("tether_session", "e30.forged")
    assert api.get("/api/me").status_code == 401
    other = client(app)  # another server secret: its cookies are not this one's
    other.post("/api/login", json={"token": world["tokens"]["viewer"]})
    api.cookies.set("tether_session", other.cookies["tether_session"])
    assert api.get("/api/me").status_code == 401


def test_the_run_list_pages_with_a_cursor(app: tether.App, world: dict[str, Any]) -> None:
    made = {done_run(app, OWN) for _ in range(5)}
    admin, seen, cursor = bearer(world["tokens"]["admin"]), [], None
    while True:
        params: dict[str, Any] = {"limit": 2, "agent": "done"}
        if cursor:
            params["cursor"] = cursor
        page = world["api"].get("/api/runs", headers=admin, params=params).json()
        seen += [r["id"] for r in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == 5 and set(seen) == made
    bad = world["api"].get("/api/runs", headers=admin, params={"cursor": "garbage"})
    assert bad.status_code == 422 and "cursor" in bad.json()["error"]["message"]


def test_the_run_list_filters_by_version(app: tether.App, world: dict[str, Any]) -> None:
    app.agent(name="versioned", version="7")(lambda run: "done")
    ours = app.run("versioned").id
    admin = bearer(world["tokens"]["admin"])
    page = world["api"].get("/api/runs", headers=admin, params={"version": "7"}).json()
    assert [(r["id"], r["version"]) for r in page["runs"]] == [(ours, "7")]
    none = world["api"].get("/api/runs", headers=admin, params={"version": "8"}).json()
    assert none["runs"] == []


def test_events_come_a_bounded_page_at_a_time(app: tether.App, world: dict[str, Any]) -> None:
    run = waiting_run(app, OWN)
    viewer = bearer(world["tokens"]["viewer"])
    everything = [e.seq for e in app.events(run)]
    first = world["api"].get(f"/api/runs/{run}/events?limit=2", headers=viewer).json()
    assert [e["seq"] for e in first["events"]] == everything[:2]
    rest = (
        world["api"]
        .get(f"/api/runs/{run}/events?after={first['next_after']}", headers=viewer)
        .json()
    )
    assert [e["seq"] for e in rest["events"]] == everything[2:]
    assert rest["next_after"] is None


def test_state_at_a_step_and_the_run_page(app: tether.App, world: dict[str, Any]) -> None:
    run = done_run(app, OWN)
    viewer = bearer(world["tokens"]["viewer"])
    page = world["api"].get(f"/api/runs/{run}", headers=viewer).json()
    assert page["state"]["status"] == "completed" and page["state"]["output"] == 42
    assert [s["name"] for s in page["steps"]] == ["double"] and page["steps_total"] == 1
    before = world["api"].get(f"/api/runs/{run}/state?step=double&when=before", headers=viewer)
    assert before.json()["state"]["steps"] == []
    after = world["api"].get(f"/api/runs/{run}/state?step=1", headers=viewer).json()
    assert after["state"]["steps"][0]["output"] == 42


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status"),
    [
        ("POST", "/api/runs/{run}/cancel", {"content": b"{not json"}, 422),
        ("POST", "/api/runs/{run}/approvals/send", {"json": {"decision": "maybe"}}, 422),
        ("POST", "/api/runs/{run}/fork", {"json": {"step": "nowhere"}}, 404),
        ("POST", "/api/runs/{run}/fork", {"json": {"at": -1}}, 422),
        ("POST", "/api/runs/{run}/fork", {"json": {"input": {"x": 1}}}, 422),
        ("POST", "/api/runs/{run}/signals/go", {"content": b"\xff\xfe{"}, 422),
        ("POST", "/api/runs/{run}/signals/go", {"content": b"x" * (2 << 20)}, 413),
        ("GET", "/api/runs?limit=0", {}, 422),
        ("GET", "/api/runs/{run}/state?seq=-1", {}, 422),
        ("GET", "/api/runs/{run}/state?step=nowhere", {}, 404),
        ("GET", "/api/runs/..%2F..%2Fetc", {}, 404),
        ("GET", "/api/nothing", {}, 404),
    ],
)
def test_bad_input_is_a_json_4xx(
    app: tether.App, world: dict[str, Any], method: str, path: str, kwargs: Any, status: int
) -> None:
    run = done_run(app, OWN)
    headers = {**bearer(world["tokens"]["admin"]), "Content-Type": "application/json"}
    answer = world["api"].request(method, path.replace("{run}", run), headers=headers, **kwargs)
    assert answer.status_code == status, answer.text
    assert set(answer.json()["error"]) >= {"type", "message"}


def test_a_streamed_body_over_the_limit_is_413(app: tether.App, world: dict[str, Any]) -> None:
    run = waiting_run(app, OWN)

    def chunks() -> Any:  # no Content-Length: the limit counts the bytes as they come
        for _ in range(40):
            yield b"x" * 1024

    small = client(app, max_body=16 * 1024)
    answer = small.post(
        f"/api/runs/{run}/signals/go",
        headers={**bearer(world["tokens"]["admin"]), "Content-Type": "application/json"},
        content=chunks(),
    )
    assert answer.status_code == 413, answer.text
    assert answer.json()["error"]["type"] == "TooLarge"


def test_queues_and_workers_for_an_admin(app: tether.App, world: dict[str, Any]) -> None:
    waiting_run(app, OWN, queue=True)
    admin = bearer(world["tokens"]["admin"])
    queues = world["api"].get("/api/queues", headers=admin).json()
    assert queues == [{"name": "default", "queued": 1, "queued_at_least": False, "workers": []}]
    assert world["api"].get("/api/workers", headers=admin).json() == []
