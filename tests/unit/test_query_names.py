"""The named queries of both dialects: the same operation has the same name in both.

A name is in both ``sql/sqlite/queries.sql`` and ``sql/postgres/queries.sql`` unless it
is listed below with the reason it belongs to one dialect only. A query renamed in one
dialect only, or added to one without a reason, fails here.
"""

from __future__ import annotations

from tether.store.queries import load_queries

# SQLite runs one statement per execute(): what PostgreSQL does in one statement with
# CTEs is several queries here; and what only SQLite has (its WAL).
SQLITE_ONLY = {
    "insert_run": "the run row of create_run and enqueue (PostgreSQL: create_run, enqueue)",
    "insert_run_event": "a new run's first events (PostgreSQL: create_run, enqueue)",
    "latest_snapshot": "load's snapshot, read before its events (PostgreSQL: load_run)",
    "put_effect": "an append's effects write (PostgreSQL: the append_* statements)",
    "take_signal": "an append's signal take (PostgreSQL: append_events)",
    "queue_depth": "enqueue's max_depth check (PostgreSQL: enqueue counts in its statement)",
    "delete_worker": "remove_worker's first half (PostgreSQL: remove_worker)",
    "expire_leases": "remove_worker's second half (PostgreSQL: remove_worker)",
    "delete_run_events": "delete_runs, a run's events by key range (PostgreSQL: delete_runs)",
    "delete_runs_effects": "delete_runs, their effects (PostgreSQL: delete_runs)",
    "delete_runs_rows": "delete_runs, their rows (PostgreSQL: delete_runs)",
    "delete_runs_signals": "delete_runs, their signals (PostgreSQL: delete_runs)",
    "delete_runs_snapshots": "delete_runs, their snapshots (PostgreSQL: delete_runs)",
    "wal_truncate": "vacuum empties SQLite's write-ahead log (PostgreSQL has no such file)",
    "inbox_runs_owner": "a tenant's inbox names its index (PostgreSQL picks it: inbox_runs)",
}

# PostgreSQL: one statement (one round trip) where SQLite runs several, and what only a
# server has (schemas, advisory locks, LISTEN/NOTIFY, a clock of its own).
POSTGRES_ONLY = {
    "append_event_effect": "an append's shape for the group commit (SQLite: put_effect)",
    "append_event_transition": "an append's shape for the group commit (SQLite: update_status)",
    "append_events": "an append with every extra, one statement (SQLite: several)",
    "append_events_transition": "an append's shape for the group commit (SQLite: several)",
    "claim_fast": "claim_next of queues without limits, with the claimed logs (SQLite: several)",
    "create_run": "a run's row and first events (SQLite: insert_run, insert_event)",
    "enqueue": "enqueue with its dedup and depth checks (SQLite: several)",
    "load_run": "load in one statement (SQLite: get_run, latest_snapshot, read_events)",
    "delete_runs": "delete_runs in one statement (SQLite: delete_run_events, delete_runs_*)",
    "remove_worker": "remove_worker in one statement (SQLite: delete_worker, expire_leases)",
    "create_schema": "tether's tables live in a PostgreSQL schema of their own",
    "schema_exists": "tether's tables live in a PostgreSQL schema of their own",
    "migration_lock": "concurrent openers migrate under an advisory lock (SQLite: BEGIN IMMEDIATE)",
    "queue_lock": "limited queues are claimed under an advisory lock (SQLite: the writer lock)",
    "listen": "workers LISTEN for work (SQLite: workers poll)",
    "notify_work": "enqueue and notify_work NOTIFY workers (SQLite: workers poll)",
    "server_clock": "clock_offset reads the server's clock (SQLite: one machine, one clock)",
}


def test_both_dialects_name_the_same_operations_alike() -> None:
    sqlite, postgres = set(load_queries("sqlite")), set(load_queries("postgres"))
    assert sorted(sqlite - postgres) == sorted(SQLITE_ONLY)
    assert sorted(postgres - sqlite) == sorted(POSTGRES_ONLY)


def test_the_queries_both_dialects_share_are_most_of_them() -> None:
    shared = set(load_queries("sqlite")) & set(load_queries("postgres"))
    assert {"get_run", "claim", "claim_picked", "send_signal", "worker_heartbeat"} <= shared
    assert {"schema_version", "set_schema_version", "schema_tables", "update_status"} <= shared
