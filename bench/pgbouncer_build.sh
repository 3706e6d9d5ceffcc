#!/usr/bin/env bash
# Build PgBouncer 1.24.1 (Debian 13's, from Debian's source tarball) into DIR, for
# bench/queues.py's run through a pooler that keeps prepared statements in transaction
# mode (PgBouncer 1.21+, max_prepared_statements). Debian 12 ships 1.18, which does not:
# behind it tether prepares nothing and the server parses and plans every statement.
#
#   bench/pgbouncer_build.sh /opt/pgbouncer-1.24      # prints DIR/bin/pgbouncer
#   TETHER_PGBOUNCER_BIN=/opt/pgbouncer-1.24/bin/pgbouncer \
#     python bench/queues.py --only tether --backends postgres,pgbouncer \
#     --throughput-only --pgbouncer-prepared 200
#
# Installs the build's dependencies with apt (libevent, OpenSSL, c-ares, pkg-config) and
# checks the tarball's SHA-256 against the one Debian's Sources index gives for it.
set -euo pipefail
dir="${1:?usage: bench/pgbouncer_build.sh DIR}"
version=1.24.1
sha256=da72a3aba13072876d055a3e58dd4aba4a5de4ed6148e73033185245598fd3e0
if [ -x "$dir/bin/pgbouncer" ] && "$dir/bin/pgbouncer" --version | grep -q "PgBouncer $version"; then
  echo "$dir/bin/pgbouncer"
  exit 0
fi
apt-get install -y -q libevent-dev libssl-dev libc-ares-dev pkg-config make gcc >&2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
curl -fsS -o "$work/src.tgz" \
  "http://deb.debian.org/debian/pool/main/p/pgbouncer/pgbouncer_${version}.orig.tar.gz"
echo "$sha256  $work/src.tgz" | sha256sum -c --quiet -
mkdir "$work/src"
tar xzf "$work/src.tgz" -C "$work/src" --strip-components=1
(cd "$work/src" && ./configure --prefix="$dir" && make -j"$(nproc)" && make install) >&2
echo "$dir/bin/pgbouncer"
