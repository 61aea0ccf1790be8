#!/usr/bin/env bash
# Browser tests of the web UI against the real service and a fresh Postgres database:
# installs Debian's Chromium when missing, builds the UI and the binary, starts
# `slicesched serve` on a free port, runs the Playwright tests, stops the server and
# drops the database. Screenshots and timeline-perf.json land in web/test-results/.
#   SLICESCHED_BIN=path   use this binary instead of building target/release/slicesched
#   PGHOST/PGPORT/PGUSER  the Postgres server (default 127.0.0.1:5432, user postgres)
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

export PGHOST="${PGHOST:-127.0.0.1}" PGPORT="${PGPORT:-5432}" PGUSER="${PGUSER:-postgres}"
db="slicesched_ui_$$_$(date +%s)"
psql -q -d postgres -c "create database $db" >/dev/null
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
export SLICESCHED_ADMIN_TOKEN="ui-test-admin-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
export DATABASE_URL="postgres://$PGUSER@$PGHOST:$PGPORT/$db"
log="$web/test-results/server.log"
mkdir -p "$web/test-results"

(cd "$root" && exec "$bin" serve --addr "127.0.0.1:$port") >"$log" 2>&1 &
server=$!
cleanup() {
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  psql -q -d postgres -c "drop database if exists $db with (force)" >/dev/null 2>&1 || true
}
trap cleanup EXIT

for _ in $(seq 1 120); do
  curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  if ! kill -0 "$server" 2>/dev/null; then echo "server exited; see $log" >&2; tail -20 "$log" >&2; exit 1; fi
  sleep 0.5
done

cd "$web"
BASE_URL="http://127.0.0.1:$port" node --test --test-concurrency=1 --test-reporter=spec tests/ui.test.mjs
echo "web tests: screenshots and timeline-perf.json in web/test-results/"
