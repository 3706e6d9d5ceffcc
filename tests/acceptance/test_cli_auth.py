"""`tether token …`, `--tenant` and `--token`, run as real processes on a real database:
a token is printed once and stored nowhere in clear, a tenant's CLI sees its runs alone,
and a token's identity decides (its name recorded, its role checked, a spoofed --by
refused)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import tether

pytestmark = pytest.mark.acceptance


def cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("TETHER_TENANT", "TETHER_TOKEN")}
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", *args],
        cwd=cwd,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


@dataclass
class Db:
    path: Path
    acme: str  # a run of tenant acme waiting for approval "ship" (approvers ann, vic)
    globex: str  # a run of tenant globex waiting for the same

    def run(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return cli("--db", str(self.path), *args, cwd=self.path.parent, env=env)

    def token(self, name: str, role: str, tenant: str | None = None) -> str:
        extra = ["--tenant", tenant] if tenant else []
        done = self.run("token", "create", name, "--role", role, *extra)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def app(self) -> tether.App:
        return tether.open(str(self.path))


@pytest.fixture
def db(tmp_path: Path) -> Db:
    path = tmp_path / "t.db"
    with tether.open(str(path)) as app:

        @app.agent
        def gated(run: tether.Run) -> Any:
            return run.approve("ship", payload={"to": "x"}, approvers=["ann", "vic"])

        acme = app.for_tenant("acme").run(gated).id
        globex = app.for_tenant("globex").run(gated).id
    return Db(path, acme, globex)


def test_a_token_is_printed_once_listed_without_it_and_revoked(db: Db) -> None:
    made = db.run("token", "create", "ann", "--role", "approver", "--tenant", "acme")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("tether_") and "\n" not in token  # stdout: the token alone
    assert "will not be shown again" in made.stderr and "tenant 'acme'" in made.stderr
    listed = db.run("token", "list")
    assert listed.returncode == 0
    assert "ann" in listed.stdout and "approver" in listed.stdout and "acme" in listed.stdout
    as_json = db.run("token", "list", "--json")
    (row,) = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert row["name"] == "ann" and row["tenant"] == "acme" and "hash" not in row
    with db.app() as app:
        (record,) = app.tokens.list()
    for out in (listed.stdout, as_json.stdout):
        assert token not in out and token[24:] not in out and record.hash not in out
    assert token.encode() not in db.path.read_bytes()
    again = db.run("token", "create", "ann", "--role", "viewer")
    assert again.returncode == 1 and "exists already" in again.stderr
    revoked = db.run("token", "revoke", "ann")
    assert revoked.returncode == 0 and "revoked token 'ann'" in revoked.stdout
    refused = db.run("--token", token, "runs")
    assert refused.returncode == 1 and "not valid" in refused.stderr


def test_bad_token_commands_are_usage_errors(db: Db) -> None:
    no_role = db.run("token", "create", "x")
    assert no_role.returncode == 2 and "--role" in no_role.stderr
    admin_tenant = db.run("token", "create", "x", "--role", "admin", "--tenant", "acme")
    assert admin_tenant.returncode == 2 and "admin token cannot be limited" in admin_tenant.stderr
    unknown = db.run("token", "revoke", "nobody")
    assert unknown.returncode == 1 and "no token named 'nobody'" in unknown.stderr


def test_tenant_sees_its_runs_alone(db: Db) -> None:
    runs = db.run("--tenant", "acme", "runs", "--json")
    assert runs.returncode == 0, runs.stderr
    assert [r["id"] for r in json.loads(runs.stdout)] == [db.acme]
    env_runs = db.run("runs", "--json", env={"TETHER_TENANT": "globex"})
    assert [r["id"] for r in json.loads(env_runs.stdout)] == [db.globex]
    for args in (["show", db.globex], ["log", db.globex], ["history", db.globex]):
        seen = db.run("--tenant", "acme", *args)
        assert seen.returncode == 1 and f"no run '{db.globex}'" in seen.stderr, args
    approve = db.run("--tenant", "acme", "approve", db.globex, "ship", "--by", "ann")
    assert approve.returncode == 1 and "no run" in approve.stderr
    gc = db.run("--tenant", "acme", "gc", "--dry-run")
    assert gc.returncode == 2 and "spans every tenant" in gc.stderr
    with db.app() as app:
        assert app.get(db.globex).status == "waiting" and app.audit(db.globex) == []


def test_a_token_decides_as_its_identity(db: Db) -> None:
    ann = db.token("ann", "approver", "acme")
    spoofed = db.run("--token", ann, "approve", db.acme, "ship", "--by", "vic")
    assert spoofed.returncode == 2 and "differs from the token's identity" in spoofed.stderr
    other = db.run("--token", ann, "approve", db.globex, "ship")
    assert other.returncode == 1 and f"no run '{db.globex}'" in other.stderr
    done = db.run("--token", ann, "approve", db.acme, "ship", "--reason", "ok")
    assert done.returncode == 0, done.stderr
    with db.app() as app:
        assert app.get(db.acme).steps[-1].output["by"] == "ann"
        assert app.audit(db.globex) == []  # nothing about the other tenant's run


def test_a_role_that_may_not_act_is_refused_and_audited(db: Db) -> None:
    vic = db.token("vic", "viewer", "acme")
    shown = db.run("--token", vic, "show", db.acme)
    assert shown.returncode == 0, shown.stderr
    refused = db.run("--token", vic, "approve", db.acme, "ship", env={"TETHER_TOKEN": "x"})
    assert refused.returncode == 3 and "vic (viewer) may not approve" in refused.stderr
    by_env = db.run("cancel", db.acme, env={"TETHER_TOKEN": vic})
    assert by_env.returncode == 3 and "may not cancel" in by_env.stderr
    workers = db.run("--token", vic, "workers")
    assert workers.returncode == 3 and "may not see the workers" in workers.stderr
    tokens = db.run("--token", vic, "token", "list")
    assert tokens.returncode == 3 and "may not manage tokens" in tokens.stderr
    with db.app() as app:
        assert [(a.actor, a.action) for a in app.audit(db.acme)] == [
            ("vic", "access.refused"),
            ("vic", "access.refused"),
        ]
        assert app.get(db.acme).status == "waiting"


def test_a_tenant_token_cannot_reach_past_its_tenant_with_tenant(db: Db) -> None:
    ann = db.token("ann", "approver", "acme")
    other = db.run("--token", ann, "--tenant", "globex", "runs")
    assert other.returncode == 2 and "not the token's tenant" in other.stderr
    root = db.token("root", "viewer")  # every tenant: --tenant narrows it
    narrowed = db.run("--token", root, "--tenant", "globex", "runs", "--json")
    assert [r["id"] for r in json.loads(narrowed.stdout)] == [db.globex]


def test_without_a_token_the_local_operator_still_names_by(db: Db) -> None:
    missing = db.run("approve", db.acme, "ship")
    assert missing.returncode == 2 and "by is required" in missing.stderr
    done = db.run("approve", db.acme, "ship", "--by", "vic")
    assert done.returncode == 0, done.stderr


def test_runs_filters_by_text_queue_and_session(db: Db) -> None:
    prefix = db.acme[:14]
    found = db.run("runs", "--text", prefix, "--json")
    assert found.returncode == 0, found.stderr
    assert db.acme in [r["id"] for r in json.loads(found.stdout)]
    assert db.run("--tenant", "globex", "runs", "--text", db.acme).stdout.strip() == "no runs match"
    by_agent_prefix = db.run("runs", "--text", "gat", "--json")
    assert {r["id"] for r in json.loads(by_agent_prefix.stdout)} == {db.acme, db.globex}
    assert db.run("runs", "--queue", "default").stdout.strip() == "no runs match"
