"""Artifacts in a directory: one file per digest, written atomically, verified on read."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

import tether
from tether.context.artifacts import ArtifactRef, Artifacts, DirectoryArtifacts

pytestmark = pytest.mark.integration

DATA = b"\x89PNG\r\n" + os.urandom(100_000)


@pytest.fixture
def arts(tmp_path: Path) -> Artifacts:
    return Artifacts(DirectoryArtifacts(tmp_path / "artifacts"))


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_round_trip_and_layout(arts: Artifacts, tmp_path: Path) -> None:
    ref = arts.put(DATA, "image/png")
    digest = hashlib.sha256(DATA).hexdigest()
    assert ref == ArtifactRef(digest, len(DATA), "image/png")
    assert _files(tmp_path / "artifacts") == [tmp_path / "artifacts" / digest[:2] / digest]
    assert arts.get(ref) == DATA and arts.open(ref).read() == DATA


def test_the_same_bytes_are_one_file(arts: Artifacts, tmp_path: Path) -> None:
    a = arts.put(DATA)
    mtime = (tmp_path / "artifacts" / a.sha256[:2] / a.sha256).stat().st_mtime_ns
    b = arts.put(bytes(DATA), "image/png")
    arts.put(b"other")
    assert a.sha256 == b.sha256
    assert len(_files(tmp_path / "artifacts")) == 2
    assert (tmp_path / "artifacts" / a.sha256[:2] / a.sha256).stat().st_mtime_ns == mtime


def test_a_modified_file_is_refused_naming_the_digest_and_file(arts: Artifacts) -> None:
    ref = arts.put(DATA)
    backend = arts.backend
    assert isinstance(backend, DirectoryArtifacts)
    path = backend.path(ref)
    path.write_bytes(DATA[:-1] + bytes([DATA[-1] ^ 0xFF]))  # another last byte, always
    with pytest.raises(tether.ArtifactCorrupt, match=f"artifact {ref.sha256} in {path}") as e:
        arts.get(ref)
    assert e.value.sha256 == ref.sha256
    path.write_bytes(b"")
    with pytest.raises(tether.ArtifactCorrupt, match="0 stored bytes"):
        arts.get(ref)


def test_a_failed_write_leaves_no_file(
    arts: Artifacts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        arts.put(DATA)
    assert _files(tmp_path / "artifacts") == []
    monkeypatch.undo()
    ref = arts.put(DATA)
    assert arts.get(ref) == DATA
    assert not [p for p in _files(tmp_path / "artifacts") if p.name.startswith(".tmp-")]


def test_exists_delete_and_missing(arts: Artifacts) -> None:
    ref = arts.put(b"gone soon")
    assert arts.exists(ref)
    assert arts.delete(ref) is True and arts.delete(ref) is False
    assert not arts.exists(ref)
    with pytest.raises(tether.NotFound, match=ref.sha256):
        arts.get(ref)


def test_a_reference_cannot_name_another_file(arts: Artifacts) -> None:
    forged = {"$t": "artifact", "sha256": "../../etc/passwd", "size": 1, "media_type": "x"}
    with pytest.raises(ValueError, match="not a SHA-256 digest"):
        arts.get(forged)
    with pytest.raises(TypeError, match="expected an ArtifactRef"):
        arts.get("0" * 64)  # type: ignore[arg-type]


def test_put_takes_bytes_and_put_file_a_file(arts: Artifacts, tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"takes bytes, not str; encode text first"):
        arts.put("text")  # type: ignore[arg-type]
    with pytest.raises(tether.NotFound, match="is not a file"):
        arts.put_file(tmp_path / "missing.csv")
    (tmp_path / "table.csv").write_text("a,b\n1,2\n")
    ref = arts.put_file(str(tmp_path / "table.csv"))
    assert ref.media_type == "text/csv" and arts.get(ref) == b"a,b\n1,2\n"


def test_the_app_can_keep_artifacts_in_a_directory(tmp_path: Path) -> None:
    app = tether.open(str(tmp_path / "agent.db"))
    try:
        app.artifacts = DirectoryArtifacts(tmp_path / "blobs")
        ref = app.artifacts.put(DATA)
        assert (tmp_path / "blobs" / ref.sha256[:2] / ref.sha256).read_bytes() == DATA
        assert app.artifacts.get(ref) == DATA
    finally:
        app.close()


def test_a_file_is_not_a_directory_store(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="is a file; give a directory"):
        DirectoryArtifacts(tmp_path / "f")
