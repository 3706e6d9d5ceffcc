"""The API's cost and budget: a run's usage per step and in all, totals per agent and per
session (a tenant's token sums its tenant's runs alone), and an operator raising the
budget of a run waiting on it (recorded under the token's identity), on both backends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from _conformance import Backend
from _server import OTHER, OWN, bearer, client, tokens

import tether

pytestmark = pytest.mark.conformance


@pytest.fixture
def app(backend: Backend) -> Iterator[tether.App]:
    a = tether.open(backend.url, prices={"small-1": tether.Price(input=1.0, output=2.0)})
    yield a
    a.close()


def model(prompt: str) -> dict[str, Any]:
    return {"model": "small-1", "usage": {"input_tokens": 1000, "output_tokens": 500}}


def test_cost_and_a_budget_raised_through_the_api(app: tether.App) -> None:
    @app.agent
    def chat(run: tether.Run, turns: int) -> int:
        for i in range(turns):
            run.llm(f"turn{i}", model, str(i))
        return turns

    one_call = tether.Limits(max_model_calls=1)
    own = app.for_tenant(OWN).run(chat, 2, limits=one_call).id
    app.for_tenant(OTHER).start(chat, 2, limits=one_call)
    app.resume(app.runs(status="queued")[0].id)
    made = tokens(app)
    api = client(app)

    page = api.get(f"/api/runs/{own}", headers=bearer(made["viewer"])).json()
    assert page["state"]["usage"] == {
        "input_tokens": 1000,
        "output_tokens": 500,
        "cost": pytest.approx(0.002),
        "calls": 1,
    }
    assert page["steps"][0]["usage"]["cost"] == pytest.approx(0.002)
    assert page["state"]["budget"]["exceeded"]["limit"] == "model_calls"
    assert page["run"]["status"] == "waiting"

    totals = api.get("/api/costs?by=agent", headers=bearer(made["viewer"])).json()
    assert totals == [
        {
            "key": "chat",
            "runs": 1,  # its tenant's run alone
            "calls": 1,
            "cost": pytest.approx(0.002),
            "input_tokens": 1000,
            "output_tokens": 500,
        }
    ]
    everyone = api.get("/api/costs", headers=bearer(made["admin"])).json()
    assert everyone[0]["runs"] == 2
    assert api.get("/api/costs?by=tenant", headers=bearer(made["admin"])).status_code == 422

    refused = api.post(
        f"/api/runs/{own}/budget", headers=bearer(made["approver"]), json={"add": {"steps": 1}}
    )
    assert refused.status_code == 403
    bad = api.post(
        f"/api/runs/{own}/budget", headers=bearer(made["operator"]), json={"add": {"pages": 1}}
    )
    assert bad.status_code == 422 and "unknown limit 'pages'" in bad.text
    ok = api.post(
        f"/api/runs/{own}/budget",
        headers=bearer(made["operator"]),
        json={"add": {"model_calls": 1}, "reason": "one more"},
    )
    assert ok.status_code == 200, ok.text
    assert ok.json()["status"] == "queued"
    (raised,) = [e for e in app.events(own) if e.type == "budget.raised"]
    assert raised.actor == "operator-1"
    assert raised.payload() == {
        "add": {"max_model_calls": 1},
        "by": "operator-1",
        "reason": "one more",
    }
    assert app.resume(own).output == 2
    again = api.post(
        f"/api/runs/{own}/budget", headers=bearer(made["operator"]), json={"add": {"steps": 1}}
    )
    assert again.status_code == 409 and "finished run's budget" in again.text
