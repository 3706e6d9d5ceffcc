"""`tether approve|resolve` refuse a group's name as a person, and a call said to have
happened without its result; each refusal says what to do."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import tether
from tether.cli.main import main

pytestmark = pytest.mark.integration

_ANSWER = threading.Event()


@pytest.fixture(autouse=True)
def _answer() -> Iterator[None]:
    _ANSWER.clear()
    yield
    _ANSWER.set()  # the abandoned call returns


def _charge(amount: int) -> dict[str, int]:
    _ANSWER.wait(60)  # no answer within its timeout: in doubt
    return {"charge_id": 1}


def test_resolve_happened_needs_the_result(
    db_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with tether.open(db_path) as app:
        charge = app.tool(risk="write", retry=tether.Retry(timeout=0.05))(_charge)

        @app.agent
        def pay(run: tether.Run) -> Any:
            return run.tool(charge, 40)

        run_id = app.run(pay).id
    assert main(["--db", db_path, "resolve", run_id, "--happened", "--by", "alice"]) == 1
    err = capsys.readouterr().err
    assert "returns a value, or may" in err and "--result JSON" in err
    code = main(
        ["--db", db_path, "resolve", run_id, "--not-happened", "--result", "1", "--by", "a"]
    )
    assert code != 0 and "--result goes with --happened" in capsys.readouterr().err
    assert (
        main(
            ["--db", db_path, "resolve", run_id, "--happened", "--result", "null", "--by", "alice"]
        )
        == 0
    )
    with tether.open(db_path) as app:
        assert app.get(run_id).steps[0].output is None
        assert [r.action for r in app.audit(run_id)] == ["doubt.refused"]


def test_approve_as_a_group_is_refused(db_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    with tether.open(db_path, approver_groups={"ops": ["alice"]}) as app:

        @app.agent
        def refund(run: tether.Run) -> Any:
            return run.approve("send", approvers=["ops"])

        run_id = app.run(refund).id
    assert main(["--db", db_path, "approve", run_id, "send", "--by", "ops"]) == 1
    assert "'ops' is a group, not a person" in capsys.readouterr().err
