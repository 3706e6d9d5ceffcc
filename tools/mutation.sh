#!/usr/bin/env bash
# Mutation testing of the core (issue 35): not part of CI, it takes an hour or more on 2 cores.
#
#   tools/mutation.sh            mutmut on the core modules ([tool.mutmut] in pyproject.toml),
#                                then tools/sql_mutation.py on the stores' SQL (both dialects)
#   tools/mutation.sh python     only mutmut;   tools/mutation.sh sql   only the SQL
#
# mutmut keeps its results in mutants/ (a later run re-checks only what changed in the mutated
# modules; it copies tests/ again each run, but not the other source files: after changing one
# of those, delete mutants/ or copy the file there). One mutant or a glob:
#   .venv/bin/mutmut run --max-children 1 'tether.engine.compensation.*'. The report
# (score, survivors) is written to tools/mutation_report.md by tools/mutation_report.py,
# which counts the mutants tools/mutation_equivalent.toml records as equivalent apart.
# Each mutant runs the in-process tests that call the mutated function, on SQLite (the core
# modules are the same code on both backends); the SQL runs on SQLite and PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
"$py" -c 'import mutmut' 2>/dev/null || .venv/bin/pip install -q 'mutmut==3.8.1'
what="${1:-all}"
if [ "$what" = all ] || [ "$what" = python ]; then
  # TETHER_NO_SHRINK: a property test that fails under a mutant reports at once
  # PYTHONPATH: the tests' child processes import this checkout's source (mutmut's own
  # process imports the mutated copy in mutants/src)
  PYTHONPATH="$PWD/src" TETHER_SKIP_PG=1 TETHER_NO_SHRINK=1 nice .venv/bin/mutmut run --max-children 2 >/dev/null || true
fi
if [ "$what" = all ] || [ "$what" = sql ]; then
  nice "$py" tools/sql_mutation.py --jobs 2 --report mutants/sql_survivors.md | tail -3
fi
"$py" tools/mutation_report.py > tools/mutation_report.md
tail -n +1 tools/mutation_report.md | head -20
