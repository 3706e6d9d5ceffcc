"""The bad-input suite, API half (issue 25, point 12), on both backends.

A table of garbage for every parameter of the public API. Each case is tried and
counted: **clear** (a TetherError, ValueError or TypeError whose message names the
parameter, not a raw driver error, not a 1 MB echo), **accepted** (only where the
case documents why that is right), or **other** (anything else: a crash, a raw
driver error, a message that does not say what was wrong, a hang). The counts are
printed; the test fails if any case is "other". Afterwards the database still holds
what it held and a new run still runs (bad input never breaks the store).
The CLI half is tests/acceptance/test_bad_input_cli.py.
"""

from __future__ import annotations

import gc
import math
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from _conformance import Backend

import tether

pytestmark = pytest.mark.conformance

HANG = 60  # seconds after which a case counts as hanging (none takes a second)
BIG = 2**64
MB = "x" * 2**20


def _cyclic_list() -> list[Any]:
    x: list[Any] = []
    x.append(x)
    return x


def _cyclic_dict() -> dict[str, Any]:
    x: dict[str, Any] = {"a": [1]}
    x["a"].append(x)
    return x


def _deep() -> Any:
    x: Any = 1
    for _ in range(100_000):
        x = [x]
    return x


NAMES = ["", "\x00", "a\nb", MB, 7, b"q", "\ud800"]  # garbage for a name
REQUIRED_NAMES = [None, *NAMES]
INTS = [BIG, -BIG, 1.5, "3", True, math.nan]
DURATIONS = [math.nan, math.inf, -1, "1 parsec", [1], True, "1e5", 10**400]
IDS = ["", "\x00", 123, None, MB, "\ud800", "no-such-run"]  # runs to look up
VALUES = [_cyclic_list(), _cyclic_dict(), _deep(), object(), {1: {2: object()}}]
TEXTS = [5, "\x00", "x" * 100_000]


@dataclass
class World:
    """An app with runs in every state the cases look up."""

    app: tether.App
    backend: Backend
    done: str
    waiting: str
    doubt: str
    queued: str
    sqlite: str  # a SQLite file beside the backend's store, for the SQLite-only options


@dataclass(frozen=True)
class Case:
    """One try: ``call(world)`` with garbage for ``param``, whose message must name
    ``says`` (the parameter, as the message words it). ``accepted``: why returning
    normally is right (documented behaviour), else a return counts as "other"."""

    label: str
    says: str
    call: Callable[[World], Any]
    accepted: str = ""


def cases_for(
    label: str, says: str, garbage: list[Any], call: Callable[[World, Any], Any]
) -> list[Case]:
    return [Case(f"{label}={_show(g)}", says, _bind(call, g)) for g in garbage]


def _bind(call: Callable[[World, Any], Any], g: Any) -> Callable[[World], Any]:
    return lambda w: call(w, g)


def _show(g: Any) -> str:
    if isinstance(g, list | dict | tuple) and g and not isinstance(g, tuple):
        return f"<{type(g).__name__}>"  # cyclic and deep values have no repr
    text = repr(g)
    return text if len(text) <= 30 else text[:20] + "…"


def _in_agent(body: Callable[[tether.Run], Any]) -> Callable[[World], Any]:
    """Run ``body`` as an agent: its error fails the run (RunFailed names it)."""

    def call(w: World) -> Any:
        @w.app.agent(name="garbage_inside")
        def garbage_inside(run: tether.Run) -> Any:
            return body(run)

        return w.app.run(garbage_inside)

    return call


def _open(w: World, **kwargs: Any) -> None:
    tether.open(kwargs.pop("url", w.backend.url), **kwargs).close()


def _set_var(run: tether.Run, key: Any, value: Any) -> None:
    run.vars[key] = value


CASES: list[Case] = [
    # tether.open
    *cases_for("open url", "url", [None, "", 5, "a\x00b"], lambda w, g: _open(w, url=g)),
    *cases_for(
        "open durability", "durability", ["fast", None], lambda w, g: _open(w, durability=g)
    ),
    *cases_for(
        "open lease_ttl",
        "lease_ttl",
        [math.nan, 0, -1, "30", math.inf],
        lambda w, g: _open(w, lease_ttl=g),
    ),
    *cases_for(
        "open snapshot_every",
        "snapshot_every",
        [0, BIG, 1.5, "5"],
        lambda w, g: _open(w, snapshot_every=g),
    ),
    *cases_for(
        "open inline_sleep_max",
        "inline_sleep_max",
        [math.nan, -1],
        lambda w, g: _open(w, inline_sleep_max=g),
    ),
    *cases_for("open retry", "retry", ["x", 3], lambda w, g: _open(w, retry=g)),
    *cases_for("open policy", "policy", [5, "irreversible"], lambda w, g: _open(w, policy=g)),
    *cases_for(
        "open approver_groups",
        "approver_groups",
        ["ops", {"ops": "ann"}, {"": ["a"]}, {"ops": ["\x00"]}],
        lambda w, g: _open(w, approver_groups=g),
    ),
    *cases_for("open code", "code", [["a/b"], 5, ["evil.py"], [""]], lambda w, g: _open(w, code=g)),
    Case(
        "open linger= on SQLite",
        "linger",
        lambda w: _open(w, url=w.sqlite, linger=1),
    ),
    Case("open an unknown option", "bogus", lambda w: _open(w, bogus=1)),
    *cases_for("open lanes", "lanes", [0, BIG, "2"], lambda w, g: _open(w, lanes=g)),
    *cases_for("open linger", "linger", [math.nan, -1], lambda w, g: _open(w, linger=g)),
    *cases_for("open min_size", "min_size", [-1, BIG], lambda w, g: _open(w, min_size=g)),
    *cases_for("open timeout", "timeout", [math.nan, 0], lambda w, g: _open(w, timeout=g)),
    *cases_for("open schema", "schema", ["X Y", "", 5], lambda w, g: _open(w, schema=g)),
    *cases_for(
        "open busy_timeout",
        "busy_timeout",
        [math.nan, -1, "5"],
        lambda w, g: _open(w, url=w.sqlite, busy_timeout=g),
    ),
    # start / start_in / run: every parameter
    *cases_for("start agent", "agent", [*NAMES, None, "nope", len], lambda w, g: w.app.start(g)),
    *cases_for("start queue", "queue", REQUIRED_NAMES, lambda w, g: w.app.start("echo", queue=g)),
    *cases_for(
        "start priority", "priority", [*INTS, None], lambda w, g: w.app.start("echo", priority=g)
    ),
    *cases_for(
        "start run_id",
        "run_id",
        [*NAMES, "../x", "a b", "-x"],
        lambda w, g: w.app.start("echo", run_id=g),
    ),
    *cases_for(
        "start dedup_key", "dedup_key", NAMES, lambda w, g: w.app.start("echo", dedup_key=g)
    ),
    *cases_for(
        "start concurrency_key",
        "concurrency_key",
        NAMES,
        lambda w, g: w.app.start("echo", concurrency_key=g),
    ),
    *cases_for("start delay", "delay", DURATIONS, lambda w, g: w.app.start("echo", delay=g)),
    *cases_for("start input", "input", VALUES, lambda w, g: w.app.start("echo", x=g)),
    *cases_for("start_in session", "session id", NAMES, lambda w, g: w.app.start_in(g, "echo")),
    Case(
        "start_in session=None",
        "",
        lambda w: w.app.start_in(None, "echo"),
        accepted="documented: start_in(None, ...) is start(...), a run in no session",
    ),
    *cases_for("run agent", "agent", [*NAMES, None, "nope"], lambda w, g: w.app.run(g)),
    *cases_for("run input", "input", VALUES, lambda w, g: w.app.run("echo", x=g)),
    *cases_for(
        "run_in session", "session id", REQUIRED_NAMES, lambda w, g: w.app.run_in(g, "echo")
    ),
    # reading
    *cases_for("runs status", "status", ["", "\x00", 5], lambda w, g: w.app.runs(status=g)),
    *cases_for("runs agent", "agent", NAMES, lambda w, g: w.app.runs(agent=g)),
    *cases_for("runs limit", "limit", [*INTS, 0, -1, None], lambda w, g: w.app.runs(limit=g)),
    *cases_for("get", "run", IDS, lambda w, g: w.app.get(g)),
    *cases_for("load upto", "upto", [BIG, -1, "3", 1.5], lambda w, g: w.app.load(w.done, upto=g)),
    *cases_for("events", "run", IDS, lambda w, g: w.app.events(g)),
    *cases_for(
        "events after", "after", [*INTS, -1, None], lambda w, g: w.app.events(w.done, after=g)
    ),
    *cases_for("events upto", "upto", [BIG, -1, "9"], lambda w, g: w.app.events(w.done, upto=g)),
    *cases_for("history", "run", IDS, lambda w, g: w.app.history(g)),
    *cases_for("state", "run", IDS, lambda w, g: w.app.state(g)),
    *cases_for("state at", "at", [*INTS, -1], lambda w, g: w.app.state(w.done, at=g)),
    *cases_for(
        "state step",
        "step",
        [object(), "\x00", MB, 10**30, "no-such-step"],
        lambda w, g: w.app.state(w.done, step=g),
    ),
    *cases_for(
        "state when", "when", ["later", None, 5], lambda w, g: w.app.state(w.done, step=1, when=g)
    ),
    *cases_for("diff a", "run", IDS, lambda w, g: w.app.diff(g, w.done)),
    *cases_for("audit", "run", IDS, lambda w, g: w.app.audit(g)),
    *cases_for("effect key", "key", ["", "\x00", 5, None, MB], lambda w, g: w.app.effect(g)),
    *cases_for("export_run", "run", IDS, lambda w, g: w.app.export_run(g, _Sink())),
    # resuming and deciding
    *cases_for("resume", "run", IDS, lambda w, g: w.app.resume(g)),
    *cases_for("retry_run", "run", IDS, lambda w, g: w.app.retry_run(g)),
    *cases_for("cancel", "run", IDS, lambda w, g: w.app.cancel(g)),
    *cases_for("cancel by", "by", NAMES, lambda w, g: w.app.cancel(w.queued, by=g)),
    *cases_for("cancel reason", "reason", TEXTS, lambda w, g: w.app.cancel(w.queued, reason=g)),
    *cases_for("approve run", "run", IDS, lambda w, g: w.app.approve(g, "ship", by="ann")),
    *cases_for(
        "approve name", "name", REQUIRED_NAMES, lambda w, g: w.app.approve(w.waiting, g, by="ann")
    ),
    *cases_for(
        "approve by", "by", REQUIRED_NAMES, lambda w, g: w.app.approve(w.waiting, "ship", by=g)
    ),
    *cases_for(
        "approve reason",
        "reason",
        TEXTS,
        lambda w, g: w.app.approve(w.waiting, "ship", by="ann", reason=g),
    ),
    *cases_for("deny by", "by", REQUIRED_NAMES, lambda w, g: w.app.deny(w.waiting, "ship", by=g)),
    *cases_for("signal run", "run", IDS, lambda w, g: w.app.signal(g, "go")),
    *cases_for("signal name", "name", REQUIRED_NAMES, lambda w, g: w.app.signal(w.queued, g)),
    *cases_for(
        "signal sender", "sender", NAMES, lambda w, g: w.app.signal(w.queued, "go", sender=g)
    ),
    *cases_for("signal payload", "payload", VALUES, lambda w, g: w.app.signal(w.queued, "go", g)),
    *cases_for("resolve run", "run", IDS, lambda w, g: w.app.resolve(g, happened=True, by="ann")),
    *cases_for(
        "resolve happened",
        "happened",
        ["yes", None, 1],
        lambda w, g: w.app.resolve(w.doubt, happened=g, by="ann"),
    ),
    *cases_for(
        "resolve by", "by", REQUIRED_NAMES, lambda w, g: w.app.resolve(w.doubt, happened=True, by=g)
    ),
    *cases_for(
        "resolve result",
        "result",
        VALUES,
        lambda w, g: w.app.resolve(w.doubt, happened=True, by="ann", result=g),
    ),
    # time travel and retention
    *cases_for("fork", "run", IDS, lambda w, g: w.app.fork(g)),
    *cases_for("fork at", "at", [*INTS, -1], lambda w, g: w.app.fork(w.done, at=g)),
    *cases_for(
        "fork input", "input", ["x", 5, *VALUES], lambda w, g: w.app.fork(w.done, step=1, input=g)
    ),
    *cases_for(
        "fork vars",
        "vars",
        ["x", {"": 1}, {"k": _cyclic_list()}],
        lambda w, g: w.app.fork(w.done, step=1, vars=g),
    ),
    *cases_for(
        "gc older_than", "older_than", DURATIONS, lambda w, g: w.app.gc(older_than=g, dry_run=True)
    ),
    *cases_for(
        "gc blob_grace",
        "blob_grace",
        [*DURATIONS, None],
        lambda w, g: w.app.gc(keep_last=1, blob_grace=g, dry_run=True),
    ),
    *cases_for(
        "gc keep_last", "keep_last", [*INTS, -1], lambda w, g: w.app.gc(keep_last=g, dry_run=True)
    ),
    *cases_for(
        "gc status", "status", [["pwned"], [""]], lambda w, g: w.app.gc(status=g, dry_run=True)
    ),
    # queues, workers, sessions, registration
    *cases_for("queue name", "queue", REQUIRED_NAMES, lambda w, g: w.app.queue(g)),
    *cases_for(
        "queue concurrency",
        "concurrency",
        [0, BIG, 1.5, "2"],
        lambda w, g: w.app.queue("q", concurrency=g),
    ),
    *cases_for("queue per_key", "per_key", [0, -1, BIG], lambda w, g: w.app.queue("q", per_key=g)),
    *cases_for(
        "queue max_depth", "max_depth", [0, -1, BIG], lambda w, g: w.app.queue("q", max_depth=g)
    ),
    *cases_for(
        "queue rate",
        "rate",
        [(0, 1), (1, math.nan), "x", (1,), (BIG, 1)],
        lambda w, g: w.app.queue("q", rate=g),
    ),
    *cases_for(
        "worker queues",
        "queue",
        ["default", [], [""], None, ["\x00"]],
        lambda w, g: w.app.worker(queues=g),
    ),
    *cases_for(
        "worker concurrency",
        "concurrency",
        [0, BIG, "8", None, 1.5],
        lambda w, g: w.app.worker(concurrency=g),
    ),
    *cases_for("worker poll", "poll", [math.nan, 0, -1, "1"], lambda w, g: w.app.worker(poll=g)),
    *cases_for(
        "worker prefetch", "prefetch", [-1, BIG, "2"], lambda w, g: w.app.worker(prefetch=g)
    ),
    *cases_for("worker cpu", "cpu", ["x", -1, BIG], lambda w, g: w.app.worker(cpu=g).pin()),
    *cases_for("session id", "session id", REQUIRED_NAMES, lambda w, g: w.app.session(g)),
    *cases_for("session owner", "owner", NAMES, lambda w, g: w.app.session("s-1", owner=g)),
    *cases_for(
        "session keep_last",
        "keep_last",
        [-1, BIG, "6"],
        lambda w, g: w.app.session("s-2", keep_last=g),
    ),
    *cases_for("agent name", "name", NAMES, lambda w, g: w.app.agent(name=g)(lambda run: None)),
    *cases_for(
        "agent version",
        "version",
        NAMES,
        lambda w, g: w.app.agent(name="v", version=g)(lambda run: None),
    ),
    *cases_for(
        "tool risk", "risk", ["nuclear", None], lambda w, g: w.app.tool(risk=g)(lambda: None)
    ),
    *cases_for(
        "tool on_doubt",
        "on_doubt",
        ["never", "", 5],  # None is the default: derived from the tool (docs/guarantees.md)
        lambda w, g: w.app.tool(on_doubt=g)(lambda: None),
    ),
    *cases_for("tool name", "name", NAMES, lambda w, g: w.app.tool(name=g)(lambda: None)),
    *cases_for(
        "tool compensate",
        "compensate",
        [5, "undo"],
        lambda w, g: w.app.tool(compensate=g)(lambda: None),
    ),
    *cases_for("tool retry", "retry", [5, "3"], lambda w, g: w.app.tool(retry=g)(lambda: None)),
    # value objects
    *cases_for(
        "Retry max_attempts",
        "max_attempts",
        [0, 1.5, "3", BIG, None],
        lambda w, g: tether.Retry(max_attempts=g),
    ),
    *cases_for(
        "Retry backoff",
        "backoff",
        [math.nan, -1, math.inf, "1"],
        lambda w, g: tether.Retry(backoff=g),
    ),
    *cases_for(
        "Retry max_delay", "max_delay", [math.nan, -1], lambda w, g: tether.Retry(max_delay=g)
    ),
    *cases_for(
        "Retry jitter", "jitter", [2, -0.1, math.nan, "0.1"], lambda w, g: tether.Retry(jitter=g)
    ),
    *cases_for(
        "Retry timeout",
        "timeout",
        [0, -1, math.nan, math.inf, "5"],
        lambda w, g: tether.Retry(timeout=g),
    ),
    *cases_for(
        "Retry multiplier", "multiplier", [math.nan, -2], lambda w, g: tether.Retry(multiplier=g)
    ),
    *cases_for(
        "Retry retry_on", "retry_on", [5, "ValueError"], lambda w, g: tether.Retry(retry_on=g)
    ),
    *cases_for(
        "Policy approve_at", "approve_at", ["x", 5], lambda w, g: tether.Policy(approve_at=g)
    ),
    *cases_for(
        "Policy approvers",
        "approvers",
        [["\x00"], [""], [5]],
        lambda w, g: tether.Policy(approvers=g),
    ),
    *cases_for("Policy timeout", "timeout", DURATIONS, lambda w, g: tether.Policy(timeout=g)),
    # inside an agent: the run fails, and its failure says what was wrong
    *cases_for(
        "run.step name",
        "name",
        NAMES,
        lambda w, g: _in_agent(lambda run: run.step(g, lambda: 1))(w),
    ),
    *cases_for(
        "run.step args",
        "arguments",
        VALUES[:3],
        lambda w, g: _in_agent(lambda run: run.step("s", len, g))(w),
    ),
    *cases_for(
        "run.step result",
        "cannot be stored",
        VALUES,
        lambda w, g: _in_agent(lambda run: run.step("s", lambda: g))(w),
    ),
    *cases_for(
        "run.sleep", "sleep", DURATIONS, lambda w, g: _in_agent(lambda run: run.sleep("nap", g))(w)
    ),
    *cases_for(
        "run.wait timeout",
        "timeout",
        DURATIONS,
        lambda w, g: _in_agent(lambda run: run.wait("go", timeout=g))(w),
    ),
    *cases_for("run.wait name", "name", NAMES, lambda w, g: _in_agent(lambda run: run.wait(g))(w)),
    *cases_for(
        "run.approve timeout",
        "timeout",
        DURATIONS,
        lambda w, g: _in_agent(lambda run: run.approve("ok", timeout=g))(w),
    ),
    *cases_for(
        "run.approve name", "name", NAMES, lambda w, g: _in_agent(lambda run: run.approve(g))(w)
    ),
    *cases_for(
        "run.decide name",
        "name",
        NAMES,
        lambda w, g: _in_agent(lambda run: run.decide(g, choice=1))(w),
    ),
    *cases_for(
        "run.vars key",
        "name",
        ["", "\x00", 5, MB],
        lambda w, g: _in_agent(lambda run: _set_var(run, g, 1))(w),
    ),
    *cases_for(
        "run.vars value",
        "task variable",
        VALUES,
        lambda w, g: _in_agent(lambda run: _set_var(run, "k", g))(w),
    ),
    # not an iterable where one is taken ("'int' object is not iterable" said neither what
    # nor where), not a Retry where one is taken
    *cases_for(
        "run.map items",
        "run.map",
        [5, None],
        lambda w, g: _in_agent(lambda run: run.map("m", str, g))(w),
    ),
    *cases_for(
        "run.children items",
        "run.children",
        [5, None],
        lambda w, g: _in_agent(lambda run: run.children("garbage_inside", g))(w),
    ),
    *cases_for(
        "run.join", "run.join", [5, None, [5]], lambda w, g: _in_agent(lambda run: run.join(g))(w)
    ),
    *cases_for(
        "run.step retry",
        "retry",
        [3, "3", {"max_attempts": 3}],
        lambda w, g: _in_agent(lambda run: run.step("s", len, "x", retry=g))(w),
    ),
    *cases_for(
        "run.handoff vars",
        "vars",
        [5, {"x": 1}, [3]],
        lambda w, g: _in_agent(lambda run: run.handoff("garbage_inside", vars=g))(w),
    ),
]


class _Sink:
    def write(self, text: str) -> int:
        return len(text)


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Hang(f"no answer within {HANG} s")


FULL_GC_EVERY = 100
_cases_run = [0]


def _collect_between_cases() -> None:
    _cases_run[0] += 1
    gc.collect(2 if _cases_run[0] % FULL_GC_EVERY == 0 else 1)


def outcome(case: Case, world: World) -> tuple[str, str]:
    """("clear" | "accepted" | "other", what happened)."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG)
    # A value nested past the recursion limit is walked until Python refuses; a garbage
    # collection that starts down there runs unrelated finalizers (a closed store's) with
    # no stack left. So none runs during a case: the collector is off, and the young
    # generations are collected between cases, at a shallow depth (a full collection,
    # ~75 ms on this heap, only every FULL_GC_EVERY cases: it was 90% of the suite's time).
    _collect_between_cases()
    gc.disable()
    try:
        result = case.call(world)
    except (tether.TetherError, ValueError, TypeError) as e:
        return _judge(case, e)
    except BaseException as e:
        return "other", f"{type(e).__module__}.{type(e).__name__}: {str(e)[:200]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        gc.enable()
    if case.accepted:
        return "accepted", case.accepted
    return "other", f"accepted without a word: returned {str(result)[:100]}"


def _judge(case: Case, e: BaseException) -> tuple[str, str]:
    message = str(e)
    kind = f"{type(e).__module__}.{type(e).__name__}"
    if type(e).__module__.split(".")[0] in ("sqlite3", "psycopg", "json", "orjson"):
        return "other", f"a raw driver error {kind}: {message[:200]}"
    if isinstance(e, UnicodeError):
        return "other", f"a raw {kind}: {message[:200]}"
    if len(message) > 2000:
        return "other", f"a message of {len(message)} characters (echoes the value?)"
    if case.says.lower() not in message.lower():
        return "other", f"{kind} does not name {case.says!r}: {message[:300]}"
    return "clear", f"{kind}: {message[:120]}"


@pytest.fixture
def world(backend: Backend, tmp_path: Path) -> Iterator[World]:
    app = tether.open(backend.url)
    paused: set[str] = set()

    @app.agent
    def echo(run: tether.Run, x: Any = None) -> int:
        return int(run.step("s", lambda: 1))

    @app.agent
    def gated(run: tether.Run) -> Any:
        return run.approve("ship", approvers=["ann"])

    @app.tool(risk="write", on_doubt="ask")
    def transfer(*, idempotency_key: str) -> int:
        if not paused:
            paused.add(idempotency_key)
            raise KeyboardInterrupt  # dies mid-call: whether it happened is in doubt
        return 1

    @app.agent
    def doubtful(run: tether.Run) -> Any:
        return run.tool(transfer)

    done = app.run(echo).id
    waiting = app.run(gated).id
    with pytest.raises(KeyboardInterrupt):
        app.run(doubtful)
    doubt = app.runs(agent="doubtful")[0].id
    assert app.resume(doubt).status == "waiting"
    queued = app.start(echo)
    yield World(app, backend, done, waiting, doubt, queued, str(tmp_path / "other.db"))
    app.close()


def test_garbage_for_every_parameter_gets_a_clear_error(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    before = {r.id: (r.status, len(world.app.events(r.id))) for r in world.app.runs()}
    results = [(c, *outcome(c, world)) for c in CASES]
    counts = {k: sum(1 for _, o, _ in results if o == k) for k in ("clear", "accepted", "other")}
    others = [f"  {c.label}: {why}" for c, o, why in results if o == "other"]
    with capsys.disabled():
        print(
            f"\nbad-input suite, API on {world.backend.name}: tried {len(results)}, "
            f"clear error {counts['clear']}, documented accept {counts['accepted']}, "
            f"other {counts['other']}"
        )
    assert not others, "not a clear error:\n" + "\n".join(others)
    # nothing stored was lost or changed by the garbage, and the store still works
    after = {r.id: (r.status, len(world.app.events(r.id))) for r in world.app.runs(limit=1000)}
    for run_id, seen in before.items():
        if run_id != world.queued:  # garbage cancels were refused, but a valid one may not be
            assert after[run_id] == seen, run_id
    assert world.app.run("echo").output == 1
