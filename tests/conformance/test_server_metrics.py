"""``GET /metrics`` on both backends: the database's gauges as Prometheus text, for an
admin token alone (the matrix in test_server_authz.py checks every role)."""

from __future__ import annotations

import pytest
from _server import OTHER, OWN, bearer, client, done_run, register, tokens, waiting_run

import tether

prometheus = pytest.importorskip("prometheus_client.parser")

pytestmark = pytest.mark.conformance


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in prometheus.text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_metrics_count_the_unfinished_runs_of_every_tenant(app: tether.App) -> None:
    register(app)
    made = tokens(app)
    waiting_run(app, OWN)
    waiting_run(app, OTHER)
    waiting_run(app, OWN, queue=True)
    done_run(app, OWN)  # finished: not among the gauges
    api = client(app)
    answer = api.get("/metrics", headers=bearer(made["admin"]))
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    got = _samples(answer.text)
    assert got[("tether_database_up", ())] == 1
    assert got[("tether_runs", (("agent", "refund"), ("status", "waiting")))] == 2
    assert got[("tether_runs", (("agent", "refund"), ("status", "queued")))] == 1
    assert not any(k[0] == "tether_runs" and ("agent", "done") in k[1] for k in got)
    assert got[("tether_queue_depth", (("queue", "default"),))] == 1
    assert got[("tether_runs_in_doubt", ())] == 0
    assert got[("tether_workers_live", ())] == 0
    # the engine's counters live in the worker processes, not in the server
    assert not any(k[0].startswith("tether_step_seconds") for k in got)


def test_metrics_without_a_token_or_below_admin_are_refused(app: tether.App) -> None:
    made = tokens(app)
    api = client(app)
    none = api.get("/metrics")
    assert none.status_code == 401
    assert "tether_" not in none.text
    viewer = api.get("/metrics", headers=bearer(made["viewer"]))
    assert viewer.status_code == 403
    assert "read the metrics" in viewer.json()["error"]["message"]
