"""API tokens on both backends: created once, shown once, stored as a hash, verified by
hash, revoked at once; anything that is not a valid token is refused without an error."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from _conformance import Backend

import tether
from tether.services.identity import Identity, Role, digest

pytestmark = pytest.mark.conformance


@pytest.fixture
def app(backend: Backend) -> Iterator[tether.App]:
    a = tether.open(backend.url, clock=tether.FakeClock(1000.0), approver_groups={"ops": ["al"]})
    yield a
    a.close()


def _stored_text(backend: Backend) -> str:
    """Everything the tokens table holds, as text (PostgreSQL), or the database files'
    bytes (SQLite: the file and its write-ahead log, as a thief would copy them)."""
    if backend.name == "sqlite":
        files = [Path(backend.url), Path(backend.url + "-wal")]
        return "".join(p.read_bytes().decode("latin-1") for p in files if p.exists())
    return json.dumps(backend.sql("SELECT * FROM tokens"))


def test_a_token_is_verified_as_its_identity_and_only_its_hash_is_stored(
    app: tether.App, backend: Backend
) -> None:
    record, plaintext = app.tokens.create("alice", "approver", tenant="acme")
    assert plaintext.startswith(f"tether_{record.id}_") and len(plaintext) >= 7 + 16 + 1 + 43
    assert app.tokens.verify(plaintext) == Identity("alice", Role.APPROVER, "acme")
    secret = plaintext[24:]  # after tether_<16 hex>_
    stored = _stored_text(backend)
    assert digest(plaintext) in stored  # the hash is there (the read found the table)…
    assert plaintext not in stored and secret not in stored  # …and never the token
    assert "hash" not in repr(record) and record.hash not in repr(app.tokens.list())


def test_a_second_token_gets_other_random_bytes(app: tether.App) -> None:
    _, one = app.tokens.create("a", Role.VIEWER)
    _, two = app.tokens.create("b", Role.VIEWER)
    assert one != two and one[24:] != two[24:]
    assert app.tokens.verify(one) == Identity("a", Role.VIEWER, None)
    assert app.tokens.verify(two) == Identity("b", Role.VIEWER, None)


def test_a_revoked_token_is_refused_at_once_and_keeps_its_name(app: tether.App) -> None:
    _, plaintext = app.tokens.create("ci", "operator")
    assert app.tokens.revoke("ci") is True
    assert app.tokens.verify(plaintext) is None
    assert app.tokens.revoke("ci") is False  # revoked already: its first time is kept
    (row,) = app.tokens.list()
    assert row.name == "ci" and row.revoked_at == 1000.0
    with pytest.raises(tether.Conflict, match="'ci' exists already"):
        app.tokens.create("ci", "operator")
    with pytest.raises(tether.NotFound, match="no token named 'nobody'"):
        app.tokens.revoke("nobody")


def test_duplicate_names_are_refused_and_nothing_is_written(app: tether.App) -> None:
    app.tokens.create("bot", "viewer")
    with pytest.raises(tether.Conflict, match="choose another name"):
        app.tokens.create("bot", "admin")
    assert [(t.name, t.role) for t in app.tokens.list()] == [("bot", "viewer")]


@pytest.mark.parametrize(
    "garbage",
    [
        None,
        42,
        b"tether_0123456789abcdef_" + b"a" * 43,
        "",
        "Bearer x",
        "tether_",
        "tether_0123456789abcdef_",
        "tether_0123456789ABCDEF_" + "a" * 43,
        "tether_0123456789abcdef_" + "a" * 42,
        "tether_0123456789abcdef_" + "a" * 43 + "\x00",
        "tether_0123456789abcdef_" + "\udcff" * 43,
        "tether_0123456789abcdef_" + "a" * 10_000,
        "tether_' OR 1=1 --_" + "a" * 43,
    ],
)
def test_garbage_is_refused_without_an_error(app: tether.App, garbage: object) -> None:
    app.tokens.create("real", "admin")
    assert app.tokens.verify(garbage) is None


def test_a_forged_secret_with_a_real_id_is_refused(app: tether.App) -> None:
    record, plaintext = app.tokens.create("real", "admin")
    forged = f"tether_{record.id}_" + ("A" if plaintext[-43] != "A" else "B") + plaintext[-42:]
    assert forged != plaintext and app.tokens.verify(forged) is None
    assert app.tokens.verify(plaintext) is not None


def test_bad_names_roles_and_tenants_are_refused_before_anything_is_written(
    app: tether.App,
) -> None:
    for name, role, tenant, match in [
        ("", "viewer", None, "token name"),
        ("a\nb", "viewer", None, "token name"),
        ("ok", "root", None, "role must be one of viewer, approver, operator, admin"),
        ("ok", "viewer", "", "tenant"),
        ("ok", "admin", "acme", "admin token cannot be limited to a tenant"),
        ("ops", "approver", None, "approver group's name"),
    ]:
        with pytest.raises(tether.InvalidInput, match=match):
            app.tokens.create(name, role, tenant)
    assert app.tokens.list() == []


def test_last_use_is_noted_at_most_once_a_minute(app: tether.App) -> None:
    clock = app.clock
    assert isinstance(clock, tether.FakeClock)
    _, plaintext = app.tokens.create("svc", "viewer")
    app.tokens.verify(plaintext)
    assert app.tokens.list()[0].last_used_at == 1000.0
    clock.advance(30)
    app.tokens.verify(plaintext)
    assert app.tokens.list()[0].last_used_at == 1000.0
    clock.advance(31)
    app.tokens.verify(plaintext)
    assert app.tokens.list()[0].last_used_at == 1061.0


def test_token_management_is_in_the_audit_log(app: tether.App, backend: Backend) -> None:
    app.tokens.create("x", "viewer", by="root")
    app.tokens.revoke("x", by="root")
    rows = backend.sql("SELECT action, actor, detail FROM audit ORDER BY id")
    assert [(a, who) for a, who, _ in rows] == [
        ("token.created", "root"),
        ("token.revoked", "root"),
    ]
    assert "tether_" not in json.dumps(rows)


def test_roles_are_ordered_and_each_includes_the_ones_before() -> None:
    viewer, approver = Identity("v", Role.VIEWER), Identity("a", Role.APPROVER)
    operator, admin = Identity("o", Role.OPERATOR), Identity("r", Role.ADMIN)
    assert [viewer.may("read"), viewer.may("approve")] == [True, False]
    assert [approver.may("signal"), approver.may("cancel")] == [True, False]
    assert [operator.may("fork"), operator.may("tokens")] == [True, False]
    assert all(admin.may(a) for a in ("read", "approve", "cancel", "tokens", "workers"))
    with pytest.raises(tether.Forbidden, match=r"v \(viewer\) may not approve.*approver role"):
        viewer.require("approve")


def test_sqlite_file_has_no_plaintext_even_after_a_checkpoint(sqlite_backend: Backend) -> None:
    with tether.open(sqlite_backend.url) as a:
        _, plaintext = a.tokens.create("k", "viewer")
    conn = sqlite3.connect(sqlite_backend.url)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    assert plaintext.encode() not in Path(sqlite_backend.url).read_bytes()
    assert digest(plaintext).encode() in Path(sqlite_backend.url).read_bytes()
