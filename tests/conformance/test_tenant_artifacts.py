"""Tenant-scoped artifacts (``app.for_tenant(t).artifacts``) on SQLite and PostgreSQL: a
tenant reaches only the digests it put (another tenant's are as unknown), a tenant's
delete leaves other claims and unscoped artifacts, and gc keeps claimed bytes and
sweeps the ones no one claims any more."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from _conformance import Backend

import tether
from tether.context.artifacts import ArtifactRef, DirectoryArtifacts, is_ref
from tether.context.tenant_artifacts import TenantArtifacts
from tether.model.clock import FakeClock

pytestmark = pytest.mark.conformance

HOUR = 3600.0
PDF = b"%PDF-1.7\n" + bytes(range(256)) * 40


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def app(backend: Backend, clock: FakeClock) -> Iterator[tether.App]:
    a = tether.open(backend.url, clock=clock)
    yield a
    a.close()


def _blobs(backend: Backend) -> dict[str, str | None]:
    return dict(backend.sql("SELECT sha256, kind FROM blobs"))  # type: ignore[arg-type]


def _claims(backend: Backend) -> set[tuple[str, str]]:
    return set(backend.sql("SELECT tenant, sha256 FROM artifact_claims"))  # type: ignore[arg-type]


def _not_found(view: TenantArtifacts, ref: ArtifactRef) -> str:
    with pytest.raises(tether.NotFound) as e:
        view.get(ref)
    return str(e.value)


def test_a_tenant_reaches_only_what_it_put(app: tether.App, backend: Backend) -> None:
    acme, globex = app.for_tenant("acme").artifacts, app.for_tenant("globex").artifacts
    assert isinstance(acme, TenantArtifacts)
    ref = acme.put(PDF, "application/pdf")
    assert acme.get(ref) == PDF and acme.open(ref.to_value()).read() == PDF
    assert acme.exists(ref)
    assert _blobs(backend) == {ref.sha256: "claimed"}
    assert _claims(backend) == {("acme", ref.sha256)}

    never = ArtifactRef(hashlib.sha256(b"never stored").hexdigest(), 12)
    # another tenant's digest: word for word the error of a digest never stored
    assert _not_found(globex, ref) == _not_found(globex, never).replace(never.sha256, ref.sha256)
    assert not globex.exists(ref) and not globex.exists(never)
    assert globex.delete(ref) is False and globex.delete(never) is False
    assert acme.get(ref) == PDF  # globex's delete touched nothing
    with pytest.raises(tether.NotFound):
        globex.restore(ref.to_value())
    # the unscoped view (the operator) sees every artifact, and a view of every tenant too
    assert app.artifacts.get(ref) == PDF and app.for_tenant(None).artifacts.get(ref) == PDF
    assert (
        app.scoped(tether.Identity("bob", tether.Role.VIEWER, "globex")).artifacts.exists(ref)
        is False
    )


def test_the_same_bytes_put_by_two_tenants_are_stored_once_with_two_claims(
    app: tether.App, backend: Backend
) -> None:
    acme, globex = app.for_tenant("acme").artifacts, app.for_tenant("globex").artifacts
    ref = acme.put(PDF)
    assert globex.put(bytearray(PDF)) == ref  # its own claim: now it may read it
    assert globex.get(ref) == PDF
    assert len(_blobs(backend)) == 1
    assert _claims(backend) == {("acme", ref.sha256), ("globex", ref.sha256)}
    assert acme.delete(ref) is True and acme.delete(ref) is False
    assert not acme.exists(ref)
    assert globex.get(ref) == PDF  # acme's delete left globex's copy
    assert _blobs(backend) == {ref.sha256: "claimed"}


def test_gc_keeps_claimed_bytes_and_sweeps_those_no_one_claims(
    app: tether.App, backend: Backend, clock: FakeClock
) -> None:
    acme, globex = app.for_tenant("acme").artifacts, app.for_tenant("globex").artifacts
    kept, released, unscoped = acme.put(b"kept"), acme.put(b"released"), acme.put(b"unscoped")
    globex.put(b"kept")
    assert app.artifacts.put(b"unscoped") == unscoped  # also stored unscoped: kept for good
    clock.advance(10 * HOUR)
    assert app.gc(keep_last=100).pages == 0 and len(_blobs(backend)) == 3
    assert acme.delete(kept) and acme.delete(released) and acme.delete(unscoped)
    assert _blobs(backend) == {
        kept.sha256: "claimed",
        released.sha256: "page",
        unscoped.sha256: None,
    }
    assert app.gc(keep_last=100).pages == 0  # within the grace period of the release
    clock.advance(2 * HOUR)
    assert app.gc(keep_last=100).pages == 1
    assert _blobs(backend) == {kept.sha256: "claimed", unscoped.sha256: None}
    assert globex.get(kept) == b"kept" and app.artifacts.get(unscoped) == b"unscoped"


def test_a_claim_on_a_snapshot_page_keeps_it_and_releasing_it_gives_it_back(
    app: tether.App, backend: Backend, clock: FakeClock
) -> None:
    data = b"bytes that are a snapshot page too"
    digest = hashlib.sha256(data).hexdigest()
    app.store.put_blobs({digest: data}, now=clock.now())
    ref = app.for_tenant("acme").artifacts.put(data)
    assert _blobs(backend)[digest] == "claimed"
    clock.advance(10 * HOUR)
    assert app.store.sweep_blobs(before=clock.now()) == (0, 0)
    app.for_tenant("acme").artifacts.delete(ref)
    assert _blobs(backend)[digest] == "page"
    clock.advance(10 * HOUR)
    assert app.store.sweep_blobs(before=clock.now()) == (1, len(data))


def test_a_claimed_page_is_never_swept_whatever_its_kind(
    app: tether.App, backend: Backend, clock: FakeClock
) -> None:
    ref = app.for_tenant("acme").artifacts.put(b"raced")
    # as a tenant's delete racing another's put may leave it: a page with a claim
    backend.sql(f"UPDATE blobs SET kind = 'page' WHERE sha256 = '{ref.sha256}'")
    clock.advance(10 * HOUR)
    assert app.store.sweep_blobs(before=clock.now(), dry_run=True) == (0, 0)
    assert app.store.sweep_blobs(before=clock.now()) == (0, 0)
    assert app.for_tenant("acme").artifacts.get(ref) == b"raced"


def test_the_unscoped_delete_deletes_the_bytes_and_every_claim(
    app: tether.App, backend: Backend
) -> None:
    acme = app.for_tenant("acme").artifacts
    ref = acme.put(PDF)
    assert app.artifacts.delete(ref) is True
    assert _blobs(backend) == {} and _claims(backend) == set()
    assert not acme.exists(ref)


def test_offload_and_restore_through_a_tenant_claim_what_a_run_stores(
    app: tether.App, backend: Backend
) -> None:
    big = {"rows": [(i, f"row {i}") for i in range(8000)]}
    acme = app.for_tenant("acme")

    @app.agent
    def report(run: tether.Run) -> object:
        return run.step("build", lambda: acme.artifacts.offload(big))

    out = acme.run(report).output
    assert is_ref(out)
    assert acme.artifacts.restore(out) == big
    assert acme.artifacts.offload({"small": 1}) == {"small": 1}
    with pytest.raises(tether.NotFound):
        app.for_tenant("globex").artifacts.restore(out)
    assert {t for t, _ in _claims(backend)} == {"acme"}


def test_put_file_claims_the_file(app: tether.App, tmp_path: Path) -> None:
    (tmp_path / "report.pdf").write_bytes(PDF)
    acme = app.for_tenant("acme").artifacts
    ref = acme.put_file(tmp_path / "report.pdf")
    assert ref.media_type == "application/pdf" and acme.get(ref) == PDF
    assert not app.for_tenant("globex").artifacts.exists(ref)


def test_bytes_in_a_directory_with_claims_in_the_database(
    app: tether.App, backend: Backend, tmp_path: Path
) -> None:
    app.artifacts = DirectoryArtifacts(tmp_path / "arts")
    acme, globex = app.for_tenant("acme").artifacts, app.for_tenant("globex").artifacts
    ref = acme.put(PDF)
    assert acme.get(ref) == PDF and not globex.exists(ref)
    assert _blobs(backend) == {} and _claims(backend) == {("acme", ref.sha256)}
    with pytest.raises(tether.NotFound, match=f"no artifact {ref.sha256} among tenant 'globex'"):
        globex.get(ref)
    assert acme.delete(ref) is True and not acme.exists(ref)
    assert app.artifacts.get(ref) == PDF  # the bytes stay: the operator deletes them


def test_bad_input_is_refused_clearly_and_stores_nothing(app: tether.App, backend: Backend) -> None:
    acme = app.for_tenant("acme").artifacts
    with pytest.raises(ValueError, match="is not a SHA-256 digest"):
        acme.get({"$t": "artifact", "sha256": "../../etc/passwd", "size": 1, "media_type": "x"})
    with pytest.raises(ValueError, match="is not a SHA-256 digest"):
        acme.delete(ArtifactRef("ABC", 1))
    with pytest.raises(TypeError, match="expected an ArtifactRef"):
        acme.exists("0" * 64)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes bytes, not str"):
        acme.put("text")  # type: ignore[arg-type]
    assert _blobs(backend) == {} and _claims(backend) == set()


def test_a_run_knows_its_tenant_so_its_code_stores_under_it(
    app: tether.App, backend: Backend
) -> None:
    """The agent is the same code for every tenant: ``run.tenant`` (its row's owner) picks
    the tenant's view, also when a process that is not the tenant's resumes it."""
    big = {"rows": [(i, f"row {i}") for i in range(8000)]}
    seen: list[str | None] = []

    @app.agent
    def report(run: tether.Run) -> object:
        seen.append(run.tenant)
        return run.step("build", lambda: app.for_tenant(run.tenant).artifacts.offload(big))

    queued = app.for_tenant("acme").start(report)
    out = app.resume(queued).output  # resumed unscoped, as a worker does
    assert seen == ["acme"] and is_ref(out)
    assert app.for_tenant("acme").artifacts.restore(out) == big
    assert not app.for_tenant("globex").artifacts.exists(ArtifactRef.from_value(out))
    assert {t for t, _ in _claims(backend)} == {"acme"}
    app.run(report)  # no tenant: the unscoped store, no claim
    assert seen[-1] is None and {t for t, _ in _claims(backend)} == {"acme"}
