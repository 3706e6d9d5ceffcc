"""The App's settings can be changed after tether.open, and the next run obeys them
(they live in the executor, which the App forwards to)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tether

pytestmark = pytest.mark.integration


def test_a_policy_set_after_open_gates_the_next_run(tmp_path: Path) -> None:
    app = tether.open(str(tmp_path / "settings.db"))
    sent: list[str] = []

    @app.tool(risk="irreversible", on_doubt="ask")
    def wire(amount: int) -> int:
        sent.append("wire")
        return amount

    @app.agent
    def pay(run: tether.Run) -> int:
        return int(run.tool(wire, 5))

    app.policy = tether.Policy(approve_at="irreversible")
    handle = app.run(pay)
    assert handle.status == "waiting" and sent == []
    assert app.policy.approve_at == "irreversible"
    app.close()


def test_a_retry_set_after_open_is_the_default_of_the_next_step(tmp_path: Path) -> None:
    app = tether.open(str(tmp_path / "retry.db"))
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("flaky")
        return "ok"

    @app.agent
    def job(run: tether.Run) -> str:
        return str(run.step("flaky", flaky))

    app.retry = tether.Retry(max_attempts=3, backoff=0)
    assert app.run(job).output == "ok" and len(calls) == 3
    app.close()


def test_other_redaction_rules_while_an_app_is_open_are_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The rules are the process's: a second App setting others changes what the first
    stores too, and the log says so, naming both databases."""
    first = tether.open(str(tmp_path / "a.db"))
    try:
        with caplog.at_level("WARNING", logger="tether"):
            tether.open(str(tmp_path / "c.db"), redact=True).close()  # the same rules
            assert not caplog.records
            second = tether.open(str(tmp_path / "b.db"), redact=False)
        # (it names an open App: a.db, or another left open by the process before)
        assert "b.db sets other redaction rules for this process, where the App on" in caplog.text
        assert tether.encode("sk-proj-" + "a1" * 20) == '"sk-proj-' + "a1" * 20 + '"'
        second.close()
    finally:
        first.close()
        tether.open(str(tmp_path / "d.db"), redact=True).close()  # back to the defaults
