#!/usr/bin/env bash
# The whole suite N times in a row on a loaded machine (issue 35): a clean clone of this
# checkout's HEAD, the README's test command run again and again beside a CPU hog, stopping at
# the first failing run. Not part of CI: it takes N suite runs of machine time.
#
#   tools/loaded_suite.sh [N]          N runs (default 10), the hog a busy loop on one core
#   HOG='cmd' tools/loaded_suite.sh    another hog, started once, killed at the end (a mutation
#                                      run makes a useful one: MUTMUT_NICE=0 MUTMUT_CHILDREN=1
#                                      tools/mutation.sh python ...; HOG=true: none)
#   STREAMS=2 tools/loaded_suite.sh 5  two streams of 5 runs at once, each in its own clone and
#                                      temporary directory: each loads the machine for the other
#   COMMIT=abc123 tools/loaded_suite.sh  runs at that commit (to go on with a series there)
#
# Each run's line in $OUT (default tools/loaded_suite.log, in the checkout: commit it, so a
# series at one commit can go on in a later session): its stream and number, the commit,
# pytest's summary line, its wall time and the load average when it ended; its output is kept in
# /tmp/loaded_suite_s<stream>_run<number>.txt. A stream stops at its first failing run. PostgreSQL and PgBouncer are
# started as .ci/run starts them.
set -uo pipefail
cd "$(dirname "$0")/.."
runs="${1:-10}"
streams="${STREAMS:-1}"
out="${OUT:-$PWD/tools/loaded_suite.log}"
commit="$(git rev-parse --short "${COMMIT:-HEAD}")"
work="$(mktemp -d /tmp/loaded-suite.XXXX)"
chmod 755 "$work"  # the tests' own PostgreSQL and PgBouncer (user postgres) live under it
pg_isready -h 127.0.0.1 -p 5432 -q \
  || pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
bouncer="$(mktemp -d)" && chmod 755 "$bouncer"
git clone -q . "$work/s1" && git -C "$work/s1" checkout -q "$commit"
TETHER_PGBOUNCER_URL="$("$work/s1/.ci/pgbouncer" "$bouncer")"
export TETHER_PGBOUNCER_URL
set -m  # the hog in a process group of its own, killed whole at the end
bash -c "${HOG:-exec python3 -c 'while True: pass'}" >/tmp/loaded_suite_hog.log 2>&1 &
hog=$!
set +m
finish() {
  kill -TERM -- -"$hog" 2>/dev/null && sleep 3 && kill -KILL -- -"$hog" 2>/dev/null
  [ -f "$bouncer/pgbouncer.pid" ] && kill "$(cat "$bouncer/pgbouncer.pid")"
  rm -rf "$bouncer" "$work"  # the runs' output is kept in /tmp/loaded_suite_s*_run*.txt
}
trap finish EXIT
echo "# $(date -u +%FT%TZ) $streams x $runs runs of the suite at $commit beside:" \
  "${HOG:-a busy loop}" >>"$out"

stream() {  # stream NUMBER: its own clone, venv and temporary directory, N runs in a row
  local s=$1 dir="$work/s$1" i start rc summary log
  [ -d "$dir" ] || { git clone -q . "$dir" && git -C "$dir" checkout -q "$commit"; }
  mkdir -p "$work/tmp$s" && chmod 1777 "$work/tmp$s"
  cd "$dir" || return 1
  python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' 2>/dev/null
  for i in $(seq 1 "$runs"); do
    start=$(date +%s) log="/tmp/loaded_suite_s${s}_run$i.txt"
    TMPDIR="$work/tmp$s" .venv/bin/pytest -p no:cacheprovider >"$log" 2>&1
    rc=$?
    summary="$(grep -E '^=+ .*(passed|failed|error).* =+$' "$log" | tail -1)"
    echo "stream $s run $i at $commit: rc=$rc $summary wall=$(( $(date +%s) - start ))s" \
      "load=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$out"
    [ "$rc" = 0 ] || { echo "stream $s run $i failed: $log" >>"$out"; return 1; }
  done
}

pids=()
for s in $(seq 1 "$streams"); do stream "$s" & pids+=($!); done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
[ "$failed" = 0 ] && echo "# $streams x $runs runs passed, none failed" >>"$out"
exit "$failed"
