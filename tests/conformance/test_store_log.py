"""The log through a raw transaction (SQL of each dialect). The rest of the log's tests are in the
shipped suite, tether.testing.log.LogSuite, run by test_store_suite.py."""

from __future__ import annotations

import pytest
from _conformance import T0, new_run, seqs

from tether.errors import StoreError
from tether.store import Store

pytestmark = pytest.mark.conformance


def _audit_insert(store: Store) -> str:
    if store.dialect == "sqlite":
        return "INSERT INTO audit (run_id, at, action, detail) VALUES (:run, :at, 'raw', '{}')"
    return "INSERT INTO audit (run_id, at, action, detail) VALUES (%(run)s, %(at)s, 'raw', '{}')"


def test_a_raw_transaction_commits_together_or_not_at_all(store: Store) -> None:
    with store.transaction() as conn:
        conn.execute(_audit_insert(store), {"run": "r", "at": T0})
        conn.execute(_audit_insert(store), {"run": "r", "at": T0 + 1})
    assert [a.at for a in store.read_audit("r")] == [T0, T0 + 1]
    with pytest.raises(KeyError), store.transaction() as conn:
        conn.execute(_audit_insert(store), {"run": "r", "at": T0 + 2})
        raise KeyError("the caller's own error propagates, after a rollback")
    with pytest.raises(StoreError), store.transaction() as conn:
        conn.execute(_audit_insert(store), {"run": "r", "at": T0 + 3})
        conn.execute("INSERT INTO no_such_table VALUES (1)")
    assert [a.at for a in store.read_audit("r")] == [T0, T0 + 1]
    new_run(store)  # the store is usable afterwards
    assert seqs(store) == [1, 2]
