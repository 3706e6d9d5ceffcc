"""A bad option in ``--db``'s URL is a usage error that names the option and says what to
give (exit 2), never an "unexpected ValueError"; and nothing is written. The same values
given to ``tether.open`` raise ``InvalidInput`` (still a ValueError)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tether
from tether.cli.main import main

PG = "postgresql://postgres@127.0.0.1:5432/test"

BAD = [
    (f"{PG}?prepare=maybe", "prepare must be one of auto, on, off"),
    (f"{PG}?pooler=maybe", "pooler must be true, false or auto"),
    (f"{PG}?schema=bad%20name", "is not a plain PostgreSQL name"),
    (f"{PG}?listen_url=zzz", "not a PostgreSQL URL"),
    ("postgresql://127.0.0.1:5432/test?nonsense=1", "not a PostgreSQL URL"),
    # a scheme tether has no store for was opened as a SQLite file of that name
    ("mysql://root@127.0.0.1/test", "mysql:// is not a database tether stores on"),
    ("redis://127.0.0.1:6379", "redis:// is not a database tether stores on"),
    # sqlite3 opens "" as a temporary database, lost at close
    ("sqlite://", "'sqlite://' names no file"),
    ("sqlite+pysqlite://", "names no file"),
]


@pytest.mark.parametrize(("url", "said"), BAD)
def test_a_bad_option_in_the_url_is_a_usage_error(
    url: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--db", url, "runs"]) == 2
    err = capsys.readouterr().err
    assert said in err
    assert "unexpected" not in err and "Traceback" not in err


@pytest.mark.parametrize(("url", "said"), BAD)
def test_open_raises_invalid_input(url: str, said: str) -> None:
    with pytest.raises(tether.InvalidInput, match=said.split(" (")[0]):
        tether.open(url)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"lanes": 0}, "lanes"),
        ({"linger": -1}, "linger"),
        ({"statement_timeout": "soon"}, "statement_timeout is in seconds"),
        ({"read_only": "yes"}, "read_only is True or False"),
    ],
)
def test_bad_postgres_options_raise_invalid_input(options: dict[str, object], said: str) -> None:
    with pytest.raises(tether.InvalidInput, match=said):
        tether.open(PG, **options)  # type: ignore[arg-type]


def test_a_bad_sqlite_durability_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with pytest.raises(tether.InvalidInput):
        tether.open(str(db), durability="maybe")
    assert not db.exists()


def test_urls_written_for_sqlalchemy_and_the_home_directory_name_the_same_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``postgresql+psycopg://`` (a SQLAlchemy URL, as many settings hold it) is the
    PostgreSQL URL without its driver; ``sqlite+pysqlite:///``, ``file:///`` and a path
    under ``~`` are SQLite files where they say (none of them a file of that name here)."""
    with tether.open(PG.replace("postgresql://", "postgresql+psycopg://")) as app:
        assert type(app.store).__name__ == "PostgresStore"
        app.runs()
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    for url in ["~/home.db", f"sqlite+pysqlite:///{tmp_path}/a.db", f"file://{tmp_path}/b.db"]:
        with tether.open(url) as app:
            app.runs()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert [n for n in names if n.endswith(".db")] == ["a.db", "b.db", "home.db"], names
    assert not [n for n in names if n.startswith(("~", "sqlite", "file", "-"))], names
    assert main(["--db", "~/home.db", "runs"]) == 0
    assert "no runs yet" in capsys.readouterr().out
