"""``GET /metrics``: the database's gauges as Prometheus text (admin: they span tenants).

The numbers are those of :class:`tether.services.metrics.DatabaseCollector` (unfinished
runs by status and agent, queue depths and oldest wait, runs in doubt, live workers), read
at each scrape from indexes. The engine's counters live in the worker processes: scrape
``tether worker --metrics-port`` for them. An admin token is needed because the agents,
queues and workers of every tenant are named, as ``/api/queues`` and ``/api/workers`` do.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from tether.server import schemas
from tether.server.deps import Caller

router = APIRouter(responses={code: {"model": schemas.ErrorBody} for code in (401, 403, 503)})

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # the Prometheus text format


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text"}},
)
def metrics(caller: Caller) -> Response:
    """The database's gauges in the Prometheus text format (admin)."""
    caller.require("metrics")
    from tether.services import metrics as m  # the metrics extra: loaded on first scrape

    body = m.text(m.registry(caller.app, with_engine=False))
    return Response(content=body, media_type=CONTENT_TYPE)
