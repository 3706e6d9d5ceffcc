"""``run.patched(name)``: one code base finishes old runs the old way and new runs the new
way, recorded in the log so that replays agree. On both backends."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

import tether
from tether.testing import replay

pytestmark = pytest.mark.conformance


class Orders:
    """An order agent: v1 charges then waits; v2 inserts a fraud check before the charge,
    behind the patch "fraud-check" (``patched``), or without one."""

    def __init__(self, app: tether.App) -> None:
        self.app = app
        self.code = "v1"
        self.calls: list[str] = []

        @app.tool(risk="write")
        def charge(amount: int, *, idempotency_key: str) -> str:
            self.calls.append("charge")
            return f"charged {amount}"

        def check_fraud(amount: int) -> str:
            self.calls.append("check_fraud")
            return "ok"

        @app.agent
        def order(run: tether.Run, amount: int) -> str:
            # v2: the patch retired, the new path only
            if self.code == "v2" or (self.code == "patched" and run.patched("fraud-check")):
                run.step("check_fraud", check_fraud, amount)
            receipt = run.tool(charge, amount)
            run.wait("shipped")
            return f"{receipt}, shipped"

        self.order = order

    def steps(self, rid: str) -> list[tuple[str, str]]:
        return [(s.kind, s.name) for s in self.app.get(rid).steps]


@pytest.fixture
def orders(app: tether.App) -> Orders:
    return Orders(app)


def test_an_old_run_takes_the_old_path_and_a_new_run_the_new_one(orders: Orders) -> None:
    old = orders.app.run(orders.order, 5).id  # charged under v1, waits
    queued = orders.app.start(orders.order, 6)  # created under v1, never executed
    orders.code = "patched"
    assert replay(orders.app, old).outcome == "continues"  # no block: the check passes
    orders.app.signal(old, "shipped")
    assert orders.app.resume(old).output == "charged 5, shipped"
    assert orders.steps(old) == [("tool", "charge"), ("wait", "shipped")]  # no marker

    new = orders.app.run(orders.order, 7).id
    assert orders.steps(new)[:2] == [("decide", "patch:fraud-check"), ("step", "check_fraud")]
    orders.app.signal(new, "shipped")
    assert orders.app.resume(new).output == "charged 7, shipped"  # replayed: patched again
    # a run that recorded nothing before the deploy has no old path to keep: the new one
    orders.app.resume(queued)
    assert orders.steps(queued)[0] == ("decide", "patch:fraud-check")
    assert orders.calls == ["charge", "check_fraud", "charge", "check_fraud", "charge"]


def test_retiring_a_patch_blocks_the_runs_in_flight_that_recorded_either_path(
    orders: Orders,
) -> None:
    old = orders.app.run(orders.order, 5).id
    orders.code = "patched"
    new = orders.app.run(orders.order, 7).id
    orders.code = "v2"  # the patch removed too early: both runs are still in flight
    old_report, new_report = replay(orders.app, old), replay(orders.app, new)
    assert (old_report.outcome, str(old_report.found)) == ("diverges", "step check_fraud")
    assert (new_report.outcome, new_report.position) == ("diverges", 1)
    assert new_report.recorded is not None and new_report.recorded.name == "patch:fraud-check"
    # once they finished, the code without the patch is safe for every new run
    orders.code = "patched"
    for rid in (old, new):
        orders.app.signal(rid, "shipped")
        assert orders.app.resume(rid).status == "completed"
    orders.code = "v2"
    assert orders.app.run(orders.order, 8).status == "waiting"


def test_a_patch_name_is_checked(app: tether.App) -> None:
    @app.agent
    def bad(run: tether.Run) -> bool:
        return run.patched("")

    with pytest.raises(tether.RunFailed, match="patch"):
        app.run(bad)


def test_a_replay_names_the_patches_a_run_relies_on(orders: Orders) -> None:
    """What `tether runs --needs-patch` and `tether check` read: a run that took the old
    path of a patch, or recorded its new one, relies on it; one that has not reached it
    (or finished) does not."""
    old = orders.app.run(orders.order, 5).id  # charged under v1
    queued = orders.app.start(orders.order, 6)  # never executed
    orders.code = "patched"
    new = orders.app.run(orders.order, 7).id
    assert replay(orders.app, old).patches == {"fraud-check": "old path"}
    assert replay(orders.app, new).patches == {"fraud-check": "recorded"}
    assert replay(orders.app, queued).patches == {}  # at its frontier: no path taken yet
    orders.code = "v1"  # code without the patch: nothing relies on what it does not call
    assert replay(orders.app, old).patches == {}


def test_a_patch_in_a_fan_out_branch_reads_the_branchs_own_position(app: tether.App) -> None:
    """``run.patched`` looks at the position its call takes: in a ``run.parallel`` branch,
    the one reserved for that branch, not the position after the fan-out (which a replay
    has recorded: read there, the patch would take the old path and the replay diverge);
    in an inline child executed in a branch, the child's own next position, not the
    parent's reserved one."""

    @app.agent
    def kid(run: tether.Run) -> bool:
        run.step("first", lambda: 1)
        new = run.patched("kid-fix")
        run.wait("kid-go")
        return new

    @app.agent
    def fan(run: tether.Run) -> list[Any]:
        got = run.parallel(
            lambda: run.patched("fix"),
            lambda: run.step("b", lambda: "b"),
            lambda: run.child(kid, inline=True),
        )
        run.step("after", lambda: "after")
        run.wait("go")
        return got

    handle = app.run(fan)
    assert handle.status == "waiting"  # for its inline child
    kid_id = f"{handle.id}~3"
    app.signal(kid_id, "kid-go", None)
    assert app.resume(handle.id).status == "waiting"  # the child replayed its patch
    app.signal(handle.id, "go", None)
    done = app.resume(handle.id)  # every position replayed from the log
    assert done.output == [True, "b", True]
    assert [(s.kind, s.name) for s in app.get(kid_id).steps][:2] == [
        ("step", "first"),
        ("decide", "patch:kid-fix"),
    ]


def test_a_patch_at_a_position_the_log_left_unrecorded_takes_the_new_path(
    app: tether.App,
) -> None:
    """A position with no record below recorded ones (a gap: a fan-out's branch in flight
    at a crash, or anywhere in an imported log) holds no step: a patch read there takes
    the new path and records it at that position, and the positions after it replay."""
    executed: list[str] = []
    code = ["v1"]

    def b() -> str:
        executed.append("b")
        return "b"

    @app.agent
    def order(run: tether.Run) -> Any:
        new = run.patched("fix") if code[0] == "patched" else run.step("a", lambda: "a")
        got = run.step("b", b)
        run.wait("go")
        return [new, got]

    first = app.run(order).id  # v1: a at 1, b at 2, waits at 3
    buf = io.StringIO()
    app.export_run(first, buf)
    header, *events = [json.loads(line) for line in buf.getvalue().splitlines()]
    events = [e for e in events if not (e["type"] == "step.completed" and e["data"]["pos"] == 1)]
    header["events"] = len(events)
    for seq, e in enumerate(events, 1):
        e["seq"] = seq
    lines = [json.dumps(header), *(json.dumps(e) for e in events)]
    gap = app.import_run(lines, new_id=True)
    assert [s.status for s in app.get(gap).steps] == ["unrecorded", "completed", "waiting"]
    code[0] = "patched"
    executed.clear()
    app.signal(gap, "go", None)
    assert app.resume(gap).output == [True, "b"]
    assert executed == []  # b replayed from its record at 2
    assert [(s.kind, s.name) for s in app.get(gap).steps][:2] == [
        ("decide", "patch:fix"),
        ("step", "b"),
    ]
