"""Artifacts in the database (the blobs table) on SQLite and PostgreSQL: round trips, one
copy per content, digest verification, and large step outputs offloaded to artifacts."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from _conformance import Backend
from _memory import count

import tether
from tether.context.artifacts import ArtifactRef, Artifacts, DatabaseArtifacts, is_ref

pytestmark = pytest.mark.conformance

PDF = b"%PDF-1.7\n" + bytes(range(256)) * 40


@pytest.fixture
def app(backend: Backend) -> Iterator[tether.App]:
    a = tether.open(backend.url, clock=tether.FakeClock())
    yield a
    a.close()


def test_the_default_artifact_store_is_the_database(app: tether.App) -> None:
    assert isinstance(app.artifacts, Artifacts)
    assert isinstance(app.artifacts.backend, DatabaseArtifacts)
    assert app.artifacts is app.artifacts


def test_put_then_get_round_trips_the_bytes(app: tether.App, backend: Backend) -> None:
    ref = app.artifacts.put(PDF, media_type="application/pdf")
    assert ref == ArtifactRef(hashlib.sha256(PDF).hexdigest(), len(PDF), "application/pdf")
    assert app.artifacts.get(ref) == PDF
    assert app.artifacts.open(ref).read() == PDF
    assert app.artifacts.get(ref.to_value()) == PDF
    assert backend.sql("SELECT sha256, size FROM blobs") == [(ref.sha256, len(PDF))]


def test_the_same_bytes_are_stored_once(app: tether.App, backend: Backend) -> None:
    a = app.artifacts.put(PDF, media_type="application/pdf")
    b = app.artifacts.put(bytearray(PDF))
    assert a.sha256 == b.sha256 and b.media_type == "application/octet-stream"
    app.artifacts.put(b"other")
    assert count(backend, "blobs") == 2


def test_put_file_stores_the_file_and_guesses_its_type(
    app: tether.App, backend: Backend, tmp_path: Path
) -> None:
    (tmp_path / "report.pdf").write_bytes(PDF)
    ref = app.artifacts.put_file(tmp_path / "report.pdf")
    assert ref.media_type == "application/pdf" and app.artifacts.get(ref) == PDF
    assert app.artifacts.put_file(tmp_path / "report.pdf", "x/y").media_type == "x/y"
    assert count(backend, "blobs") == 1


def test_tampered_bytes_are_refused_naming_the_digest(app: tether.App, backend: Backend) -> None:
    ref = app.artifacts.put(PDF)
    literal = "X'00'" if backend.name == "sqlite" else "'\\x00'::bytea"
    backend.sql(f"UPDATE blobs SET data = {literal} WHERE sha256 = '{ref.sha256}'")
    with pytest.raises(tether.ArtifactCorrupt, match=f"artifact {ref.sha256} .* is corrupt") as e:
        app.artifacts.get(ref)
    assert e.value.sha256 == ref.sha256
    assert hashlib.sha256(b"\x00").hexdigest() in str(e.value)


def test_exists_delete_and_a_missing_artifact(app: tether.App, backend: Backend) -> None:
    ref = app.artifacts.put(b"short-lived")
    assert app.artifacts.exists(ref)
    assert app.artifacts.delete(ref) is True and app.artifacts.delete(ref) is False
    assert not app.artifacts.exists(ref)
    with pytest.raises(tether.NotFound, match=ref.sha256):
        app.artifacts.get(ref)
    assert count(backend, "blobs") == 0


def test_a_large_step_output_goes_through_an_artifact(app: tether.App, backend: Backend) -> None:
    big = {"rows": [(i, f"row {i}", b"\x00" * 8) for i in range(4000)]}

    @app.agent
    def report(run: tether.Run) -> object:
        return run.step("build", lambda: app.artifacts.offload(big))

    out = app.run(report).output
    assert is_ref(out) and out["size"] > 64 * 1024
    assert app.get(app.runs()[0].id).output == out  # the log holds the small reference
    assert app.artifacts.restore(out) == big  # tuples and bytes come back exactly
    assert count(backend, "blobs") == 1
    assert app.artifacts.offload({"small": 1}) == {"small": 1}
