"""The agent the metrics tests (Prometheus and OpenTelemetry) observe: one model call that
reports 7 input and 2 output tokens and a cost of 0.25, then a step that fails once and is
retried."""

from __future__ import annotations

from typing import Any

import tether


def priced_agent(app: tether.App) -> tether.AgentDef:
    attempts = {"n": 0}

    def model() -> dict[str, Any]:
        return {"text": "ok", "usage": {"prompt_tokens": 7, "completion_tokens": 2, "cost": 0.25}}

    def flaky() -> int:
        attempts["n"] += 1
        if attempts["n"] == 1:
            raise ConnectionError("once")
        return 1

    @app.agent
    def priced(run: tether.Run) -> int:
        run.llm("ask", model)
        return int(run.step("flaky", flaky, retry=tether.Retry(max_attempts=3, backoff=0.001)))

    return priced
