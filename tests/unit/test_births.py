"""A run created here (engine.births): its first state, built without decoding, is what
``fold`` makes of its first two events; its ``run.created`` refuses an input that cannot be
stored in the words of ``checked_input``."""

from __future__ import annotations

from typing import Any

import pytest

import tether
from tether.engine import births
from tether.engine.registry import AgentDef
from tether.errors import EncodeError, InvalidInput
from tether.model import events as ev
from tether.model.events import Event
from tether.model.state import fold

T = 1_800_000_000.5
AGENT = AgentDef("kid", "2", lambda run: None, False, {"module": "m", "qualname": "kid"})


def _folded(run_id: str, data: dict[str, Any]) -> Any:
    created = births.created(AGENT, (), {}, data, T)
    started = ev.new(ev.RUN_STARTED, {"by": "w", "epoch": 1}, T, "w")
    return fold(
        [
            Event(run_id, i, e.type, e.data, e.at, e.actor)
            for i, e in enumerate([created, started], 1)
        ]
    )


@pytest.mark.parametrize(
    "more",
    [
        {},
        {"queue": "default", "caller": {"run": "p", "pos": 3}},
        {"limits": {"tokens": 10}, "session": "s-1", "trace": "00-ab-cd-01"},
    ],
)
def test_the_first_state_is_the_fold_of_the_first_events(more: dict[str, Any]) -> None:
    data = {
        "agent": AGENT.name,
        "version": AGENT.version,
        "input": {"args": [1, "two", [3.5, None]], "kwargs": {"k": {"v": True}}},
        "code": AGENT.code,
        **more,
    }
    assert births.first_state("r~1", data, T) == _folded("r~1", data)


def test_an_input_that_cannot_be_stored_is_refused_naming_its_place() -> None:
    data = {"agent": "kid", "input": {"args": [1, object()], "kwargs": {}}}
    with pytest.raises(EncodeError, match=r"agent 'kid': its input cannot be stored: .* args\[1\]"):
        births.created(AGENT, (1, object()), {}, data, T)


def test_an_input_holding_a_literal_secret_is_refused() -> None:
    secret = tether.Secret("s3cr3t-value")
    data = {"agent": "kid", "input": {"args": [secret], "kwargs": {}}}
    with pytest.raises(InvalidInput, match=r"holds a tether.Secret at args\[0\]"):
        births.created(AGENT, (secret,), {}, data, T)
