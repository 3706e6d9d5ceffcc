"""The paged run list and inbox on both backends: keyset pages that add up to the whole
list, filters combined, a cursor that was not returned refused, and the database's plan
reading an index (PostgreSQL's EXPLAIN, SQLite's EXPLAIN QUERY PLAN)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from _conformance import PG_URL, Backend

import tether
from tether.services.listing import encode_cursor

pytestmark = pytest.mark.conformance


@pytest.fixture
def app(backend: Backend) -> Iterator[tether.App]:
    clock = tether.FakeClock(1_000.0)
    a = tether.open(backend.url, clock=clock)

    @a.agent
    def alpha(run: tether.Run) -> int:
        return 1

    @a.agent
    def beta(run: tether.Run) -> int:
        return 2

    @a.agent
    def gate(run: tether.Run, n: int) -> Any:
        return run.approve("ok", payload={"n": n})

    @a.agent(limits=tether.Limits(max_model_calls=1))
    def chatty(run: tether.Run) -> Any:
        run.llm("first", lambda: {"text": "a", "usage": {"input_tokens": 5}})
        return run.llm("second", lambda: {"text": "b"})["text"]

    yield a
    a.close()


def _make(app: tether.App) -> list[tuple[str, str, str | None, float]]:
    """Runs of two tenants and none, two agents, some queued, one second apart (and two
    in the same second: the id breaks the tie). Returns (id, agent, tenant, created_at)."""
    clock = app.clock
    assert isinstance(clock, tether.FakeClock)
    made = []
    for i in range(11):
        tenant = ["acme", "globex", None][i % 3]
        agent = ["alpha", "beta"][i % 2]
        if i != 5:  # run 5 is created in the same second as run 4
            clock.advance(1)
        scope = app.for_tenant(tenant) if tenant else None
        if i % 4 == 3:
            rid = scope.start(agent) if scope else app.start(agent)
        else:
            rid = (scope.run(agent) if scope else app.run(agent)).id
        made.append((rid, agent, tenant, clock.now()))
    return made


def _newest_first(rows: list[tuple[str, str, str | None, float]]) -> list[str]:
    return [r[0] for r in sorted(rows, key=lambda r: (r[3], r[0]), reverse=True)]


def _all_pages(app: tether.App, size: int, **filters: Any) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        page = app.list_runs(limit=size, cursor=cursor, **filters)
        assert len(page.runs) <= size
        seen += [r.id for r in page.runs]
        cursor = page.next_cursor
        if cursor is None:
            return seen
        assert len(page.runs) == size  # only the last page is short


@pytest.mark.parametrize("size", [1, 2, 3, 11, 50])
def test_pages_add_up_to_the_whole_list_newest_first(app: tether.App, size: int) -> None:
    made = _make(app)
    assert _all_pages(app, size) == _newest_first(made)


def test_a_page_boundary_between_two_runs_of_the_same_second(app: tether.App) -> None:
    made = _make(app)
    order = _newest_first(made)
    tie = [r[0] for r in made if r[3] == made[4][3]]
    assert len(tie) == 2
    at = order.index(max(tie))  # the first of the two (newest first: the greater id)
    first = app.list_runs(limit=at + 1)
    assert first.runs[-1].id == max(tie)
    assert app.list_runs(limit=5, cursor=first.next_cursor).runs[0].id == min(tie)


def test_filters_combine(app: tether.App) -> None:
    made = _make(app)
    app.start("alpha", queue="slow")
    acme_alpha = [r for r in made if r[2] == "acme" and r[1] == "alpha"]
    assert _all_pages(app, 1, tenant="acme", agent="alpha") == _newest_first(acme_alpha)
    queued = {r.id for r in app.runs(status="queued")}
    acme_queued = [r for r in made if r[2] == "acme" and r[0] in queued]
    assert acme_queued and _all_pages(app, 2, tenant="acme", status="queued") == _newest_first(
        acme_queued
    )
    assert [r.queue for r in app.list_runs(queue="slow").runs] == ["slow"]
    window = [r for r in made if 1003.0 <= r[3] < 1006.0]
    assert _all_pages(app, 2, created_after=1003.0, created_before=1006.0) == _newest_first(window)
    assert app.list_runs(status="completed", agent="nobody").runs == []


def test_text_is_a_prefix_of_the_run_id_or_the_agent(app: tether.App) -> None:
    made = _make(app)
    one = made[7][0]
    assert [r.id for r in app.list_runs(text=one).runs] == [one]
    betas = [r for r in made if r[1] == "beta"]
    assert _all_pages(app, 3, text="be") == _newest_first(betas)
    assert app.list_runs(text="eta").runs == []  # a prefix, not a substring


def test_session_filter(app: tether.App) -> None:
    s = app.session("chat", owner="acme")
    rid = app.run_in(s, "alpha").id
    app.run("alpha")
    assert [r.id for r in app.list_runs(session="chat").runs] == [rid]


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage",
        "",
        "x" * 5000,
        encode_cursor("inbox", 1.0, "abc"),  # another listing's
        encode_cursor("runs", float("inf"), "abc"),
        "WyJydW5zIiwxLCJhIl0",  # ["runs",1,"a"] with its padding cut: accepted below
        42,
    ],
)
def test_a_cursor_that_was_not_returned_is_a_clear_error(app: tether.App, cursor: Any) -> None:
    _make(app)
    if cursor == "WyJydW5zIiwxLCJhIl0":
        assert app.list_runs(cursor=cursor).runs == []  # a well-formed cursor: past the end
        return
    with pytest.raises(tether.InvalidInput, match="is not one the run list returned"):
        app.list_runs(cursor=cursor)


@pytest.mark.parametrize("limit", [0, -1, 1001, True, "10"])
def test_a_bad_page_size_is_a_clear_error(app: tether.App, limit: Any) -> None:
    with pytest.raises(tether.InvalidInput, match="limit"):
        app.list_runs(limit=limit)


def test_the_inbox_pages_oldest_first(app: tether.App) -> None:
    clock = app.clock
    assert isinstance(clock, tether.FakeClock)
    ids = []
    for n in range(5):
        clock.advance(1)
        ids.append(app.for_tenant("acme" if n % 2 else "globex").run("gate", n=n).id)
    seen, cursor = [], None
    while True:
        page = app.inbox(limit=2, cursor=cursor)
        seen += [(i.run_id, i.payload) for i in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == [(rid, {"n": n}) for n, rid in enumerate(ids)]
    assert [i.run_id for i in app.inbox(tenant="acme").items] == [ids[1], ids[3]]
    with pytest.raises(tether.InvalidInput, match="is not one the inbox returned"):
        app.inbox(cursor=app.list_runs(limit=1).next_cursor)


def test_a_run_waiting_on_its_budget_is_in_the_inbox_until_raised(app: tether.App) -> None:
    clock = app.clock
    assert isinstance(clock, tether.FakeClock)
    asked = app.run("gate", n=1).id
    clock.advance(1)
    stopped = app.for_tenant("acme").run("chatty").id
    items = {i.run_id: i for i in app.inbox().items}
    assert list(items) == [asked, stopped]  # oldest request first, every kind
    budget = items[stopped]
    assert (budget.kind, budget.name, budget.position, budget.tenant) == (
        "budget",
        "model_calls",
        2,
        "acme",
    )
    assert budget.payload["limit"] == "model_calls" and budget.payload["max"] == 1
    assert budget.payload["used"]["model_calls"] == 1 and budget.payload["kind"] == "llm"
    assert [i.run_id for i in app.inbox(tenant="acme").items] == [stopped]
    assert [i.run_id for i in app.inbox(tenant="globex").items] == []
    app.raise_budget(stopped, add={"model_calls": 1}, by="ann")
    assert [i.run_id for i in app.inbox().items] == [asked]  # raised: no longer waiting on it
    assert app.resume(stopped).output == "b"


def test_the_inbox_and_the_in_doubt_gauge_read_the_inbox_index(
    app: tether.App, backend: Backend
) -> None:
    store: Any = app.store
    inbox = store._Q["inbox_runs"].replace("/*filters*/", "")
    doubt = store._Q["gauge_in_doubt"]
    if backend.name == "sqlite":
        mine = store._Q["inbox_runs_owner"].replace("/*filters*/", store._Q["page_runs_tenant"])
        queries = ((inbox, {"limit": 51}), (doubt, {}), (mine, {"limit": 51, "tenant": "acme"}))
        for query, params in queries:
            plan = backend.sql_params("EXPLAIN QUERY PLAN " + query, params)
            text = " ".join(str(r[-1]) for r in plan)
            assert "_inbox" in text and "TEMP B-TREE" not in text, text  # a partial index
        return
    import psycopg

    options = f"-c search_path={backend.schema} -c enable_seqscan=off"
    with psycopg.connect(PG_URL, autocommit=True, options=options) as conn:
        for query, params in ((inbox, {"limit": 51}), (doubt, {})):
            text = " ".join(r[0] for r in conn.execute("EXPLAIN " + query, params).fetchall())
            assert "_inbox on runs" in text, text  # runs_inbox or runs_owner_inbox: both partial


def test_the_status_filter_reads_an_index(app: tether.App, backend: Backend) -> None:
    _make(app)
    if backend.name == "sqlite":
        plan = backend.sql(
            "EXPLAIN QUERY PLAN SELECT * FROM runs WHERE 1 = 1 AND status = 'queued' "
            "ORDER BY created_at DESC, id DESC LIMIT 51"
        )
        text = " ".join(str(r[-1]) for r in plan)
        assert "runs_status_created" in text and "TEMP B-TREE" not in text, text
        return
    import psycopg

    # a table of 11 rows is read whole whatever its indexes: planned as for a big one
    options = f"-c search_path={backend.schema} -c enable_seqscan=off"
    with psycopg.connect(PG_URL, autocommit=True, options=options) as conn:
        plan = conn.execute(
            "EXPLAIN SELECT * FROM runs WHERE TRUE AND status = 'queued' "
            "ORDER BY created_at DESC, id DESC LIMIT 51"
        ).fetchall()
    text = " ".join(r[0] for r in plan)
    assert "Index Scan Backward using runs_status_created" in text, text


def test_a_views_runs_reads_past_one_page(app: tether.App, monkeypatch: pytest.MonkeyPatch) -> None:
    import tether.services.listing as listing

    made = _make(app)
    monkeypatch.setattr(listing, "PAGE_MAX", 2)  # pages of 2: runs(limit=7) reads 4 of them
    everyone = app.for_tenant(None)
    assert [r.id for r in everyone.runs(limit=7)] == _newest_first(made)[:7]
    assert [r.id for r in everyone.runs(limit=100)] == _newest_first(made)
