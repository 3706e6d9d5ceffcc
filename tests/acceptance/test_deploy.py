"""A deploy under a running run, with real worker processes, on SQLite and PostgreSQL.

A worker running v1 of an order agent charges a customer (a write tool with a
compensating refund) and the run waits for a signal. v2 is deployed: a fraud check
inserted before the charge. The run resumed by a worker running v2 is blocked: no
refund, no failure, shown by `tether runs --status blocked` and `tether show`. The
code is restored, `tether retry` puts the run back in its queue, a v1 worker completes
it: one charge, no refund. (Before: the run failed, the customer was refunded, and
retry refused the run.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.acceptance
TIMEOUT = 120  # seconds for one CLI command or worker (never reached when green)

AGENT = """
import os, tether

app = tether.open(os.environ["TETHER_TEST_DB"])
LEDGER = os.environ["TETHER_TEST_LEDGER"]


def _write(line):
    with open(LEDGER, "a") as f:
        f.write(line + "\\n")
        f.flush()
        os.fsync(f.fileno())


def refund(result, amount, *, idempotency_key):
    _write(f"refund {amount}")


@app.tool(risk="write", compensate=refund)
def charge(amount, *, idempotency_key):
    _write(f"charge {amount}")
    return f"charged {amount}"


@app.agent
def order(run, amount):
#CHECK#    receipt = run.tool(charge, amount)
    run.wait("shipped")
    return receipt + ", shipped"
"""
V1 = AGENT.replace("#CHECK#", "")
V2 = AGENT.replace("#CHECK#", '    run.step("check_fraud", lambda: "ok")\n')


class Shop:
    """The agent's module on disk (deployed by rewriting it) and the `tether` CLI."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        self.module = tmp_path / "shop.py"
        self.ledger = tmp_path / "ledger.txt"
        self.env = {
            **os.environ,
            "TETHER_TEST_DB": url,
            "TETHER_TEST_LEDGER": str(self.ledger),
            "PYTHONDONTWRITEBYTECODE": "1",  # each deploy is read from its source
        }
        self.app_ref = f"{self.module}:app"

    def deploy(self, source: str) -> None:
        self.module.write_text(source)

    def tether(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "tether.cli", "--app", self.app_ref, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    def worker(self) -> str:
        return self.tether("worker", "--queue", "orders", "--until-idle").stdout

    def ledger_lines(self) -> list[str]:
        return self.ledger.read_text().splitlines()


def test_a_deploy_under_a_waiting_run_blocks_it_refunds_nobody_and_it_goes_on(
    url: str, tmp_path: Path
) -> None:
    shop = Shop(url, tmp_path)
    shop.deploy(V1)
    started = subprocess.run(
        [sys.executable, "-c", "import shop; print(shop.app.start(shop.order, 5, queue='orders'))"],
        env=shop.env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    rid = started.stdout.strip()
    assert "waiting 1" in shop.worker()
    assert shop.ledger_lines() == ["charge 5"]

    shop.deploy(V2)  # a fraud check now comes before the charge the run recorded
    shop.tether("signal", rid, "shipped")
    said = shop.worker()
    assert "blocked 1" in said and "failed 0" in said
    assert shop.ledger_lines() == ["charge 5"]  # nobody was refunded
    listed = shop.tether("runs", "--status", "blocked").stdout
    assert rid in listed and "blocked" in listed
    shown = shop.tether("show", rid).stdout
    assert "status     blocked" in shown
    assert "the log recorded: tool charge" in shown
    assert "the code now calls: step check_fraud" in shown
    assert f"`tether retry {rid}` puts it back in queue 'orders'" in shown
    assert "blocked 0" in shop.worker() and "claimed 0" in shop.worker()  # no loop

    shop.deploy(V1)  # the code is restored
    said = shop.tether("retry", rid).stdout
    assert f"run {rid} is queued again in 'orders'" in said
    assert "completed 1" in shop.worker()
    shown = shop.tether("show", rid).stdout
    assert "status     completed" in shown and "charged 5, shipped" in shown
    assert shop.ledger_lines() == ["charge 5"]  # one charge, never refunded
