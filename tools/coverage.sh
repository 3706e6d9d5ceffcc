#!/usr/bin/env bash
# Line and branch coverage of the whole suite, the Python processes the tests start counted
# (configured in pyproject.toml: [tool.coverage.run]). Not run by CI: it is ~2x slower than
# the plain suite. Usage: tools/coverage.sh [pytest args...], e.g. tools/coverage.sh -x -q
# Prints the report, then "lines NN.N% branches NN.N%" (the numbers issue 35 keeps >= 93/87).
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
"$py" -c 'import coverage' 2>/dev/null || {
  echo "coverage.py is missing: .venv/bin/pip install -e '.[test]'" >&2
  exit 2
}
# absolute, so children started in another working directory write beside the parent
export COVERAGE_FILE="$PWD/.coverage"
"$py" -m coverage erase
status=0
# -n 0: one pytest process (the suite's xdist workers would be measured too, untested here)
"$py" -m coverage run -m pytest -p no:cacheprovider -n 0 "$@" || status=$?
"$py" -m coverage combine -q
"$py" -m coverage report || true
"$py" -m coverage json -q -o coverage.json
"$py" - <<'PY'
import json

t = json.load(open("coverage.json"))["totals"]
lines = 100 * t["covered_lines"] / t["num_statements"]
branches = 100 * t["covered_branches"] / max(1, t["num_branches"])
print(f"lines {lines:.1f}% ({t['covered_lines']}/{t['num_statements']}) "
      f"branches {branches:.1f}% ({t['covered_branches']}/{t['num_branches']})")
PY
exit "$status"
