"""PostgreSQL only: the group commit of appends, and its libpq write path (pgwire).

Appends from many threads share commits: a batch is one pipeline and one
transaction; an append that fails in it (a taken seq, a stale fencing token) fails
alone, the others commit. Values reach the server intact (arrays, quotes,
backslashes, non-ASCII), NUL is refused rather than cut, and a lost connection
fails only the write in flight.
"""

from __future__ import annotations

import json
import threading

import psycopg
import pytest
from _conformance import PG_URL, Backend, until

import tether
from tether.errors import Conflict, EncodeError, LeaseLost, StoreError
from tether.model.events import NewEvent
from tether.store import EffectWrite, NewRun, WorkerRecord
from tether.store.groupcommit import Pending
from tether.store.pgwire import Prepared, WireConnection
from tether.store.postgres import PostgresStore
from tether.store.postgres.statements import _append_statement

NOW = 1_000.0


def _store(pg_backend: Backend) -> PostgresStore:
    store = pg_backend.open()
    assert isinstance(store, PostgresStore)
    return store


def _run(store: PostgresStore, run_id: str) -> None:
    store.create_run(NewRun(run_id, "agent", None, "running"), [], lease_owner="w", now=NOW, ttl=60)


def _event(i: int, data: str = '{"n": 0}', actor: str | None = "w") -> NewEvent:
    return NewEvent("step.completed", data, NOW + i, actor)


def _pending(run_id: str, expected: int, epoch: int = 1, data: str = '{"n": 0}') -> Pending:
    stmt = _append_statement(
        run_id, [_event(expected, data)], expected, epoch, NOW, (None, None, ())
    )
    return Pending(stmt)


def test_a_batch_is_one_transaction(pg_backend: Backend) -> None:
    store = _store(pg_backend)
    for r in ("a", "b", "c"):
        _run(store, r)
    batch = [_pending("c", 0), _pending("a", 0), _pending("b", 0)]
    store._flush(batch, 0)
    assert [p.outcome() for p in batch] == [(True, True)] * 3
    rows = pg_backend.sql("SELECT run_id, seq, xmin::text FROM events ORDER BY run_id")
    assert [(r, s) for r, s, _ in rows] == [("a", 1), ("b", 1), ("c", 1)]
    assert len({x for _, _, x in rows}) == 1  # one transaction wrote all three


def test_a_taken_seq_fails_alone_and_the_rest_of_the_batch_commits(pg_backend: Backend) -> None:
    store = _store(pg_backend)
    for r in ("a", "b", "c"):
        _run(store, r)
    store.append("b", [_event(0)], expected_seq=0, epoch=1, now=NOW)
    batch = [_pending("a", 0), _pending("b", 0, data='{"late": 1}'), _pending("c", 0)]
    store._flush(batch, 0)
    assert batch[0].outcome() == (True, True)
    assert batch[2].outcome() == (True, True)
    with pytest.raises(psycopg.errors.UniqueViolation):
        batch[1].outcome()
    rows = pg_backend.sql("SELECT run_id, seq, data FROM events ORDER BY run_id, seq")
    assert rows == [("a", 1, '{"n": 0}'), ("b", 1, '{"n": 0}'), ("c", 1, '{"n": 0}')]


def test_a_stale_fencing_token_in_a_batch_writes_nothing_for_that_run(pg_backend: Backend) -> None:
    store = _store(pg_backend)
    for r in ("a", "b"):
        _run(store, r)
    store.claim("b", owner="other", ttl=60, now=NOW + 1, takeover="w")  # b is at epoch 2 now
    batch = [_pending("a", 0), _pending("b", 0, epoch=1)]
    store._flush(batch, 0)
    assert batch[0].outcome() == (True, True)
    assert batch[1].outcome() == (False, True)  # append() turns this into LeaseLost
    assert pg_backend.sql("SELECT run_id FROM events") == [("a",)]
    with pytest.raises(LeaseLost, match="epoch 1"):
        store.append("b", [_event(0)], expected_seq=0, epoch=1, now=NOW)


@pytest.mark.parametrize("linger", [0.0, 0.0005, 0.05])
def test_threads_share_commits_and_lose_nothing(pg_backend: Backend, linger: float) -> None:
    store = pg_backend.open(linger=linger)
    assert isinstance(store, PostgresStore)
    threads, per_thread = 8, 40
    for t in range(threads):
        _run(store, f"r{t}")
    start = threading.Barrier(threads)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            start.wait()
            seq = 0
            for i in range(per_thread):
                writes = (
                    [EffectWrite(f"r{t}:{i}", f"r{t}", i + 1, "tool", "intent")] if i % 5 else []
                )
                seq = store.append(
                    f"r{t}", [_event(i)], expected_seq=seq, epoch=1, writes=writes, now=NOW
                )
        except BaseException as e:
            errors.append(e)

    # The first writes are held at the database (a lock on the events table) until every
    # thread has one out: the 2 lanes are busy and 6 writes queue, so at least one batch
    # carries several of them, whatever the machine's speed; then everything flows.
    blocker = psycopg.connect(PG_URL, options=f"-c search_path={pg_backend.schema}")
    blocker.execute("LOCK TABLE events IN SHARE MODE")
    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    try:
        assert until(lambda: store._commits._waiting == threads - 2, 30)
    finally:
        blocker.rollback()
        blocker.close()
    for w in workers:
        w.join()
    assert errors == []
    rows = pg_backend.sql("SELECT run_id, count(*), min(seq), max(seq) FROM events GROUP BY run_id")
    assert sorted(rows) == sorted((f"r{t}", per_thread, 1, per_thread) for t in range(threads))
    effects = pg_backend.sql("SELECT count(*) FROM effects")
    assert effects == [(threads * (per_thread - per_thread // 5),)]
    assert store._commits.writes == threads * per_thread
    assert store._commits.batches <= store._commits.writes - (threads - 2 - 2)  # 6 queued, in
    # at most 2 batches (one per lane freed): at least 4 commits were shared
    if linger >= 0.05:  # the threads write again at once: they wait for each other
        assert store._commits.batches <= store._commits.writes // 2


def test_values_reach_the_server_intact(pg_backend: Backend) -> None:
    store = _store(pg_backend)
    _run(store, "a")
    awkward = '{"q": "say \\"hi\\"", "bs": "C:\\\\tmp", "u": "żółw ✓", "br": "{a,b}", "n": null}'
    events = [_event(0, awkward, actor='o"Brien\\x'), _event(1, "[]", actor=None)]
    fx = EffectWrite("a:1", "a", 1, "to,ol", "done", '{"r": "a\\\\b \\"c\\""}')
    store.append("a", events, expected_seq=0, epoch=1, writes=[fx], now=NOW)  # the general path
    got = store.read_events("a")
    assert [(e.seq, e.data, e.actor, e.at) for e in got] == [
        (1, awkward, 'o"Brien\\x', NOW),
        (2, "[]", None, NOW + 1),
    ]
    effect = store.get_effect("a:1")
    assert effect is not None and (effect.tool, effect.result) == ("to,ol", fx.result)


def test_nul_is_refused_not_cut(pg_backend: Backend) -> None:
    store = _store(pg_backend)
    _run(store, "a")
    with pytest.raises(EncodeError, match=r"run a: .*NUL"):
        store.append("a", [_event(0, actor="w\x00x")], expected_seq=0, epoch=1, now=NOW)
    assert pg_backend.sql("SELECT count(*) FROM events") == [(0,)]
    assert store.append("a", [_event(0)], expected_seq=0, epoch=1, now=NOW) == 1


def test_a_lost_connection_fails_the_write_in_flight_and_the_next_reconnects(
    pg_backend: Backend,
) -> None:
    store = _store(pg_backend)
    _run(store, "a")
    assert store.append("a", [_event(0)], expected_seq=0, epoch=1, now=NOW) == 1
    wire = store._wires[0]
    assert wire is not None
    pid = wire._pg.backend_pid
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(StoreError, match=r"lost the connection.*may or may not"):
        store.append("a", [_event(1)], expected_seq=1, epoch=1, now=NOW)
    # the write did not reach the server; the next one opens a new connection
    assert store.append("a", [_event(1)], expected_seq=1, epoch=1, now=NOW) == 2
    assert [e.seq for e in store.read_events("a")] == [1, 2]
    with pytest.raises(Conflict):
        store.append("a", [_event(1)], expected_seq=1, epoch=1, now=NOW)


def test_prepared_queries_number_named_parameters_and_keep_their_casts() -> None:
    q = Prepared("t", "SELECT %(a)s::text, %(b)s::bigint[], %(a)s::text, 100 %% 7")
    assert q.sql == b"SELECT $1::text, $2::bigint[], $1::text, 100 % 7"
    assert q.params == ("a", "b")
    assert q.values({"a": "x", "b": [1, None, 3]}) == [b"x", b'{"1",NULL,"3"}']
    with pytest.raises(TypeError, match="parameter b: expected an int, got str"):
        q.values({"a": "x", "b": ["1"]})
    with pytest.raises(ValueError, match="positional"):
        Prepared("bad", "SELECT %s::text")


def test_arrays_of_awkward_text_round_trip_through_the_server(pg_backend: Backend) -> None:
    store = _store(pg_backend)
    wire = WireConnection(store.direct_conninfo)
    try:
        q = Prepared("echo", "SELECT array_to_json(%(a)s::text[])::text, %(f)s::float8::text")
        items = ['a"b', "c\\d", "{e,f}", "", None, "żółw ✓", "NULL"]
        res = wire.execute(q, q.values({"a": items, "f": 0.1 + 0.2}))
        assert json.loads(res.get_value(0, 0) or b"") == items
        assert float(res.get_value(0, 1) or b"") == 0.1 + 0.2  # shortest exact digits
    finally:
        wire.close()


def test_an_append_posted_without_waiting_is_committed_by_flush(pg_backend: Backend) -> None:
    store = _store(pg_backend)
    _run(store, "a")
    assert store.append("a", [_event(0)], expected_seq=0, epoch=1, now=NOW, wait=False) == 1
    store.flush()
    assert [e.seq for e in store.read_events("a")] == [1]


def test_a_posted_append_that_fails_is_logged_and_writes_nothing(
    pg_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    store = _store(pg_backend)
    _run(store, "a")
    store.claim("a", owner="other", ttl=60, now=NOW + 1, takeover="w")  # epoch 2 now
    store.append("a", [_event(0)], expected_seq=0, epoch=1, now=NOW, wait=False)  # no raise
    store.flush()
    assert store.read_events("a") == []
    assert "lease of epoch 1 was superseded" in caplog.text
    store.append("a", [_event(0)], expected_seq=0, epoch=2, now=NOW)
    store.append("a", [_event(1)], expected_seq=0, epoch=2, now=NOW, wait=False)  # seq taken
    store.flush()
    assert "run a: its final event was not committed" in caplog.text
    assert [e.seq for e in store.read_events("a")] == [1]


def test_close_commits_what_was_posted(pg_backend: Backend) -> None:
    store = _store(pg_backend)
    _run(store, "a")
    store.append("a", [_event(0)], expected_seq=0, epoch=1, now=NOW, wait=False)
    store.close()
    assert pg_backend.sql("SELECT seq FROM events WHERE run_id = 'a'") == [(1,)]


@pytest.mark.parametrize("lanes", [0, -1, 1.5, True, "2"])
def test_bad_lanes_are_refused_before_connecting(lanes: object) -> None:
    with pytest.raises(ValueError, match=r"lanes .* must be an int >= 1"):
        PostgresStore("postgresql://nobody@127.0.0.1:1/none", lanes=lanes)  # type: ignore[arg-type]


@pytest.mark.parametrize("linger", [-0.001, float("nan"), "0.001", True, None])
def test_a_bad_linger_is_refused_before_connecting(linger: object) -> None:
    with pytest.raises(ValueError, match=r"linger .* must be a number >= 0"):
        PostgresStore("postgresql://nobody@127.0.0.1:1/none", linger=linger)  # type: ignore[arg-type]


def test_lanes_open_their_connections_on_first_use(pg_backend: Backend) -> None:
    store = pg_backend.open(lanes=3)
    assert isinstance(store, PostgresStore)
    assert store._wires == [None, None, None]
    _run(store, "a")
    store.append("a", [_event(0)], expected_seq=0, epoch=1, now=NOW)
    assert sum(w is not None for w in store._wires) == 1


def test_a_lone_worker_keeps_two_lanes_and_each_of_several_one(pg_backend: Backend) -> None:
    store = pg_backend.open()
    assert isinstance(store, PostgresStore)
    assert (store._commits.lanes, store._commits.active) == (2, 2)
    store.workers_sharing(3)
    assert store._commits.active == 1
    store.workers_sharing(1)
    assert store._commits.active == 2
    fixed = pg_backend.open(lanes=3)  # lanes given: kept whatever the workers
    assert isinstance(fixed, PostgresStore)
    fixed.workers_sharing(5)
    assert fixed._commits.active == 3


def test_a_worker_tells_its_store_how_many_live_workers_share_the_database(
    pg_backend: Backend,
) -> None:
    app = tether.open(pg_backend.url)
    store = app.store
    assert isinstance(store, PostgresStore)
    now = app.clock.now()
    other = WorkerRecord("worker:elsewhere:1:x", "elsewhere", 1, ["default"], 8, now, now)
    app.store.register_worker(other, now=now)  # alive: it beat just now
    try:
        app.worker(poll=0.01).run(until_idle=True, install_signals=False)
        assert store._commits.active == 1
        app.store.remove_worker(other.id, expire_leases=False)
        app.worker(poll=0.01).run(until_idle=True, install_signals=False)
        assert store._commits.active == 2
        beating = app.worker()  # later, each heartbeat counts them again
        beating._register()
        app.store.register_worker(other, now=app.clock.now())
        beating._beat()
        assert store._commits.active == 1
        app.store.remove_worker(other.id, expire_leases=False)
        beating._beat()
        assert store._commits.active == 2
    finally:
        app.close()


def test_flush_without_waiting_returns_while_a_batch_is_in_flight_and_the_post_commits(
    pg_backend: Backend,
) -> None:
    """A worker's claiming loop calls flush(wait=False) before it sleeps: it must not
    wait for the busy lane, and the append posted meanwhile is still committed, by the
    busy lane's leader, with no further call."""
    store = _store(pg_backend)
    store.workers_sharing(2)  # one lane: the post finds it busy
    for r in ("a", "b"):
        _run(store, r)
    entered, release = threading.Event(), threading.Event()
    flush = store._commits._flush

    def held(batch: list[Pending], lane: int) -> None:
        entered.set()
        assert release.wait(10)
        flush(batch, lane)

    store._commits._flush = held
    leader = threading.Thread(
        target=store.append, args=("a", [_event(0)]), kwargs=dict(expected_seq=0, epoch=1, now=NOW)
    )
    leader.start()
    assert entered.wait(10)
    store.append("b", [_event(0)], expected_seq=0, epoch=1, now=NOW, wait=False)
    flusher = threading.Thread(target=store.flush, kwargs=dict(wait=False))
    flusher.start()
    flusher.join(5)
    assert not flusher.is_alive()  # did not wait for the batch in flight
    assert store.read_events("b") == []
    release.set()
    leader.join(10)
    until(lambda: store.read_events("b"))
    assert [e.seq for e in store.read_events("b")] == [1]  # the leader went on with it
    store.close()


def test_the_lanes_plan_each_statement_once(pg_backend: Backend) -> None:
    """The group commit's connections use generic plans: a claim planned at each call cost
    more than the claim itself, and whether PostgreSQL plans each call depends on the
    table's statistics. Each lane says so to the server as it connects."""
    store = _store(pg_backend)
    _run(store, "r")
    store.append("r", [_event(1)], expected_seq=0, epoch=1, now=NOW)
    lane = store._wire_connection(0)
    res = lane._pg.exec_(b"SHOW plan_cache_mode")
    assert res.get_value(0, 0) == b"force_generic_plan"
