"""Schedules and boards over HTTP, on both backends: every route × role × tenant, a
tenant never sees another's boards (nor any schedule: they belong to no tenant), the
acts need their role (refusals audited, nothing changed), a compare-and-set conflict is
409 with the key's version, and bad input is a 4xx naming what was wrong."""

from __future__ import annotations

from typing import Any

import pytest
from _conformance import Backend
from _server import OTHER, OWN, bearer, client, register, tokens

import tether

pytestmark = pytest.mark.conformance

# route                                  | none | viewer approver operator (of acme) admin
#                                               | viewer operator (of every tenant)
MATRIX = """
GET    /api/schedules                      401   200 200 200 200   200 200
GET    /api/schedules/nightly              401   404 404 404 200   200 200
POST   /api/schedules/nightly/pause        401   404 404 404 200   403 403
POST   /api/schedules/nightly/resume       401   404 404 404 200   403 403
DELETE /api/schedules/nightly              401   404 404 404 200   403 403
GET    /api/boards                         401   200 200 200 200   200 200
GET    /api/boards/incident?tenant=acme    401   200 200 200 200   200 200
GET    /api/boards/incident?tenant=globex  401   404 404 404 200   200 200
GET    /api/boards/incident/keys/owner     401   200 200 200 404   404 404
GET    /api/boards/incident/keys/owner/history 401 200 200 200 404 404 404
PUT    /api/boards/incident/keys/owner     401   403 403 200 200   403 200
PUT    /api/boards/incident/keys/owner?tenant=globex 401 404 404 404 200 403 200
"""
# admin and the tokens of every tenant, without ?tenant=, read the boards of no tenant:
# "incident" has none there (404); PUT creates it there
COLUMNS = ("viewer", "approver", "operator", "admin", "all-viewer", "all-operator")


def _cells() -> list[tuple[str, str, str | None, int]]:
    cells = []
    for line in MATRIX.strip().splitlines():
        method, path, none, *codes = line.split()
        cells.append((method, path, None, int(none)))
        cells += [(method, path, who, int(code)) for who, code in zip(COLUMNS, codes, strict=True)]
    return cells


@pytest.fixture
def world(app: tether.App) -> dict[str, Any]:
    register(app)
    made = tokens(app)
    for role in ("viewer", "operator"):  # of every tenant
        made[f"all-{role}"] = app.tokens.create(f"all-{role}-1", role)[1]
    app.schedule("done", 21, every="1h", name="nightly")
    app.for_tenant(OWN).board("incident").set("owner", "alice", by="pager")
    app.for_tenant(OTHER).board("incident").set("owner", "mallory", by="pager")
    app.for_tenant(OTHER).board("secret-plans").set("step", 1)
    return {"tokens": made, "api": client(app)}


def _get(world: dict[str, Any], who: str, url: str, **how: Any) -> Any:
    return world["api"].request(how.pop("method", "GET"), url, headers=_as(world, who), **how)


def _as(world: dict[str, Any], who: str | None) -> dict[str, str]:
    return bearer(None if who is None else world["tokens"][who])


CELLS = _cells()


@pytest.mark.parametrize("cell", CELLS, ids=[f"{c[0]} {c[1]} {c[2]}" for c in CELLS])
def test_every_route_role_and_tenant(
    app: tether.App, world: dict[str, Any], cell: tuple[str, str, str | None, int]
) -> None:
    method, url, who, expected = cell
    body = {"value": "bob"} if method == "PUT" else None
    answer = world["api"].request(method, url, headers=_as(world, who), json=body)
    assert answer.status_code == expected, answer.text
    if expected >= 400:
        assert set(answer.json()["error"]) >= {"type", "message"}


def test_a_tenant_never_sees_another_tenants_boards(app: tether.App, world: dict[str, Any]) -> None:
    for role in ("viewer", "approver", "operator"):
        listed = _get(world, role, "/api/boards").json()
        assert [(b["tenant"], b["board"]) for b in listed] == [(OWN, "incident")]
        assert _get(world, role, f"/api/boards?tenant={OTHER}").json() == []
        page = _get(world, role, "/api/boards/incident").json()
        assert [(k["key"], k["value"]) for k in page["keys"]] == [("owner", "alice")]
        for url in ("/api/boards/secret-plans", f"/api/boards/incident?tenant={OTHER}"):
            hidden = _get(world, role, url)
            unknown = _get(world, role, url.replace("secret-plans", "no-such-board"))
            assert hidden.status_code == 404, hidden.text
            # another tenant's board answers as a board that does not exist
            assert hidden.json()["error"]["message"] == unknown.json()["error"]["message"].replace(
                "no-such-board", "secret-plans"
            )
    # a write of acme's operator lands on acme's board; globex's is untouched
    set_ = _get(
        world, "operator", "/api/boards/incident/keys/owner", method="PUT", json={"value": "x"}
    )
    assert set_.status_code == 200 and set_.json()["version"] == 2
    assert tuple(app.for_tenant(OTHER).board("incident").get("owner")) == ("mallory", 1)
    admin = _get(world, "admin", "/api/boards").json()
    assert {(b["tenant"], b["board"]) for b in admin} == {
        (OWN, "incident"),
        (OTHER, "incident"),
        (OTHER, "secret-plans"),
    }
    globex = _get(world, "admin", f"/api/boards/incident?tenant={OTHER}").json()
    assert [k["value"] for k in globex["keys"]] == ["mallory"]


def test_a_tenant_sees_no_schedule(app: tether.App, world: dict[str, Any]) -> None:
    assert [s["name"] for s in _get(world, "admin", "/api/schedules").json()] == ["nightly"]
    assert [s["name"] for s in _get(world, "all-viewer", "/api/schedules").json()] == ["nightly"]
    for role in ("viewer", "operator"):
        assert _get(world, role, "/api/schedules").json() == []
        hidden = _get(world, role, "/api/schedules/nightly")
        unknown = _get(world, role, "/api/schedules/nope")
        assert hidden.status_code == unknown.status_code == 404
        message = hidden.json()["error"]["message"]
        assert message == unknown.json()["error"]["message"].replace("nope", "nightly")
        assert "nightly" not in unknown.json()["error"]["message"]  # no name leaks
        paused = _get(world, role, "/api/schedules/nightly/pause", method="POST")
        assert paused.status_code == 404
    assert not app.get_schedule("nightly").paused


def _unattached(backend: Backend) -> list[tuple[str, str]]:
    """The audit records of no run (actor, action), oldest first."""
    rows = backend.sql("SELECT actor, action FROM audit WHERE run_id IS NULL ORDER BY id")
    return [(r[0], r[1]) for r in rows]


def test_schedule_acts_need_an_admin_and_a_refusal_is_audited(
    app: tether.App, backend: Backend, world: dict[str, Any]
) -> None:
    for role in ("all-viewer", "all-operator"):
        for act, method in (("pause", "POST"), ("resume", "POST"), ("", "DELETE")):
            url = "/api/schedules/nightly" + (f"/{act}" if act else "")
            answer = _get(world, role, url, method=method)
            assert answer.status_code == 403, answer.text
            assert "admin" in answer.json()["error"]["message"]
    assert [s.name for s in app.schedules()] == ["nightly"]
    assert not app.get_schedule("nightly").paused
    refused = {actor for actor, action in _unattached(backend) if action == "access.refused"}
    assert refused == {"all-viewer-1", "all-operator-1"}


def test_pause_resume_delete_as_the_cli_does(
    app: tether.App, backend: Backend, world: dict[str, Any]
) -> None:
    def act(url: str, method: str = "POST") -> Any:
        return _get(world, "admin", url, method=method)

    first = act("/api/schedules/nightly/pause")
    assert first.status_code == 200 and first.json()["changed"] is True
    assert first.json()["schedule"]["paused"] is True and app.get_schedule("nightly").paused
    assert act("/api/schedules/nightly/pause").json()["changed"] is False  # paused already
    resumed = act("/api/schedules/nightly/resume").json()
    assert resumed["changed"] is True and resumed["schedule"]["paused"] is False
    assert act("/api/schedules/nightly/resume").json()["changed"] is False
    deleted = act("/api/schedules/nightly", "DELETE").json()
    assert deleted == {"name": "nightly", "changed": True, "schedule": None}
    assert app.schedules() == []
    gone = act("/api/schedules/nightly/pause")
    assert gone.status_code == 404 and "no schedule 'nightly'" in gone.text
    done = [(action, actor) for actor, action in _unattached(backend) if "schedule" in action]
    assert done == [
        ("schedule.pause", "admin-1"),
        ("schedule.pause", "admin-1"),
        ("schedule.resume", "admin-1"),
        ("schedule.resume", "admin-1"),
        ("schedule.delete", "admin-1"),
    ]


def test_compare_and_set_and_the_history_over_http(app: tether.App, world: dict[str, Any]) -> None:
    url = "/api/boards/incident/keys/owner"
    put = {"method": "PUT"}
    ok = _get(world, "operator", url, json={"value": {"name": "bob"}, "expected_version": 1}, **put)
    assert ok.status_code == 200, ok.text
    assert (ok.json()["version"], ok.json()["by"]) == (2, "operator-1")  # the token's name
    stale = _get(world, "operator", url, json={"value": "carol", "expected_version": 1}, **put)
    assert stale.status_code == 409
    error = stale.json()["error"]
    assert (error["type"], error["version"], error["expected"]) == ("VersionConflict", 2, 1)
    assert tuple(app.for_tenant(OWN).board("incident").get("owner")) == ({"name": "bob"}, 2)
    new = _get(
        world,
        "operator",
        "/api/boards/incident/keys/severity",
        json={"value": 2, "expected_version": 0},
        **put,
    )
    assert new.json()["version"] == 1
    history = _get(world, "viewer", url + "/history").json()
    assert [(c["version"], c["value"], c["by"]) for c in history["changes"]] == [
        (1, "alice", "pager"),
        (2, {"name": "bob"}, "operator-1"),
    ]
    paged = _get(world, "viewer", url + "/history?after=1&limit=1").json()
    assert [c["version"] for c in paged["changes"]] == [2] and paged["next_after"] == 2
    old = _get(world, "viewer", f"{url}?at={history['changes'][0]['at']}").json()
    assert (old["value"], old["version"]) == ("alice", 1)  # as it was then
    keys = _get(world, "viewer", "/api/boards/incident").json()["keys"]
    assert [(k["key"], k["version"]) for k in keys] == [("owner", 2), ("severity", 1)]


def test_a_write_a_run_made_names_its_run_and_step(app: tether.App, world: dict[str, Any]) -> None:
    @app.agent(name="claim")
    def claim(run: tether.Run) -> int:
        board = run.board("incident")
        _, version = board.get("owner")
        return board.set("owner", "agent", expected_version=version)

    run_id = app.for_tenant(OWN).run("claim").id
    last = _get(world, "viewer", "/api/boards/incident/keys/owner/history").json()["changes"][-1]
    assert (last["value"], last["run_id"]) == ("agent", run_id)
    assert isinstance(last["position"], int)


@pytest.mark.parametrize(
    ("method", "url", "body", "status", "says"),
    [
        ("PUT", "/api/boards/incident/keys/owner", {"expected_version": 1}, 422, "body.value"),
        (
            "PUT",
            "/api/boards/incident/keys/owner",
            {"value": 1, "expected_version": "1"},
            422,
            "expected_version",
        ),
        (
            "PUT",
            "/api/boards/incident/keys/owner",
            {"value": 1, "expected_version": -1},
            422,
            "expected_version",
        ),
        ("PUT", "/api/boards/incident/keys/owner", {"value": 1, "by": "eve"}, 422, "by"),
        ("PUT", "/api/boards/incident/keys/owner", [1, 2], 422, "body"),
        ("PUT", "/api/boards/incident/keys/owner", "not json", 422, "JSON"),
        ("GET", "/api/boards/no-such-board", None, 404, "no board 'no-such-board'"),
        ("GET", "/api/boards/incident/keys/nope", None, 404, "no key 'nope'"),
        ("GET", "/api/boards/incident?at=soon", None, 422, "at"),
        ("GET", "/api/boards/incident/keys/owner/history?limit=0", None, 422, "limit"),
        ("GET", "/api/schedules/nope", None, 404, "no schedule 'nope' (the schedules: nightly)"),
        ("POST", "/api/schedules/nope/resume", None, 404, "no schedule 'nope'"),
        ("DELETE", "/api/schedules/nope", None, 404, "no schedule 'nope'"),
    ],
)
def test_bad_input_is_a_clear_4xx(
    world: dict[str, Any], method: str, url: str, body: Any, status: int, says: str
) -> None:
    who = "operator" if "boards" in url else "admin"
    if body == "not json":
        headers = {**_as(world, who), "Content-Type": "application/json"}
        answer = world["api"].request(method, url, headers=headers, content=b"{not json")
    else:
        answer = _get(world, who, url, method=method, json=body)
    assert answer.status_code == status, answer.text
    assert says in answer.json()["error"]["message"], answer.text
