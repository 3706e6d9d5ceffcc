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
