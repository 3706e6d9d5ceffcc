"""The README stays a newcomer's page: short, its example first, no benchmark narrative,
and every link of it and of docs/ leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_the_readme_is_short_and_links_the_reference_pages() -> None:
    assert len(README.splitlines()) <= 150
    for page in ("docs/guarantees.md", "docs/cli.md", "bench/README.md"):
        assert f"]({page})" in README, page


def test_the_commands_and_the_example_come_first() -> None:
    blocks = re.findall(r"```(\w*)\n(.*?)```", README, flags=re.S)
    assert [lang for lang, _ in blocks[:3]] == ["bash", "bash", "python"]
    assert blocks[0][1].strip().endswith(".venv/bin/tether demo")
    assert blocks[1][1].strip().endswith(".venv/bin/pytest")
    assert [lang for lang, _ in blocks].count("python") == 1  # test_readme runs each


def test_the_benchmark_narrative_is_in_bench_readme_only() -> None:
    """Commit hashes and per-run detail belong to bench/README.md."""
    assert not re.findall(r"`[0-9a-f]{7,40}`", README)
    assert "missed" not in README.lower()


def test_every_relative_link_leads_to_a_file() -> None:
    pages = [ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")]
    broken = []
    for page in pages:
        for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            target = (page.parent / link).resolve()
            if not target.exists():
                broken.append(f"{page.relative_to(ROOT)} -> {link}")
    assert broken == []
