#!/usr/bin/env bash
# The whole suite N times in a row on a loaded machine (issue 35): a clean clone of this
# checkout's HEAD, the README's test command run again and again beside a CPU hog, stopping at
# the first failing run. Not part of CI: it takes N suite runs of machine time.
#
#   tools/loaded_suite.sh [N]          N runs (default 10), the hog a busy loop on one core
#   HOG='cmd' tools/loaded_suite.sh    another hog, started once, killed at the end (a mutation
#                                      run makes a useful one: MUTMUT_NICE=0 MUTMUT_CHILDREN=1
#                                      tools/mutation.sh python ...)
#
# Each run's line in $OUT (default /tmp/loaded_suite.log): its number, the commit, pytest's
# summary line, its wall time and the load average when it ended. PostgreSQL and PgBouncer are
# started as .ci/run starts them.
set -uo pipefail
cd "$(dirname "$0")/.."
runs="${1:-10}"
out="${OUT:-/tmp/loaded_suite.log}"
commit="$(git rev-parse --short HEAD)"
clone="$(mktemp -d /tmp/loaded-suite.XXXX)"
git clone -q . "$clone" && git -C "$clone" checkout -q "$commit"
pg_isready -h 127.0.0.1 -p 5432 -q \
  || pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
bouncer="$(mktemp -d)" && chmod 755 "$bouncer"
TETHER_PGBOUNCER_URL="$("$clone/.ci/pgbouncer" "$bouncer")"
export TETHER_PGBOUNCER_URL
set -m  # the hog in a process group of its own, killed whole at the end
bash -c "${HOG:-exec python3 -c 'while True: pass'}" >/tmp/loaded_suite_hog.log 2>&1 &
hog=$!
set +m
finish() {
  kill -TERM -- -"$hog" 2>/dev/null && sleep 3 && kill -KILL -- -"$hog" 2>/dev/null
  [ -f "$bouncer/pgbouncer.pid" ] && kill "$(cat "$bouncer/pgbouncer.pid")"
  rm -rf "$bouncer" "$clone"  # the runs' output is kept in /tmp/loaded_suite_run*.txt
}
trap finish EXIT
cd "$clone"
python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' 2>/dev/null
echo "# $(date -u +%FT%TZ) $runs runs of the suite at $commit beside: ${HOG:-a busy loop}" >>"$out"
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  .venv/bin/pytest -p no:cacheprovider >"/tmp/loaded_suite_run$i.txt" 2>&1
  rc=$?
  summary="$(grep -E '^=+ .*(passed|failed|error).* =+$' "/tmp/loaded_suite_run$i.txt" | tail -1)"
  echo "run $i at $commit: rc=$rc $summary wall=$(( $(date +%s) - start ))s" \
    "load=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$out"
  [ "$rc" = 0 ] || { echo "run $i failed: /tmp/loaded_suite_run$i.txt" >>"$out"; exit 1; }
done
echo "# $runs runs in a row passed" >>"$out"
