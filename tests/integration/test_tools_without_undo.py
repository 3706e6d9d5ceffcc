"""A tool declared without a compensation records so with its calls (its ``code``'s
``"undo": False``): a run that fails, a cancel with compensation, or a revert never looks
such a tool up. A tool declared outside the App (``@tether.tool`` in a function, as the
framework integrations declare each SDK tool) could not be found there, and every
failure of a run that had called one logged "no compensation for tool …: … is not a
tether tool any more; pass --app", about a tool that never had an undo."""

from __future__ import annotations

import logging

import pytest

import tether
from tether.engine.revert import RevertRefused


def test_a_failed_run_does_not_look_up_tools_that_have_no_undo(
    app: tether.App, caplog: pytest.LogCaptureFixture
) -> None:
    @tether.tool(risk="write")
    def ping(x: int) -> int:  # nested: not importable where the run recorded it
        return x

    @app.agent
    def agent(run: tether.Run) -> None:
        run.tool(ping, 1)
        raise ValueError("after the call")

    caplog.set_level(logging.WARNING, logger="tether")
    with pytest.raises(tether.RunFailed):
        app.run(agent)
    assert "no compensation" not in caplog.text
    step = app.get(app.runs()[0].id).steps[0]
    assert step.detail is not None and step.detail["code"]["undo"] is False
    with pytest.raises(RevertRefused, match="has no compensation"):  # not "pass --app"
        app.revert(app.runs()[0].id, step=1, by="ops")


def test_a_tool_with_an_undo_is_still_compensated(app: tether.App) -> None:
    undone: list[int] = []

    @app.tool(risk="write", compensate=lambda result, x, **_: undone.append(x))
    def charge(x: int) -> int:
        return x

    @app.tool(risk="write")
    def notify(x: int) -> int:  # no undo: skipped, and the walk goes on past it
        return x

    @app.agent
    def agent(run: tether.Run) -> None:
        run.tool(charge, 5)
        run.tool(notify, 6)
        run.tool(charge, 7)
        run.tool(notify, 8)
        raise ValueError("after the calls")

    with pytest.raises(tether.RunFailed):
        app.run(agent)  # a failure undoes what has an undo, newest first
    assert undone == [7, 5]
    step = app.get(app.runs()[0].id).steps[0]
    assert step.detail is not None and "undo" not in step.detail["code"]
