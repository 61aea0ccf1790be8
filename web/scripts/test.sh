#!/usr/bin/env bash
# Browser tests of the web UI against the real service and a fresh Postgres database:
# installs Debian's Chromium when missing, builds the UI and the binary, starts
# `slicesched serve` on a free port, runs the Playwright tests, stops the server and
# drops the database. Screenshots and timeline-perf.json land in web/test-results/.
#   SLICESCHED_BIN=path   use this binary instead of building target/release/slicesched
#   DATABASE_URL          a database URL on the Postgres server to use (a fresh database
#                         is created beside it); else scripts/lib/postgres.sh provisions one
#   PLUGIN_WASM           a policy component for the valid-upload test (else target/plugins/)
#   WEB_TEST_FILES        test files to run (default: every tests/*.test.mjs)
set -euo pipefail
web="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$web/.." && pwd)"

if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq chromium >/dev/null
  else
    echo "web tests: Debian's chromium is needed (apt-get install chromium)" >&2
    exit 1
  fi
fi

bash "$web/scripts/build.sh"

bin="${SLICESCHED_BIN:-}"
if [ -z "$bin" ]; then
  (cd "$root" && cargo build --release --locked --bin slicesched)
  bin="$root/target/release/slicesched"
fi

# The Postgres server: the one DATABASE_URL names, else the repository's provisioning
# (127.0.0.1:5432 when it answers, else a private server), else 127.0.0.1:5432.
if [ -n "${DATABASE_URL:-}" ]; then
  base="${DATABASE_URL%/*}"
elif [ -f "$root/scripts/lib/postgres.sh" ]; then
  pushd "$root" >/dev/null
  source scripts/lib/toolchain.sh
  source scripts/lib/postgres.sh
  ensure_postgres
  popd >/dev/null
  base="$PG_BASE_URL"
else
  base="postgres://postgres@127.0.0.1:5432"
fi
db="slicesched_ui_$$_$(date +%s)"
psql -q "$base/postgres" -c "create database $db" >/dev/null
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
export SLICESCHED_ADMIN_TOKEN="ui-test-admin-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
export DATABASE_URL="$base/$db"
log="$web/test-results/server.log"
mkdir -p "$web/test-results"

# No demo runs: the tests start the runs they need and should not queue behind others.
extra=()
if "$bin" serve --help 2>/dev/null | grep -q -- --no-demo; then extra+=(--no-demo); fi
(cd "$root" && exec "$bin" serve --addr "127.0.0.1:$port" --web-dir "$web/dist" "${extra[@]}") >"$log" 2>&1 &
server=$!
cleanup() {
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  psql -q "$base/postgres" -c "drop database if exists $db with (force)" >/dev/null 2>&1 || true
}
trap cleanup EXIT

for _ in $(seq 1 120); do
  curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  if ! kill -0 "$server" 2>/dev/null; then echo "server exited; see $log" >&2; tail -20 "$log" >&2; exit 1; fi
  sleep 0.5
done

# A plugin the host quarantines (it panics on every batch), for the fallback test.
hostile="$root/target/plugins/hostile/panic.wasm"
if [ ! -f "$hostile" ]; then
  (cd "$root" && "$bin" plugin build plugins/hostile --features panic --out "$hostile") >/dev/null \
    || echo "web tests: building the hostile plugin failed (its test will say so)" >&2
fi
export HOSTILE_WASM="$hostile"

cd "$web"
# Every test file (or those WEB_TEST_FILES names), one after the other: they share the
# service and its run slots.
# shellcheck disable=SC2086
BASE_URL="http://127.0.0.1:$port" node --test --test-concurrency=1 --test-reporter=spec ${WEB_TEST_FILES:-tests/*.test.mjs}
echo "web tests: screenshots and timeline-perf.json in web/test-results/"
