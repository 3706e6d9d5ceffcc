"""Agent versions (issue 32): several versions of an agent registered side by side, each
run executed by the code of its own version, on both backends. The rolling deploy across
worker processes is tests/acceptance/test_rolling_deploy.py; the claim's filter is in the
store suite (tether.testing.queue)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _conformance import Backend

import tether

pytestmark = pytest.mark.conformance


def _define(app: tether.App, *versions: str | None) -> None:
    for version in versions:

        def order(run: tether.Run, n: int, version: str | None = version) -> str:
            run.wait("go")
            return f"{n} by {version}"

        app.agent(name="order", version=version)(order)


def test_new_runs_start_at_the_newest_version_and_each_resumes_under_its_own(
    app: tether.App,
) -> None:
    _define(app, "1")
    old = app.run("order", 1).id
    _define(app, "2")  # registered beside version 1: new runs start as 2
    new = app.run("order", 2).id
    assert (app.store.get_run(old).version, app.store.get_run(new).version) == ("1", "2")
    for rid in (old, new):
        app.signal(rid, "go")
    assert app.resume(old).output == "1 by 1"
    assert app.resume(new).output == "2 by 2"
    counts = {(c.version, c.status): c.runs for c in app.count_runs(agent="order")}
    assert counts == {("1", "completed"): 1, ("2", "completed"): 1}
    assert [r.id for r in app.list_runs(version="1").runs] == [old]


@pytest.fixture
def signalled(app: tether.App) -> str:
    """A run of ``order`` version 1 that got its signal: queued, to be resumed."""
    _define(app, "1")
    rid = app.run("order", 1).id
    app.signal(rid, "go")
    return rid


@pytest.fixture
def other(backend: Backend) -> Iterator[tether.App]:
    """Another process's App on the same database: new code, nothing registered yet."""
    with tether.open(backend.url) as a:
        yield a


def test_a_run_of_a_version_the_app_does_not_register_is_refused_clearly(
    signalled: str, other: tether.App
) -> None:
    _define(other, "2")  # the new code alone: version 1 is not served here
    with pytest.raises(tether.NotFound, match=r"version '1' is not served by this app"):
        other.resume(signalled)
    assert other.store.get_run(signalled).status == "queued"  # nothing changed
    _define(other, None)  # code without a version serves the runs no version serves
    with pytest.raises(tether.NotFound, match="version '1' is not served"):
        other.resume(signalled)
    _define(other, "1")
    assert other.resume(signalled).output == "1 by 1"


def test_an_agent_registered_without_versions_serves_every_run_of_it(
    signalled: str, other: tether.App
) -> None:
    _define(other, None)  # versions not used by this code: it runs them all
    assert other.resume(signalled).output == "1 by None"


def test_a_version_is_checked(app: tether.App) -> None:
    with pytest.raises(tether.InvalidInput, match="version"):
        _define(app, "")
    with pytest.raises(tether.InvalidInput, match="version"):
        app.count_runs(version="bad\x00")


def test_a_version_derived_from_the_code_changes_with_it(app: tether.App) -> None:
    def triage(run: tether.Run) -> str:
        return "v1"

    def triage_edited(run: tether.Run) -> str:
        return "v2"

    app.agent(name="triage", version=tether.source_version)(triage)
    first = app.store.get_run(app.run("triage").id).version
    assert first == tether.source_version(triage) and len(first or "") == 12
    assert tether.source_version(triage) == tether.source_version(triage)  # stable
    app.agent(name="triage", version=tether.source_version)(triage_edited)
    second = app.store.get_run(app.run("triage").id).version
    assert second != first
    with pytest.raises(tether.InvalidInput, match="cannot be read"):
        tether.source_version(len)  # no source text: declare the version instead
