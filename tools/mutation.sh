#!/usr/bin/env bash
# Mutation testing of the core (issue 35): not part of CI, it takes an hour or more on 2 cores.
#
#   tools/mutation.sh            mutmut on the core modules ([tool.mutmut] in pyproject.toml),
#                                then tools/sql_mutation.py on the stores' SQL (both dialects)
#   tools/mutation.sh python     only mutmut;   tools/mutation.sh sql   only the SQL
#   tools/mutation.sh save       only keep mutants/' verdicts in tools/mutation_state (after a
#                                mutmut run stopped before its end, e.g. at a session's end)
#
# mutmut keeps its results in mutants/ (a later run re-checks only what changed in the mutated
# modules; it copies tests/ again each run, but not the other source files: after changing one
# of those, delete mutants/ or copy the file there). One mutant or a glob:
#   .venv/bin/mutmut run --max-children 1 'tether.engine.compensation.*'. The report
# (score, survivors) is written to tools/mutation_report.md by tools/mutation_report.py,
# which counts the mutants tools/mutation_equivalent.toml records as equivalent apart.
# Each mutant runs the in-process tests that call the mutated function, on SQLite (the core
# modules are the same code on both backends); the SQL runs on SQLite and PostgreSQL.
#
# The whole run takes more than a session's machine time, so its verdicts are kept in the
# repository (tools/mutation_state/: mutmut's .meta files, one per mutated module, and its
# map of tests by function, mutmut-stats.json, xz-compressed) and restored into a new mutants/ before a
# run: mutmut keeps a verdict while its function's source is unchanged, and re-checks the
# rest. After the run they are saved back. More arguments narrow the run to globs (mutmut
# re-checks every mutant a glob names, kept verdicts included: without one it checks only the
# mutants it has no verdict for)
# (tools/mutation.sh python 'tether.engine.journal.*'); MUTMUT_CHILDREN sets the
# parallelism (default 2), MUTMUT_NICE its niceness (default 19; 0 when the run is itself the
# CPU load beside the suite, as in the loaded-suite runs of tools/loaded_suite.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
state=tools/mutation_state
"$py" -c 'import mutmut' 2>/dev/null || .venv/bin/pip install -q 'mutmut==3.8.1'
what="${1:-all}"
if [ "$what" = all ] || [ "$what" = python ]; then
  if [ -d "$state" ] && [ ! -e mutants/mutmut-stats.json ]; then
    (cd "$state" && find . -name '*.meta') | while read -r f; do
      mkdir -p "mutants/$(dirname "$f")" && cp "$state/$f" "mutants/$f"
    done
    "$py" -c 'import lzma, sys; open(sys.argv[2], "wb").write(lzma.open(sys.argv[1]).read())' \
      "$state/mutmut-stats.json.xz" mutants/mutmut-stats.json
  fi
  # TETHER_NO_SHRINK: a property test that fails under a mutant reports at once
  # PYTHONPATH: the tests' child processes import this checkout's source (mutmut's own
  # process imports the mutated copy in mutants/src)
  # The watchdog: mutmut bounds a mutant by CPU time at (its tests' time + 1 s) x 30, two
  # hours for a function many slow tests call, which a mutant that loops forever (a `+= 1`
  # made `= 1` in a while loop) spends whole. A mutant past MUTMUT_HANG CPU seconds
  # (default 900, well above any test set's time here) is stopped with SIGKILL: mutmut
  # records exit -9 ("segfault", counted killed: the suite would hang on it), and
  # mutants/hung.log names it, to check that it loops.
  ( while sleep 20; do
      pgrep -f "mutmut run" >/dev/null || break
      for pid in $(pgrep -f '^mutmut: '); do
        cpu=$(ps -o times= -p "$pid" | tr -d ' ')
        if [ -n "$cpu" ] && [ "$cpu" -gt "${MUTMUT_HANG:-900}" ]; then
          echo "$(date -u +%FT%TZ) $(ps -o cmd= -p "$pid") cpu=${cpu}s" >>mutants/hung.log
          kill -KILL "$pid"
        fi
      done
    done ) &
  PYTHONPATH="$PWD/src" TETHER_SKIP_PG=1 TETHER_NO_SHRINK=1 nice -n "${MUTMUT_NICE:-19}" .venv/bin/mutmut run \
    --max-children "${MUTMUT_CHILDREN:-2}" "${@:2}" >/dev/null || true
fi
if [ "$what" = all ] || [ "$what" = python ] || [ "$what" = save ]; then
  mkdir -p "$state"
  "$py" -c 'import lzma, sys; lzma.open(sys.argv[2], "wb", preset=9).write(open(sys.argv[1], "rb").read())' \
    mutants/mutmut-stats.json "$state/mutmut-stats.json.xz"
  (cd mutants && find src -name '*.meta') | while read -r f; do
    mkdir -p "$state/$(dirname "$f")" && cp "mutants/$f" "$state/$f"
  done
fi
if [ "$what" = all ] || [ "$what" = sql ]; then
  nice "$py" tools/sql_mutation.py --jobs 2 --report mutants/sql_survivors.md | tail -3
fi
# the generated part of tools/mutation_report.md (whose narrative is written by hand)
"$py" tools/mutation_report.py > mutants/mutation_report.md
head -20 mutants/mutation_report.md
