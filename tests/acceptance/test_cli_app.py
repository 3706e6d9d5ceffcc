"""`tether --app` uses the App as its module configured it, and `--db` may only name its
database: a second App on the same file would drop its policy, approver groups, queue
limits, lease ttl and retry (issue 25, point 7)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tether
from tether.cli.context import database_key

pytestmark = pytest.mark.acceptance

AGENTS = textwrap.dedent(
    """
    import os, time
    import tether

    app = tether.open(
        os.environ["AGENTS_DB"],
        policy=tether.Policy(approve_at="irreversible"),
        approver_groups={"ops": ["ann"]},
        lease_ttl=6.0,
        retry=tether.Retry(max_attempts=4, backoff=0),
    )
    app.queue("solo", concurrency=1)

    @app.tool(risk="irreversible")
    def wire(amount, *, idempotency_key):
        with open(os.environ["WIRED"], "a") as f:
            f.write(f"{amount}\\n")
        return amount

    @app.agent
    def pay(run, amount):
        return run.tool(wire, amount)

    @app.agent
    def gate(run):
        return run.approve("ship", approvers=["ops"])

    def flaky():
        path = os.environ["ATTEMPTS"]
        with open(path, "a") as f:
            f.write("x")
        with open(path) as f:
            if len(f.read()) < 3:
                raise ConnectionError("the service is warming up")
        return "ok"

    @app.agent
    def retrying(run):
        return run.step("flaky", flaky)

    @app.agent
    def waiter(run):
        return run.wait("go")

    @app.agent
    def probe(run):
        def look():
            row = app.store.get_run(run.id)
            return {
                "ttl_left": row.lease_expires - time.time(),
                "running": len(app.runs(status="running", limit=100)),
            }
        return run.step("look", look)
    """
)


@pytest.fixture
def project(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "agents.py").write_text(AGENTS)
    return {
        "AGENTS_DB": str(tmp_path / "agents.db"),
        "WIRED": str(tmp_path / "wired"),
        "ATTEMPTS": str(tmp_path / "attempts"),
        "PYTHONPATH": str(tmp_path),
    }


def run(
    *args: str, cwd: Path, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("TETHER_DB", "TETHER_CODE")}
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start(cwd: Path, env: dict[str, str], *calls: str) -> list[str]:
    """Queue runs from the project's own process (``calls``: ``pay, 5``…); their ids."""
    lines = [f"print(agents.app.start(agents.{c}, queue='solo'))" for c in calls]
    proc = run("-c", "import agents\n" + "\n".join(lines), cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def worker(cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A real worker process, told the database by $TETHER_DB (relative, as the README
    does), with a concurrency above the queue's limit of 1."""
    args = ["-m", "tether.cli", "--app", "agents:app", "worker", "--queue", "solo"]
    args += ["--concurrency", "4", "--until-idle", "--quiet"]
    return run(*args, cwd=cwd, env={**env, "TETHER_DB": "agents.db"})


def test_every_configuration_item_of_the_app_survives_the_cli(
    tmp_path: Path, project: dict[str, str]
) -> None:
    pay, gate, retrying, waiter = start(tmp_path, project, "pay, 5", "gate", "retrying", "waiter")
    probes = start(tmp_path, project, "probe", "probe", "probe")
    done = worker(tmp_path, project)
    assert done.returncode == 0, done.stderr

    with tether.open(project["AGENTS_DB"]) as app:
        # the policy gate: the irreversible tool waits for a human, it did not run
        assert app.get(pay).status == "waiting"
        assert (app.get(pay).waiting or {}).get("name") == "approve:wire"
        assert not Path(project["WIRED"]).exists()
        # retry defaults: 2 failed attempts, the 3rd passed (the default Retry fails at 1)
        assert app.get(retrying).status == "completed"
        assert app.get(retrying).steps[0].attempts == 3
        looks = [app.get(p).output for p in probes]
    # the queue's concurrency of 1 across a worker of 4: each saw itself running alone
    assert [look["running"] for look in looks] == [1, 1, 1], looks
    # the lease ttl of 6 s (the default is 30 s)
    assert all(0 < look["ttl_left"] <= 6.5 for look in looks), looks

    # the approver groups: ann is in ops, so she may approve what ops must approve;
    # --db names the App's database in another spelling (sqlite:/// and relative)
    cli = ["-m", "tether.cli", "--db", "sqlite:///agents.db", "--app", "agents:app"]
    approved = run(*cli, "approve", gate, "ship", "--by", "ann", cwd=tmp_path, env=project)
    assert approved.returncode == 0, approved.stderr
    assert "approved 'ship'" in approved.stdout

    # a signal sent through the CLI reaches the waiting run, which a worker then finishes
    sent = run(*cli, "signal", waiter, "go", '{"n": 7}', cwd=tmp_path, env=project)
    assert sent.returncode == 0 and "a worker of queue 'solo' resumes it" in sent.stdout
    assert worker(tmp_path, project).returncode == 0
    with tether.open(project["AGENTS_DB"]) as app:
        assert app.get(waiter).output == {"n": 7}
        assert app.get(gate).status == "completed"


def test_a_db_that_is_not_the_apps_is_refused(tmp_path: Path, project: dict[str, str]) -> None:
    other = tmp_path / "other.db"
    tether.open(str(other)).close()
    cli = ["-m", "tether.cli", "--app", "agents:app"]
    for env in ({"TETHER_DB": str(other)}, {}):
        given = [] if env else ["--db", "other.db"]
        proc = run(*cli, *given, "runs", cwd=tmp_path, env={**project, **env})
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert "other.db" in lines[0] and "agents.db" in lines[0] and "--app" in lines[0]
    same = run(*cli, "--db", project["AGENTS_DB"], "runs", "--json", cwd=tmp_path, env=project)
    assert same.returncode == 0, same.stderr
    assert json.loads(same.stdout) == []


# -- which databases are one ----------------------------------------------------------


def test_sqlite_spellings_of_one_file_are_one_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path / "a.db", tmp_path / "link.db")
    one = {
        database_key(u)
        for u in (
            "a.db",
            "./a.db",
            str(tmp_path / "a.db"),
            "sqlite:///a.db",
            f"sqlite:///{tmp_path}/a.db",
            "sub/../a.db",
            "link.db",
        )
    }
    assert len(one) == 1, one
    assert database_key("b.db") not in one


def test_postgres_urls_of_one_schema_are_one_database() -> None:
    base = database_key("postgresql://ann@db.example:5432/agents")
    for same in (
        "postgresql://bob:secret@db.example/agents",
        "postgres://ann@DB.example:5432/agents?schema=tether",
        "postgresql://ann@db.example/agents?sslmode=require&application_name=x",
    ):
        assert database_key(same) == base, same
    for other in (
        "postgresql://ann@db.example/agents?schema=staging",
        "postgresql://ann@db.example/billing",
        "postgresql://ann@db.example:6432/agents",
        "postgresql://ann@replica.example/agents",
    ):
        assert database_key(other) != base, other
    assert database_key("postgresql://127.0.0.1/test") == database_key(
        "postgresql://localhost:5432/test"
    )
