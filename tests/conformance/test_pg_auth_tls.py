"""Passwords from the environment or a file, and TLS, against a PostgreSQL that checks
them (issue 34; docs/postgres.md, "Passwords" and "TLS").

The shared test server trusts 127.0.0.1 and has no TLS, and is not reconfigured: this
module starts a private PostgreSQL of its own (initdb in a temporary directory, run as
the ``postgres`` user, password authentication, TLS with a certificate made here), on a
free port, and stops it at the end. Skipped where that cannot be done (no initdb, no
openssl, not root or postgres).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

import tether

PASSWORD = "Sup3r-s3cret_pw"
USER = "tether"


@dataclass(frozen=True)
class Server:
    port: int
    ca: Path  # the certificate the server presents (self-signed: its own CA)
    other_ca: Path  # a certificate that did not sign it
    dir: Path

    def url(self, extra: str = "", password: str | None = None) -> str:
        auth = f"{USER}:{password}" if password is not None else USER
        query = f"?schema=t_auth{'&' + extra if extra else ''}"
        return f"postgresql://{auth}@127.0.0.1:{self.port}/postgres{query}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _cert(dir: Path, name: str) -> tuple[Path, Path]:
    key, crt = dir / f"{name}.key", dir / f"{name}.crt"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-keyout",
            str(key),
            "-out",
            str(crt),
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return key, crt


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not bins or shutil.which("openssl") is None:
        pytest.skip("needs PostgreSQL's initdb and openssl to start a private server")
    if os.geteuid() not in (0, pwd.getpwnam("postgres").pw_uid if _has_postgres() else -1):
        pytest.skip("starting a private PostgreSQL needs root (run as postgres) or postgres")
    bindir = Path(bins[-1]).parent
    dir = Path(tempfile.mkdtemp(prefix="tether-pg-"))
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    key, crt = _cert(dir, "server")
    _, other = _cert(dir, "other")
    (dir / "pw").write_text(PASSWORD + "\n")
    if os.geteuid() == 0:
        shutil.chown(dir, "postgres")
        for f in (key, crt, dir / "pw"):
            shutil.chown(f, "postgres")
    key.chmod(0o600)
    data = dir / "data"
    subprocess.run(
        [
            *as_postgres,
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            USER,
            "-A",
            "scram-sha-256",
            f"--pwfile={dir / 'pw'}",
        ],
        check=True,
        capture_output=True,
    )
    port = _free_port()
    options = (
        f"-p {port} -k {dir} -c listen_addresses=127.0.0.1 -c ssl=on "
        f"-c ssl_cert_file={crt} -c ssl_key_file={key}"
    )
    subprocess.run(
        [
            *as_postgres,
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            options,
            "-w",
            "-l",
            str(dir / "log"),
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield Server(port, crt, other, dir)
    finally:
        subprocess.run(
            [*as_postgres, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"],
            capture_output=True,
        )
        shutil.rmtree(dir, ignore_errors=True)


def _has_postgres() -> bool:
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return False
    return True


def _no_password(text: str) -> None:
    assert PASSWORD not in text and "wrong-" + PASSWORD not in text, text


def test_a_password_in_the_environment(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGPASSWORD", PASSWORD)  # libpq's: tether passes the URL on
    with tether.open(server.url()) as app:
        assert app.runs() == []
    monkeypatch.setenv("PGPASSWORD", "wrong-" + PASSWORD)
    with pytest.raises(tether.StoreUnavailable, match="password authentication failed") as e:
        tether.open(server.url())
    _no_password(str(e.value))


def test_a_password_from_a_file(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"127.0.0.1:{server.port}:*:{USER}:{PASSWORD}\n")
    passfile.chmod(0o600)  # libpq ignores a file others can read
    with tether.open(server.url(f"passfile={passfile}")) as app:
        assert app.runs() == []
    monkeypatch.setenv("PGPASSFILE", str(passfile))  # the same, from the environment
    with tether.open(server.url()) as app:
        assert app.runs() == []
    passfile.write_text(f"127.0.0.1:{server.port}:*:{USER}:wrong-{PASSWORD}\n")
    with pytest.raises(tether.StoreUnavailable, match="password authentication failed") as e:
        tether.open(server.url(f"passfile={passfile}"))
    _no_password(str(e.value))
    # a wrong password in the URL itself: not shown either
    with pytest.raises(tether.StoreUnavailable) as e:
        tether.open(server.url(password="wrong-" + PASSWORD))
    _no_password(str(e.value))


def test_tls_through_the_url(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    with tether.open(server.url("sslmode=require")) as app:
        assert app.runs() == []
        # tether's connections, seen by the server: every one over TLS
        plain = server.url("sslmode=disable").split("?")[0] + "?sslmode=disable"
        with psycopg.connect(plain) as conn:
            row = conn.execute(
                "SELECT bool_and(s.ssl), count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a "
                "USING (pid) WHERE a.application_name = 'tether'"
            ).fetchone()
        assert row is not None and row[0] is True and row[1] >= 1
    verified = server.url(f"sslmode=verify-full&sslrootcert={server.ca}")
    with tether.open(verified) as app:  # the server's own certificate: verified
        assert app.runs() == []
    wrong = server.url(f"sslmode=verify-full&sslrootcert={server.other_ca}", password=PASSWORD)
    with pytest.raises(tether.StoreUnavailable) as e:
        tether.open(wrong)
    message = str(e.value)
    assert "certificate verify failed" in message and "sslmode=verify-full" in message
    assert "sslrootcert" in message
    _no_password(message)
