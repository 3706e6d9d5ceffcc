"""tools/planted_bugs.py (issue 35's bugs, planted again) still names real code and tests:
each bug's text is in the source it changes, its change changes it, and its tests exist.
Running the bugs takes minutes (the tool); this keeps its list from going stale silently."""

from __future__ import annotations

import os
from typing import Any

import pytest
from _tools import ROOT, load_tool

pytestmark = [
    pytest.mark.unit,
    # under mutmut the source it reads is mutmut's rewrite (and a change to mutmut's list of
    # ignored tests would drop every kept verdict: pyproject.toml)
    pytest.mark.skipif("MUTANT_UNDER_TEST" in os.environ, reason="reads the source as text"),
]


BUGS = load_tool("planted_bugs").BUGS


def test_the_list_holds_the_issues_five_bugs_and_each_lease_path_of_both_dialects() -> None:
    names = {b.name for b in BUGS}
    assert {"replay-args", "snapshot-key", "key-hash", "effects-dedup"} <= names
    leases = {n for n in names if n.startswith("lease-")}
    assert leases == {
        f"lease-{d}-{p}-{c}"
        for d in ("sqlite", "postgres")
        for p in ("claim", "scan")
        for c in ("le", "plus5")
    }


@pytest.mark.parametrize("bug", BUGS, ids=lambda b: b.name)
def test_each_bug_changes_code_that_exists_and_names_tests_that_exist(bug: Any) -> None:
    source = (ROOT / "src" / "tether" / bug.path).read_text()
    assert source.count(bug.find) >= 1, f"{bug.name}: its text left {bug.path}"
    assert bug.replace != bug.find
    for test in bug.tests:
        assert (ROOT / test).is_file(), test
