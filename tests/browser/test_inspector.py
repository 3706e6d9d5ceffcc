"""The web inspector in a real headless Chromium (Debian's ``chromium``, driven by
Playwright; nothing is downloaded): log in with a token, find a run, open its timeline,
see the state at a step, diff it against another run, fork it, approve from the inbox and
see the run continue. Everything runs for real: ``tether serve`` and ``tether worker``
are processes on a SQLite file, and the run goes on in the worker after the approval.

A screenshot of each page is kept in ``$TETHER_ARTIFACTS`` (default: ``test-artifacts/``
at the top of the checkout) as ``inspector-*.png``.

Waits use Playwright's ``expect``, which retries until its bound (a generous 30 s, so a
loaded machine does not fail it; the bound is never what the test measures).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import tether

playwright = pytest.importorskip("playwright.sync_api", reason="needs the test extra")
from playwright.sync_api import Page, expect, sync_playwright  # noqa: E402

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parent
ARTIFACTS = Path(os.environ.get("TETHER_ARTIFACTS") or HERE.parents[1] / "test-artifacts")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# the agents' folder, then the caller's path (a checkout's src/ when it sets one)
PATH = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
BOUND = 30_000  # ms: Playwright's retry bound for a page to show what it should


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _tether(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "tether.cli", *args]
    return subprocess.Popen(cmd, cwd=HERE, env=env, text=True, stderr=subprocess.PIPE)


def _up(url: str, server: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60  # a generous bound on a loaded machine
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"tether serve exited: {server.stderr and server.stderr.read()}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.1)  # polling a starting server: not ordering events
    raise AssertionError(f"tether serve did not answer at {url}")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, dict[str, str], Path]]:
    """A database with two support tickets, a worker and ``tether serve`` on it; yields
    the inspector's URL, the tokens by name and the database path."""
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: apt-get install chromium")
    db = tmp_path / "support.db"
    env = {**os.environ, "TETHER_TEST_DB": str(db), "PYTHONPATH": PATH}
    subprocess.run(
        [sys.executable, "_support.py", "start", "1001", "1002"], cwd=HERE, env=env, check=True
    )
    with tether.open(str(db)) as app:
        tokens = {
            name: app.tokens.create(name, role)[1]
            for name, role in (("alice", "operator"), ("vic", "viewer"), ("root", "admin"))
        }
    port = _free_port()
    server = _tether("serve", "--app", "_support.py:app", "--port", str(port), env=env)
    worker = _tether("worker", "--app", "_support.py:app", "--poll", "0.05", "--quiet", env=env)
    try:
        _up(f"http://127.0.0.1:{port}/", server)
        yield f"http://127.0.0.1:{port}/", tokens, db
    finally:
        for p in (server, worker):
            p.terminate()
        for p in (server, worker):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture
def page() -> Iterator[Page]:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        yield context.new_page()
        browser.close()


def _shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"inspector-{name}.png"), full_page=True)


def _login(page: Page, url: str, token: str) -> None:
    page.goto(url)
    expect(page.locator("input[name=token]")).to_be_visible(timeout=BOUND)  # no session yet
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    expect(page.locator("#runs")).to_be_visible(timeout=BOUND)


def test_an_approver_inspects_forks_and_approves_in_the_browser(
    served: tuple[str, dict[str, str], Path], page: Page
) -> None:
    url, tokens, db = served
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    _shot(page, "login")
    page.fill("input[name=token]", "tether_not_a_token")
    page.click("button[type=submit]")
    expect(page.get_by_role("alert")).to_be_visible(timeout=BOUND)  # a wrong token: refused
    _login(page, url, tokens["alice"])
    expect(page.locator("#who")).to_contain_text("alice · operator")

    # the list: both tickets come to wait for their approval (the worker runs them)
    waiting = page.locator("#runs tr[data-run] .badge", has_text="waiting")
    expect(waiting).to_have_count(2, timeout=BOUND)
    page.fill("input[name=text]", "ticket-1001")
    page.click("form.filters button")
    expect(page.locator("#runs tr[data-run]")).to_have_count(1, timeout=BOUND)
    _shot(page, "runs")

    # a run's timeline, and the state after a step
    page.click("#runs tr[data-run='ticket-1001']")
    timeline = page.locator("#timeline tr[data-position]")
    expect(timeline.first).to_be_visible(timeout=BOUND)
    expect(page.locator("#timeline")).to_contain_text("route")
    expect(page.locator("#timeline")).to_contain_text("a billing question the docs answer")
    page.click("#timeline tr[data-position='1']")
    expect(page.locator("#at-step")).to_contain_text("Ada Lovelace", timeout=BOUND)
    stray = "[...document.getElementById('view').childNodes].filter(n => n.nodeType === 3)"
    assert page.evaluate(f"{stray}.map(n => n.textContent)") == []  # only elements, no "null"
    _shot(page, "run")

    # a diff between the two tickets' runs
    page.fill("#diff input[name=other]", "ticket-1002")
    page.click("#diff button")
    expect(page.locator("#diff-out")).to_contain_text("1002", timeout=BOUND)
    _shot(page, "diff")

    # a fork after the lookup, with the tone edited: a new run, its lineage shown
    page.fill("#fork input[name=step]", "2")
    page.fill("#fork textarea[name=vars]", json.dumps({"tone": "formal"}))
    page.click("#fork button")
    expect(page.locator("#run-head")).to_contain_text("forked from", timeout=BOUND)
    expect(page.locator("#run-head")).to_contain_text("ticket-1001")
    forked = page.locator("h1 code").inner_text()
    assert forked != "ticket-1001"
    _shot(page, "fork")

    # the inbox shows exactly what is approved; approving lets the run go on
    page.click("a[data-nav=approvals]")
    item = page.locator(".inbox-item[data-run='ticket-1001']")
    expect(item).to_contain_text("ada@example.com", timeout=BOUND)
    expect(item).to_contain_text("Dear Ada Lovelace, a warm reply")
    forked_item = page.locator(f".inbox-item[data-run='{forked}']")  # the fork asks again
    expect(forked_item).to_contain_text("Dear Ada Lovelace, a formal reply", timeout=BOUND)
    _shot(page, "inbox")
    item.locator("input[name=reason]").fill("checked the invoice")
    item.get_by_role("button", name="Approve").click()
    expect(item.get_by_role("status")).to_contain_text("ticket-1001", timeout=BOUND)
    page.goto(url + "#/runs/ticket-1001")
    expect(page.locator("#run-head .badge")).to_have_text("completed", timeout=BOUND)
    expect(page.locator("#timeline")).to_contain_text("send_reply")
    _shot(page, "completed")
    assert errors == []

    with tether.open(str(db)) as app:  # the decision is the token's identity, sent once
        decided = [e for e in app.events("ticket-1001") if e.type == "approval.decided"]
        assert len(decided) == 1 and json.loads(decided[0].data)["by"] == "alice"
        assert app.get("ticket-1002").status == "waiting"  # the other one still waits
    assert (db.parent / "support.db.sent").read_text().split()[0] == "1001"


def test_a_viewer_sees_the_inbox_but_cannot_decide(
    served: tuple[str, dict[str, str], Path], page: Page
) -> None:
    url, tokens, db = served
    _login(page, url, tokens["vic"])
    expect(page.locator("#runs tr[data-run] .badge", has_text="waiting")).to_have_count(
        2, timeout=BOUND
    )
    page.click("a[data-nav=approvals]")
    item = page.locator(".inbox-item[data-run='ticket-1002']")
    expect(item).to_contain_text("ada@example.com", timeout=BOUND)
    expect(item.get_by_role("button", name="Approve")).to_be_disabled()  # not offered…
    expect(item.get_by_role("note")).to_contain_text("your role (viewer) may not do this")
    _shot(page, "viewer-inbox")
    # …and refused by the server when sent anyway, from the page's own session
    status = page.evaluate(
        """async () => (await fetch("api/runs/ticket-1002/approvals/send_reply", {
            method: "POST", credentials: "same-origin",
            headers: {"Content-Type": "application/json",
                      "X-CSRF-Token": sessionStorage.getItem("tether.csrf")},
            body: JSON.stringify({decision: "approve"})})).status"""
    )
    assert status == 403
    page.goto(url + "#/runs/ticket-1002")
    expect(page.locator("#fork button")).to_be_disabled(timeout=BOUND)
    page.click("#logout")
    expect(page.locator("input[name=token]")).to_be_visible(timeout=BOUND)
    with tether.open(str(db)) as app:
        assert app.get("ticket-1002").status == "waiting"
        assert not [e for e in app.events("ticket-1002") if e.type == "approval.decided"]


def test_an_admin_sees_the_queues_and_the_worker_with_its_leases(
    served: tuple[str, dict[str, str], Path], page: Page
) -> None:
    url, tokens, _ = served
    _login(page, url, tokens["root"])
    expect(page.locator("#runs tr[data-run] .badge", has_text="waiting")).to_have_count(
        2, timeout=BOUND
    )
    page.click("a[data-nav=workers]")
    workers = page.locator("table#workers tbody tr")
    expect(workers).to_have_count(1, timeout=BOUND)  # the one `tether worker` process
    expect(workers).to_contain_text("default")
    _shot(page, "workers")
    page.click("a[data-nav=queues]")
    expect(page.locator("table#queues tbody tr")).to_contain_text("default", timeout=BOUND)
    _shot(page, "queues")


def test_an_operator_raises_a_budget_and_the_run_goes_on(
    served: tuple[str, dict[str, str], Path], page: Page
) -> None:
    url, tokens, db = served
    env = {**os.environ, "TETHER_TEST_DB": str(db), "PYTHONPATH": PATH}
    subprocess.run([sys.executable, "_support.py", "digest", "7"], cwd=HERE, env=env, check=True)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    _login(page, url, tokens["vic"])  # a viewer sees the budget, cannot raise it
    page.goto(url + "#/runs/digest-7")
    reached = "model_calls reached its limit (1)"
    expect(page.locator("#budget")).to_contain_text(reached, timeout=BOUND)
    expect(page.locator("#raise button")).to_be_disabled()
    page.click("a[data-nav=approvals]")  # the inbox holds it too, shown, not actionable
    item = page.locator(".inbox-item[data-run='digest-7']")
    expect(item).to_contain_text("Budget reached: model_calls", timeout=BOUND)
    expect(item.get_by_role("button", name="Raise budget")).to_be_disabled()
    page.click("#logout")
    _login(page, url, tokens["alice"])
    page.goto(url + "#/runs/digest-7")
    expect(page.locator("#budget")).to_contain_text("used steps 1 · model_calls 1", timeout=BOUND)
    _shot(page, "budget")
    page.fill("#raise input[name=amount]", "1")
    page.fill("#raise input[name=reason]", "one more call")
    page.click("#raise button")
    expect(page.locator("#raise [role=status]")).to_contain_text("Raised", timeout=BOUND)
    page.goto(url + "#/runs/digest-7")
    expect(page.locator("#run-head .badge")).to_have_text("completed", timeout=BOUND)
    assert errors == []
    with tether.open(str(db)) as app:  # raised once, by the token's identity, in the log
        raised = [json.loads(e.data) for e in app.events("digest-7") if e.type == "budget.raised"]
        assert [(r["by"], r["add"]) for r in raised] == [("alice", {"max_model_calls": 1})]
        assert app.get("digest-7").output == "ticket 7, polished"


def _schedule_and_board(db: Path) -> str:
    """A schedule of the support agent (hourly: no tick falls during the test) and a board
    written by a person, then by a run; the run's id."""
    with tether.open(str(db)) as app:

        @app.agent(name="support")
        def support(run: tether.Run, ticket: str) -> None: ...

        @app.agent(name="claim")
        def claim(run: tether.Run) -> int:
            board = run.board("incident-7")
            _, version = board.get("owner")
            return board.set("owner", "triage-bot", expected_version=version)

        app.schedule(support, "9000", every="1h", name="hourly-digest")
        app.board("incident-7", by="pager").set("owner", "alice")
        return app.run(claim).id


def test_schedules_and_boards_in_the_browser(
    served: tuple[str, dict[str, str], Path], page: Page
) -> None:
    url, tokens, db = served
    claimed = _schedule_and_board(db)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    _login(page, url, tokens["root"])

    # schedules: an admin pauses one and resumes it
    page.click("a[data-nav=schedules]")
    row = page.locator("#schedules tr[data-schedule='hourly-digest']")
    expect(row).to_contain_text("every 3600.0 s", timeout=BOUND)
    expect(row.locator(".badge")).to_have_text("active")
    row.get_by_role("button", name="Pause").click()
    expect(page.get_by_role("status")).to_contain_text("hourly-digest paused", timeout=BOUND)
    expect(row.locator(".badge")).to_have_text("paused")
    _shot(page, "schedules")
    with tether.open(str(db)) as app:
        assert app.get_schedule("hourly-digest").paused
    row.get_by_role("button", name="Resume").click()
    expect(row.locator(".badge")).to_have_text("active", timeout=BOUND)

    # boards: the list, a board's keys, a key's history with the run and its step
    page.click("a[data-nav=boards]")
    page.click("#boards tr[data-board='incident-7']")
    key = page.locator("#board-keys tr[data-key='owner']")
    expect(key).to_contain_text("triage-bot", timeout=BOUND)
    key.locator("td").first.click()  # the key (its row links to the run that wrote it too)
    history = page.locator("#history tbody tr")
    expect(history).to_have_count(2, timeout=BOUND)
    expect(history.nth(0)).to_contain_text("pager", timeout=BOUND)
    expect(history.nth(1)).to_contain_text(f"{claimed} step 2", timeout=BOUND)
    expect(page.locator("#set-key input[name=expected_version]")).to_have_value("2")

    # a compare-and-set from the page: written at version 3, then a stale one refused
    page.fill("#set-key textarea[name=value]", '"bob"')
    page.click("#set-key button")
    expect(page.locator("#set-out")).to_contain_text("version 3", timeout=BOUND)
    expect(page.locator("#history tbody tr")).to_have_count(3, timeout=BOUND)
    expect(page.locator("#history tbody tr").nth(2)).to_contain_text("root")
    _shot(page, "board")
    page.fill("#set-key input[name=expected_version]", "2")
    page.fill("#set-key textarea[name=value]", '"carol"')
    page.click("#set-key button")
    expect(page.get_by_role("alert")).to_contain_text("at version 3", timeout=BOUND)
    assert errors == []

    # a viewer reads both, and is offered neither act
    page.click("#logout")
    _login(page, url, tokens["vic"])
    page.goto(url + "#/schedules")
    expect(page.get_by_role("button", name="Pause")).to_be_disabled(timeout=BOUND)
    page.goto(url + "#/boards/incident-7?key=owner")
    expect(page.locator("#history tbody tr")).to_have_count(3, timeout=BOUND)
    expect(page.locator("#set-key button")).to_be_disabled()
    with tether.open(str(db)) as app:
        board = app.board("incident-7")
        assert tuple(board.get("owner")) == ("bob", 3)
        assert [e.by for e in board.history("owner")] == ["pager", "claim", "root"]
        assert not app.get_schedule("hourly-digest").paused


def _judged_and_reverted(db: Path) -> str:
    """A run whose first call a contract allowed and was then reverted, and whose second
    call a rule escalated and a person approved; the run's id."""
    ours = tether.Rule(
        lambda to: to.endswith("@example.com"),
        name="to-domain",
        tool="mail",
        arg="to",
        on_breach="escalate",
    )
    policy = tether.Policy(rules=[ours])
    with tether.open(str(db), policy=policy) as app:
        limit = tether.Rule(lambda amount: amount <= 500, name="max-amount", arg="amount")

        @app.tool(risk="write", contract=[limit], compensate=lambda result, to, amount: None)
        def refund(to: str, amount: int) -> int:
            return amount

        @app.tool(risk="write")
        def mail(to: str) -> str:
            return to

        @app.agent(name="payout")
        def payout(run: tether.Run, to: str) -> str:
            run.tool(refund, to=to, amount=120)
            return str(run.tool(mail, to=to))

        handle = app.run(payout, "eve@elsewhere.org")  # in no queue: the worker leaves it
        rid = handle.id
        assert handle.status == "waiting"  # the rule escalated the mail
        app.approve(rid, "approve:mail", by="alice")
        assert app.resume(rid).status == "completed"
        app.revert(rid, step=1, by="alice", reason="refunded twice")
        return rid


def test_verdicts_and_a_revert_in_the_timeline(
    served: tuple[str, dict[str, str], Path], page: Page
) -> None:
    url, tokens, db = served
    rid = _judged_and_reverted(db)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    _login(page, url, tokens["vic"])
    page.goto(url + f"#/runs/{rid}")
    first = page.locator("#timeline tr[data-position='1']")
    expect(first).to_contain_text("reverted by alice", timeout=BOUND)
    expect(first.locator(".badge")).to_have_text(["completed", "reverted"])
    expect(first).to_contain_text("contract on args: allow")
    mail = page.locator("#timeline tr[data-position='3']")
    expect(mail).to_contain_text('contract on args: escalate: to-domain ("eve@elsewhere.org")')
    expect(mail).not_to_contain_text("reverted")
    _shot(page, "verdicts")
    assert errors == []
