"""The store's roles: Store is exactly its role protocols, each member documented, and both
backends implement every member, the cold-path ones through the shared SQL base."""

from __future__ import annotations

import inspect
from typing import Protocol

import pytest

from tether.store import (
    Audit,
    Blobs,
    Inbox,
    Leases,
    Maintenance,
    Queue,
    RunLog,
    Store,
    Workers,
)
from tether.store.faults import STORE_METHODS
from tether.store.sqlbase import SqlStore
from tether.store.sqlite import SQLiteStore

# every role protocol Store is made of (a later role joins by being a base of Store)
ROLES = tuple(
    r for r in Store.__mro__[1:] if getattr(r, "_is_protocol", False) and r is not Protocol
)


def _members(role: type) -> set[str]:
    names = {n for n in vars(role) if not n.startswith("_")}
    return names | set(getattr(role, "__annotations__", {}))


def test_store_is_the_union_of_its_roles_and_each_member_has_one_role() -> None:
    assert {RunLog, Leases, Queue, Inbox, Workers, Audit, Blobs, Maintenance} <= set(ROLES)
    seen: dict[str, str] = {}
    for role in ROLES:
        for name in _members(role):
            assert name not in seen, f"{name} is in {seen.get(name)} and {role.__name__}"
            seen[name] = role.__name__
    methods = {n for n in seen if callable(getattr(Store, n, None))}
    assert methods == set(STORE_METHODS)
    for name in ("set_status", "schema_version", "where", "path", "transaction", "dialect"):
        assert name in seen, name  # the members the code reached with getattr before


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.__name__)
def test_every_method_of_a_role_says_what_it_does(role: type) -> None:
    assert role.__doc__
    for name, value in vars(role).items():
        if not name.startswith("_") and callable(value):
            assert inspect.getdoc(value), f"{role.__name__}.{name} has no docstring"


def test_both_backends_implement_every_member_through_the_shared_base() -> None:
    pytest.importorskip("psycopg_pool")
    from tether.store.postgres import PostgresStore

    for backend in (SQLiteStore, PostgresStore):
        assert issubclass(backend, SqlStore)
        for role in ROLES:
            for name in _members(role) - {"where", "unwritten_end"}:  # set by __init__
                assert hasattr(backend, name), f"{backend.__name__} lacks {name}"
        for name in STORE_METHODS:  # every method raises tether's errors only
            method = getattr(backend, name)
            assert name == "transaction" or hasattr(method, "__wrapped__"), name


def test_the_shared_base_implements_store_methods_only() -> None:
    public = {n for n, v in vars(SqlStore).items() if callable(v) and not n.startswith("_")}
    assert public <= set(STORE_METHODS)
    assert len(public) >= 20  # the cold path, written once for both dialects
