"""Stateful property tests of a run's log over the whole event vocabulary, on both stores.

A hypothesis state machine plays an agent's life as the engine writes it (steps and
model calls with retries, write and read tools with their intents, outcomes, doubts and
resolutions, approvals, signal waits and timeouts, sleeps, decisions, task variables,
compensation, cancel, suspension, crashes and restarts under a new lease, forks at any
earlier point with edited variables), appending every event through the real store with
the lease's fencing token and the effects and signal writes the engine makes beside
them. Between the events it saves snapshots through :mod:`tether.store.snapshots` (pages of 2
or 3 positions as well as the default, so page sharing is reached), and after every
rule it checks, reading everything back through the store:

- ``fold(all) == fold(snapshot + rest)`` field by field, for every snapshot point, and
  the snapshot equals the fold of its prefix; the head the App's load path gives (newest
  snapshot + the events after it) equals the fold of the whole log;
- the fold agrees with an independent model of what was written (status, waiting,
  every position's kind, name, status, attempts, errors, output and key, variables,
  usage, committed);
- replay: a Journal on the loaded state returns every completed position's recorded
  result through the engine's own cores (step, tool, approve, wait, sleep) with
  functions that fail if called;
- one key, one effect: every tool call's key is unique in the run and its effects-table
  row has the status and result of the call.

Default: a few seconds of CPU per backend (20 runs of up to 40 actions).
``TETHER_LONG_PROPERTIES=1`` runs a long search (300 runs of up to 80);
``TETHER_NO_SHRINK=1`` reports a failure unshrunk (mutation testing);
``TETHER_MACHINE_STATS=1`` (with ``-s``) prints how often each event type was written.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import pytest
from _conformance import T0
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from tether.engine.calls import step_key
from tether.engine.effects import define_tool, tool_core
from tether.engine.gates import approve_core, sleep_core, wait_core
from tether.engine.journal import Journal
from tether.engine.retry import NO_RETRY
from tether.engine.runtime import drive
from tether.engine.steps import step_core
from tether.errors import ApprovalDenied, WaitTimeout
from tether.model import codec
from tether.model import events as ev
from tether.model.clock import FakeClock
from tether.model.state import RunState, fold
from tether.model.steps import StepState
from tether.store import EffectWrite, Lease, NewRun, SignalTake, Store, snapshots

pytestmark = pytest.mark.conformance

LONG = os.environ.get("TETHER_LONG_PROPERTIES") == "1"
SETTINGS = settings(
    max_examples=300 if LONG else 20,
    stateful_step_count=80 if LONG else 40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    # mutation testing wants the first failure fast, not the smallest one
    phases=[Phase.explicit, Phase.reuse, Phase.generate]
    if os.environ.get("TETHER_NO_SHRINK") == "1"
    else list(Phase),
)
SEEN: dict[str, int] = {}
TTL = 1e6  # leases never expire on their own here: a new execution takes over

text = st.text(st.characters(exclude_categories=("Cs",)), max_size=6)
values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)
call_args = st.lists(st.integers(0, 9), max_size=2)


@dataclass
class Pos:
    """What the model expects at one position."""

    kind: str
    name: str
    status: str
    attempts: int = 1
    output: Any = None
    key: str | None = None
    errors: int = 0
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    risk: str | None = None
    undone: bool = False  # a write tool whose compensation completed


@dataclass
class Model:
    """A run as the events written so far describe it (written without tether.model.state)."""

    positions: list[Pos] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)
    status: str = "queued"
    waiting: str | None = None  # approval | signal | timer | doubt
    waiting_known: bool = True  # a fork keeps what its parent waited for: not modelled
    output: Any = None
    failure_type: str | None = None
    compensating_from: int | None = None
    usage: list[int] = field(default_factory=lambda: [0, 0, 0])  # in, out, calls

    def open(self) -> Pos | None:
        if self.positions and self.positions[-1].status != "completed":
            return self.positions[-1]
        return None

    @property
    def committed(self) -> int:
        n = 0
        for p in self.positions:
            if p.status != "completed":
                break
            n += 1
        return n


def _tool_digest(args: list[Any], kwargs: dict[str, Any]) -> str:
    return codec.digest({"args": list(args), "kwargs": kwargs})


def _step_digest(args: list[Any], kwargs: dict[str, Any]) -> str:
    return codec.digest([list(args), kwargs])


def _boom(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("replay executed a call the log had completed")


def assert_same_state(a: RunState, b: RunState, where: str) -> None:
    """Field by field, each step field by field: a failure names the field."""
    for f in fields(RunState):
        if f.name == "steps":
            continue
        assert getattr(a, f.name) == getattr(b, f.name), f"{where}: RunState.{f.name}"
    assert len(a.steps) == len(b.steps), f"{where}: number of steps"
    for x, y in zip(a.steps, b.steps, strict=True):
        for f in fields(StepState):
            assert getattr(x, f.name) == getattr(y, f.name), (
                f"{where}: step {x.position} field {f.name}"
            )
    assert a.committed == b.committed, f"{where}: committed"


Weight = int | Callable[[Any], int]


def action(
    weight: Weight, when: Callable[[Any], bool], **params: st.SearchStrategy[Any]
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Mark a method as one thing the machine may do: how often (among the applicable
    ones), when it applies, and the strategies of its arguments. One rule (``act``)
    draws among them, so that the agent's work is drawn more often than the rare
    endings (a uniform draw between rules ended most runs within a few steps)."""

    def mark(fn: Callable[..., None]) -> Callable[..., None]:
        fn.__action__ = (weight, when, params)  # type: ignore[attr-defined]
        return fn

    return mark


def machine_on(store: Store) -> type[RuleBasedStateMachine]:
    """The state machine class, bound to one store (each example writes its own runs)."""
    counter = [0]

    class LogMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            counter[0] += 1
            self.n = counter[0]
            self.forks = 0
            self.now = T0
            self.effects: dict[str, tuple[str, Any]] = {}  # key -> status, result (global)
            self.run_id = ""
            self.owner = ""
            self.epoch = 0
            self.seq = 0
            self.model = Model()
            self.models: dict[int, Model] = {}  # seq -> the model after it (fork points)
            self.snaps: dict[int, RunState] = {}  # the current run's snapshots, loaded

        # -- writing ------------------------------------------------------------

        def tick(self) -> float:
            self.now += 1.0
            return self.now

        def append(
            self,
            *events: tuple[str, dict[str, Any]],
            writes: tuple[EffectWrite | SignalTake, ...] = (),
        ) -> None:
            new = [ev.new(t, d, self.tick(), self.owner) for t, d in events]
            for t, _ in events:
                SEEN[t] = SEEN.get(t, 0) + 1
            self.seq = store.append(
                self.run_id,
                new,
                expected_seq=self.seq,
                epoch=self.epoch,
                writes=writes,
                now=self.now,
            )
            self.models[self.seq] = copy.deepcopy(self.model)

        def take_lease(self) -> None:
            held = store.get_run(self.run_id).lease_owner
            self.owner = f"m{self.n}-{len(self.models)}"
            lease = store.claim(
                self.run_id, owner=self.owner, ttl=TTL, now=self.tick(), takeover=held
            )
            self.epoch = lease.epoch

        def new_pos(self, kind: str, name: str, status: str, **more: Any) -> Pos:
            p = Pos(kind, name, status, **more)
            self.model.positions.append(p)
            return p

        def base(self, p: Pos) -> dict[str, Any]:
            return {"pos": len(self.model.positions), "name": p.name, "kind": p.kind}

        def running(self) -> bool:
            return self.model.status == "running"

        def idle(self) -> bool:
            return self.running() and self.model.open() is None

        def open_is(self, kind: str, *statuses: str) -> bool:
            p = self.model.open()
            return self.running() and p is not None and p.kind == kind and p.status in statuses

        @initialize()
        def create(self) -> None:
            self.run_id = f"m{self.n}"
            self.owner = f"m{self.n}-0"
            created = {
                "agent": "a",
                "version": "1",
                "input": {"args": [1], "kwargs": {}},
                "code": {},
            }
            new = [
                ev.new(ev.RUN_CREATED, created, self.tick()),
                ev.new(ev.RUN_STARTED, {"by": self.owner, "epoch": 1}, self.tick()),
            ]
            run = NewRun(self.run_id, "a", "1", "running")
            store.create_run(run, new, lease_owner=self.owner, now=self.now, ttl=TTL)
            self.epoch, self.seq = 1, 2
            self.model.status = "running"
            self.models = {1: Model(), 2: copy.deepcopy(self.model)}

        def grown(self) -> bool:
            """Whether the run has enough positions for an ending to be worth drawing."""
            return len(self.model.positions) >= 5

        # -- executions ---------------------------------------------------------

        @action(
            lambda self: 1 if self.running() else 4,
            lambda self: self.model.status in ("queued", "running", "waiting", "failed"),
        )
        def begin_execution(self) -> None:
            """A crash and a restart (or a resume): a new lease, a new fencing token."""
            self.take_lease()
            self.model.status, self.model.waiting, self.model.waiting_known = "running", None, True
            self.append((ev.RUN_STARTED, {"by": self.owner, "epoch": self.epoch}))

        @action(1, lambda self: self.running())
        def suspend(self) -> None:
            self.model.status = "queued"
            self.append((ev.RUN_SUSPENDED, {"reason": "stopping", "status": "queued"}))

        # -- steps and model calls, with retries ---------------------------------

        @action(
            4,
            lambda self: self.idle(),
            kind=st.sampled_from(["step", "llm"]),
            args=call_args,
            failures=st.integers(0, 2),
            output=values,
            finishes=st.booleans(),
        )
        def step(
            self, kind: str, args: list[int], failures: int, output: Any, finishes: bool
        ) -> None:
            p = self.new_pos(kind, f"{kind}{len(self.model.positions) + 1}", "running")
            p.args, p.kwargs, p.attempts = args, {"n": len(args)}, 0
            for _ in range(failures):
                self.fail_step(p, final=False)
            if finishes:
                self.finish_step(p, output)
            elif failures == 0:
                self.fail_step(p, final=False)

        @action(
            6,
            lambda self: (
                self.open_is("step", "retrying", "failed")
                or self.open_is("llm", "retrying", "failed")
            ),
            output=values,
            outcome=st.sampled_from(["done", "retry", "final"]),
        )
        def retry_step(self, output: Any, outcome: str) -> None:
            """A step or model call that failed runs again (a retry, or a retried run)."""
            p = self.model.open()
            assert p is not None
            if outcome == "done":
                self.finish_step(p, output)
            else:
                self.fail_step(p, final=outcome == "final")

        def fail_step(self, p: Pos, *, final: bool) -> None:
            p.attempts += 1
            p.errors += 1
            p.status = "failed" if final else "retrying"
            data = {
                **self.base(p),
                "attempt": p.attempts,
                "digest": self.digest_of(p),
                "error": {"type": "E", "message": f"attempt {p.attempts}", "at": self.now},
                "retry_at": None if final else self.now + 5,
            }
            self.append((ev.STEP_FAILED, data))

        def digest_of(self, p: Pos) -> str:
            if p.kind == "tool":
                return _tool_digest(p.args, p.kwargs)
            return _step_digest(p.args, p.kwargs)

        def finish_step(self, p: Pos, output: Any) -> None:
            p.attempts += 1
            if p.kind == "llm":
                output = {"text": output, "usage": {"input_tokens": 3, "output_tokens": 2}}
                self.model.usage = [u + d for u, d in zip(self.model.usage, [3, 2, 1], strict=True)]
            p.status, p.output = "completed", output
            self.append((ev.STEP_COMPLETED, self.completion(p)))

        def completion(self, p: Pos) -> dict[str, Any]:
            """The step.completed data of ``p`` (its attempt and output as the model has them)."""
            return {
                **self.base(p),
                "attempt": p.attempts,
                "digest": self.digest_of(p),
                "output": p.output,
                "duration": 0.25,
            }

        # -- tools: intents, outcomes, doubts -----------------------------------

        @action(
            1,
            lambda self: self.idle(),
            name=st.sampled_from(["send", "charge"]),
            args=call_args,
            output=values,
        )
        def read_tool(self, name: str, args: list[int], output: Any) -> None:
            p = self.new_pos("tool", name, "running", risk="read", attempts=0)
            p.args, p.kwargs = args, {}
            self.finish_step(p, output)

        @action(
            4,
            lambda self: self.idle(),
            name=st.sampled_from(["send", "charge"]),
            args=call_args,
            risk=st.sampled_from(["write", "irreversible"]),
        )
        def tool_intent(self, name: str, args: list[int], risk: str) -> None:
            p = self.new_pos("tool", name, "running", risk=risk, attempts=0)
            p.args, p.kwargs = args, {"to": name}
            self.intent(p)

        @action(3, lambda self: self.open_is("tool", "retrying", "failed"))
        def tool_again(self) -> None:
            p = self.model.open()
            assert p is not None
            self.intent(p)

        def intent(self, p: Pos) -> None:
            pos = len(self.model.positions)
            digest = _tool_digest(p.args, p.kwargs)
            p.key = step_key(self.run_id, pos, p.name, digest)
            p.attempts += 1
            p.status = "running"
            data = {
                **self.base(p),
                "key": p.key,
                "attempt": p.attempts,
                "digest": digest,
                "risk": p.risk,
                "input": {"args": p.args, "kwargs": p.kwargs},
                "code": {"module": "m", "qualname": p.name},
            }
            self.effects[p.key] = ("intent", None)
            self.append(
                (ev.TOOL_INTENT, data),
                writes=(EffectWrite(p.key, self.run_id, pos, p.name, "intent"),),
            )

        def own_key(self) -> bool:
            p = self.model.open()
            return p is not None and (p.key or "").startswith(f"{self.run_id}:")

        @action(
            6,
            lambda self: self.open_is("tool", "running") and self.own_key(),
            output=values,
            outcome=st.sampled_from(["done", "retry", "final", "doubt"]),
        )
        def tool_outcome(self, output: Any, outcome: str) -> None:
            p = self.model.open()
            assert p is not None and p.key is not None
            pos = len(self.model.positions)
            if outcome == "done":  # the attempt the intent counted
                result = codec.encode(output)
                self.effects[p.key] = ("completed", output)
                p.status, p.output = "completed", output
                data = {**self.completion(p), "key": p.key}
                write = EffectWrite(p.key, self.run_id, pos, p.name, "completed", result)
                self.append((ev.STEP_COMPLETED, data), writes=(write,))
            elif outcome == "doubt":
                p.status = "in_doubt"
                self.model.status, self.model.waiting = "waiting", "doubt"
                self.append((ev.TOOL_IN_DOUBT, {"pos": pos, "name": p.name, "key": p.key}))
            else:
                p.attempts -= 1  # fail_step counts the attempt the intent counted
                self.fail_step(p, final=outcome == "final")

        @action(
            4,
            lambda self: (
                self.model.status == "waiting"
                and (self.model.open() or Pos("", "", "")).status == "in_doubt"
                and self.own_key()
            ),
            happened=st.booleans(),
            result=values,
        )
        def resolve(self, happened: bool, result: Any) -> None:
            p = self.model.open()
            assert p is not None and p.key is not None
            pos = len(self.model.positions)
            writes: tuple[EffectWrite, ...] = ()
            if happened:
                p.status, p.output = "completed", result
                self.effects[p.key] = ("completed", result)
                encoded = codec.encode(result)
                writes = (EffectWrite(p.key, self.run_id, pos, p.name, "completed", encoded),)
            else:
                p.status = "retrying"
            self.model.status, self.model.waiting = "queued", None
            data = {
                "pos": pos,
                "name": p.name,
                "key": p.key,
                "happened": happened,
                "result": result if happened else None,
                "by": "alice",
            }
            self.append((ev.TOOL_RESOLVED, data), writes=writes)

        # -- approvals, signals, sleeps ---------------------------------------------

        @action(2, lambda self: self.idle(), payload=values, timeout=st.none() | st.floats(1, 1000))
        def approval_requested(self, payload: Any, timeout: float | None) -> None:
            p = self.new_pos("approve", f"gate{len(self.model.positions) + 1}", "waiting")
            self.model.status, self.model.waiting = "waiting", "approval"
            data = {
                "pos": len(self.model.positions),
                "name": p.name,
                "payload": payload,
                "approvers": ["alice"],
                "timeout_at": None if timeout is None else self.now + timeout,
            }
            self.append((ev.APPROVAL_REQUESTED, data))

        @action(
            4,
            lambda self: (
                self.model.status == "waiting"
                and (self.model.open() or Pos("", "", "")).kind == "approve"
            ),
            approved=st.booleans(),
            reason=st.none() | text,
        )
        def approval_decided(self, approved: bool, reason: str | None) -> None:
            p = self.model.open()
            assert p is not None
            p.status = "completed"
            p.output = {"approved": approved, "by": "alice", "reason": reason}
            self.model.status, self.model.waiting = "queued", None
            data = {"pos": len(self.model.positions), "name": p.name, **p.output}
            self.append((ev.APPROVAL_DECIDED, data))

        @action(2, lambda self: self.idle(), timeout=st.none() | st.floats(1, 1000))
        def wait_started(self, timeout: float | None) -> None:
            p = self.new_pos("wait", f"signal{len(self.model.positions) + 1}", "waiting")
            self.model.status, self.model.waiting = "waiting", "signal"
            data = {
                "pos": len(self.model.positions),
                "name": p.name,
                "timeout_at": None if timeout is None else self.now + timeout,
            }
            self.append((ev.WAIT_STARTED, data))

        @action(
            4, lambda self: self.open_is("wait", "waiting"), payload=values, timed_out=st.booleans()
        )
        def wait_ends(self, payload: Any, timed_out: bool) -> None:
            """The resumed run takes the signal (marked taken in the same commit), or
            finds its timeout passed."""
            p = self.model.open()
            assert p is not None
            writes: tuple[SignalTake, ...] = ()
            if timed_out:
                p.output = {"timed_out": True}
            else:
                store.send_signal(
                    self.run_id, p.name, codec.encode(payload), sender="bob", now=self.tick()
                )
                signal = store.pending_signal(self.run_id, p.name)
                assert signal is not None and codec.decode(signal.payload) == payload
                p.output = {
                    "payload": payload,
                    "signal": signal.id,
                    "sent_at": signal.sent_at,
                    "sender": "bob",
                }
                writes = (SignalTake(signal.id, self.seq + 1),)
            p.status = "completed"
            data = {**self.base(p), "attempt": 1, "digest": None, "output": p.output}
            self.append((ev.STEP_COMPLETED, {**data, "duration": 0.0}), writes=writes)
            if not timed_out:
                assert store.pending_signal(self.run_id, p.name) is None  # taken once

        @action(2, lambda self: self.idle(), seconds=st.floats(0.5, 5000), suspend=st.booleans())
        def sleep(self, seconds: float, suspend: bool) -> None:
            p = self.new_pos("sleep", f"nap{len(self.model.positions) + 1}", "waiting")
            if suspend:
                self.model.status, self.model.waiting = "waiting", "timer"
            data = {
                "pos": len(self.model.positions),
                "name": p.name,
                "until": self.now + seconds,
                "suspend": suspend,
            }
            self.append((ev.TIMER_STARTED, data))

        @action(4, lambda self: self.open_is("sleep", "waiting"))
        def wake(self) -> None:
            p = self.model.open()
            assert p is not None
            p.status = "completed"
            data = {**self.base(p), "attempt": 1, "digest": None, "output": None}
            self.append((ev.STEP_COMPLETED, {**data, "duration": 1.0}))

        # -- decisions and task variables ---------------------------------------

        @action(2, lambda self: self.idle(), choice=values, why=text)
        def decide(self, choice: Any, why: str) -> None:
            p = self.new_pos("decide", f"route{len(self.model.positions) + 1}", "completed")
            p.output = choice
            data = {
                "pos": len(self.model.positions),
                "name": p.name,
                "choice": choice,
                "why": why,
                "details": {},
            }
            self.append((ev.DECISION, data))

        @action(
            2,
            lambda self: self.idle(),
            key=st.sampled_from(["a", "b"]),
            value=values,
            delete=st.booleans(),
        )
        def variable(self, key: str, value: Any, delete: bool) -> None:
            if delete and key not in self.model.vars:
                return
            p = self.new_pos("var", f"vars.{key}", "completed")
            data = {"pos": len(self.model.positions), "name": p.name, "key": key}
            if delete:
                del self.model.vars[key]
                self.append((ev.VAR_DELETED, data))
            else:
                self.model.vars[key] = p.output = value
                self.append((ev.VAR_SET, {**data, "value": value}))

        # -- compensation, endings ------------------------------------------------

        def undoable(self) -> list[int]:
            return [
                i
                for i, p in enumerate(self.model.positions, 1)
                if p.kind == "tool" and p.risk != "read" and p.status == "completed"
                if not p.undone and (p.key or "").startswith(f"{self.run_id}:")
            ]

        @action(
            2,
            lambda self: self.idle() and self.model.compensating_from is None and self.undoable(),
            reason=st.sampled_from(["failed", "cancelled"]),
        )
        def compensation_starts(self, reason: str) -> None:
            self.model.compensating_from = len(self.model.positions) + 1
            data = {
                "reason": reason,
                "error": {"type": "ValueError", "message": "x"},
                "from_position": self.model.compensating_from,
            }
            self.append((ev.RUN_COMPENSATING, data))

        @action(
            4,
            lambda self: (
                self.idle() and self.model.compensating_from is not None and self.undoable()
            ),
            output=values,
        )
        def undo(self, output: Any) -> None:
            target = self.undoable()[-1]
            tool = self.model.positions[target - 1]
            p = self.new_pos("compensate", f"undo:{tool.name}", "running")
            pos = len(self.model.positions)
            digest = codec.digest({"of": target, "key": tool.key})
            p.key = step_key(self.run_id, pos, p.name, digest)
            intent = {
                **self.base(p),
                "key": p.key,
                "attempt": 1,
                "digest": digest,
                "risk": tool.risk,
                "of": target,
                "input": None,
                "code": {},
            }
            self.append(
                (ev.TOOL_INTENT, intent),
                writes=(EffectWrite(p.key, self.run_id, pos, p.name, "intent"),),
            )
            p.status, p.output = "completed", output
            tool.undone = True
            self.effects[p.key] = ("completed", output)
            done = {**intent, "output": output, "duration": 0.1}
            for k in ("risk", "of", "input", "code"):
                del done[k]
            write = EffectWrite(p.key, self.run_id, pos, p.name, "completed", codec.encode(output))
            self.append((ev.STEP_COMPLETED, done), writes=(write,))

        @action(1, lambda self: self.idle() and self.grown(), output=values)
        def complete(self, output: Any) -> None:
            self.model.status, self.model.output, self.model.failure_type = (
                "completed",
                output,
                None,
            )
            self.append((ev.RUN_COMPLETED, {"output": output}))

        @action(1, lambda self: self.running() and self.grown())
        def fail(self) -> None:
            self.model.status, self.model.failure_type = "failed", "ValueError"
            self.append((ev.RUN_FAILED, {"error": {"type": "ValueError", "message": "x"}}))

        @action(
            1,
            lambda self: self.model.status in ("queued", "running", "waiting") and self.grown(),
            reason=st.none() | text,
        )
        def cancel(self, reason: str | None) -> None:
            self.model.status, self.model.waiting, self.model.failure_type = (
                "cancelled",
                None,
                "cancelled",
            )
            self.model.waiting_known = True
            self.append((ev.RUN_CANCELLED, {"by": "ops", "reason": reason}))

        # -- forks and snapshots -------------------------------------------------

        @action(
            1,
            lambda self: True,
            at=st.integers(0, 10**6),
            edits=st.none() | st.dictionaries(st.sampled_from(["a", "c"]), values, min_size=1),
            new_input=st.booleans(),
        )
        def fork(self, at: int, edits: dict[str, Any] | None, new_input: bool) -> None:
            """Branch off at an earlier point: the copy of the log up to it, then
            run.forked; the machine goes on with the new run (so forks of forks too)."""
            points = sorted(self.models)
            seq = points[at % len(points)]
            parent, model = self.run_id, copy.deepcopy(self.models[seq])
            copies = [
                ev.NewEvent(e.type, e.data, e.at, e.actor)
                for e in store.read_events(parent, upto=seq)
            ]
            self.forks += 1
            self.run_id = f"{parent}.f{self.forks}"
            data = {
                "parent": parent,
                "seq": seq,
                "position": model.committed,
                "input": {"args": [2], "kwargs": {}} if new_input else None,
                "vars": edits,
            }
            forked = ev.new(ev.RUN_FORKED, data, self.tick(), "ops")
            store.create_run(
                NewRun(self.run_id, "a", "1", "queued", parent_id=parent, fork_seq=seq),
                [*copies, forked],
                lease_owner=None,
                now=self.now,
                ttl=TTL,
            )
            model.status, model.output, model.failure_type = "queued", None, None
            model.waiting_known = False
            model.vars.update(edits or {})
            self.models = {s: m for s, m in self.models.items() if s <= seq}
            self.model, self.seq, self.snaps = model, seq + 1, {}
            self.models[self.seq] = copy.deepcopy(model)
            self.owner, self.epoch = "nobody", 0

        @action(3, lambda self: True, page_size=st.sampled_from([2, 3, snapshots.PAGE_SIZE]))
        def snapshot(self, page_size: int) -> None:
            """Cache the head as App.load does: newest snapshot + the rest, then save."""
            state = self.loaded()
            snapshots.save(store, state, self.now, page_size=page_size)
            got = store.load(self.run_id, upto=state.seq)
            assert got.snapshot is not None and got.snapshot.seq == state.seq and not got.events
            snap = snapshots.load(store, got.snapshot)
            prefix = fold(store.read_events(self.run_id, upto=state.seq))
            assert_same_state(snap, prefix, f"snapshot at {state.seq} vs its prefix")
            self.snaps[state.seq] = snap

        def loaded(self) -> RunState:
            got = store.load(self.run_id)
            start = snapshots.load(store, got.snapshot) if got.snapshot else None
            return fold(got.events, start, run_id=self.run_id)

        @rule(data=st.data())
        def act(self, data: st.DataObject) -> None:
            options: list[str] = []
            for name in ACTIONS:
                weight, when, _ = getattr(self, name).__action__
                if when(self):
                    options += [name] * (weight(self) if callable(weight) else weight)
            name = data.draw(st.sampled_from(options), label="action")
            method = getattr(self, name)
            params = method.__action__[2]
            method(**{k: data.draw(v, label=k) for k, v in params.items()})

        # -- invariants -----------------------------------------------------------

        @invariant()
        def log_folds_replays_and_effects_agree(self) -> None:
            if not self.run_id:
                return
            log = store.read_events(self.run_id)
            assert [e.seq for e in log] == list(range(1, self.seq + 1))
            whole, head = fold(log), self.loaded()
            assert_same_state(head, whole, "newest snapshot + rest")
            for s, snap in self.snaps.items():
                assert_same_state(fold(log[s:], snap), whole, f"snapshot at {s} + rest")
            self.check_model(whole)
            self.check_replay(head)
            self.check_effects()

        def check_model(self, s: RunState) -> None:
            m = self.model
            assert (s.status, s.committed, len(s.steps)) == (
                m.status,
                m.committed,
                len(m.positions),
            )
            if m.waiting_known:
                assert (s.waiting or {}).get("kind") == m.waiting
            assert dict(s.vars) == m.vars
            assert (s.usage.input_tokens, s.usage.output_tokens, s.usage.calls) == tuple(m.usage)
            if m.status == "completed":
                assert s.output == m.output
            assert (s.failure or {}).get("type") == m.failure_type
            assert (s.compensating or {}).get("from_position") == m.compensating_from
            for i, (got, want) in enumerate(zip(s.steps, m.positions, strict=True), 1):
                where = f"position {i}"
                assert (got.position, got.kind, got.name, got.status) == (
                    i,
                    want.kind,
                    want.name,
                    want.status,
                ), where
                assert (got.attempts, len(got.errors), got.key) == (
                    want.attempts,
                    want.errors,
                    want.key,
                ), where
                if want.status == "completed":
                    assert got.output == want.output, where

        def check_replay(self, state: RunState) -> None:
            """A Journal on the loaded state replays every completed position to what it
            recorded, through the engine's cores, executing nothing."""
            lease = Lease(self.run_id, self.owner, self.epoch, self.now + TTL)
            j = Journal(store, FakeClock(self.now), state, lease)
            for p in self.model.positions:
                if p.status != "completed":
                    break
                assert self.replayed(j, p) == _replay_value(p), f"position {j.pos}"
            assert j.executed == [] and j.pos == self.model.committed

        def replayed(self, j: Journal, p: Pos) -> Any:
            clock = j.clock
            if p.kind in ("step", "llm"):
                return drive(step_core(j, p.kind, p.name, _boom, p.args, p.kwargs, NO_RETRY), clock)
            if p.kind == "tool":
                tool = define_tool(
                    _boom,
                    name=p.name,
                    risk=p.risk or "write",
                    compensate=None,
                    on_doubt="retry",
                    retry=None,
                )
                return drive(tool_core(j, tool, p.args, p.kwargs, NO_RETRY), clock)
            if p.kind == "approve":
                return _outcome(lambda: approve_core(j, p.name, None, None, None), ApprovalDenied)
            if p.kind == "wait":
                return _outcome(lambda: wait_core(j, p.name, None), WaitTimeout)
            if p.kind == "sleep":
                return drive(sleep_core(j, p.name, "1h", 60.0), clock)
            slot = j.slot(p.kind, p.name)
            assert slot.done and slot.recorded is not None
            return slot.recorded.output

        def check_effects(self) -> None:
            """One key, one effect: keys unique in the run, each row as the call left it."""
            keys = [(i, p.key) for i, p in enumerate(self.model.positions, 1) if p.key]
            assert len({k for _, k in keys}) == len(keys), keys
            for pos, key in keys:
                assert key is not None
                effect = store.get_effect(key)
                assert effect is not None, key
                status, result = self.effects[key]
                assert (effect.status, effect.position, effect.run_id) == (
                    status,
                    pos,
                    key.split(":", 1)[0],
                ), key
                if status == "completed":
                    assert codec.decode(effect.result or "null") == result, key

    return LogMachine


ACTIONS = sorted(
    name
    for name, value in vars(machine_on(None)).items()  # type: ignore[arg-type]
    if hasattr(value, "__action__")
)


def _replay_value(p: Pos) -> Any:
    """What replaying a completed position gives the agent: a wait its payload."""
    if p.kind == "wait" and not p.output.get("timed_out"):
        return p.output["payload"]
    return p.output


def _outcome(call: Callable[[], Any], refused: type[Exception]) -> Any:
    """What an approval or a wait replays to: its decision / payload, or its refusal."""
    try:
        return call()
    except ApprovalDenied as e:
        assert refused is ApprovalDenied
        return {"approved": False, "by": e.by, "reason": e.reason}
    except WaitTimeout:
        assert refused is WaitTimeout
        return {"timed_out": True}


def test_the_log_machine(store: Store) -> None:
    run_state_machine_as_test(machine_on(store), settings=SETTINGS)
    if os.environ.get("TETHER_MACHINE_STATS"):  # how often each event type was written
        print(sorted(SEEN.items()))
