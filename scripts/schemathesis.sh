#!/usr/bin/env bash
# Property-based API tests: schemathesis (from PyPI, in a venv under .data/) generates
# requests from the service's own OpenAPI document and fails on any 5xx. Runs the
# service on a free port with a fresh database, dropped afterwards.
#   SLICESCHED_BIN=path   the binary (default: build target/release/slicesched)
#   ST_MAX_EXAMPLES=n     examples per operation (default 40)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/toolchain.sh
source scripts/lib/postgres.sh
ensure_toolchain
ensure_postgres

venv=.data/venv
if [ ! -x "$venv/bin/schemathesis" ]; then
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
        rm -rf "$venv"
        as_root apt-get update -qq
        as_root apt-get install -y -qq python3-venv >/dev/null
        python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install -q --disable-pip-version-check schemathesis==4.32.5
fi

bin="${SLICESCHED_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release --locked --bin slicesched
    bin="$PWD/target/release/slicesched"
fi

db="slicesched_st_$$"
psql -q "$PG_BASE_URL/postgres" -c "create database $db" >/dev/null
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
token="st-admin-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
mkdir -p .data
log=.data/schemathesis-server.log
DATABASE_URL="$PG_BASE_URL/$db" SLICESCHED_ADMIN_TOKEN="$token" RUST_LOG=warn \
    "$bin" serve --addr "127.0.0.1:$port" --no-demo >"$log" 2>&1 &
server=$!
cleanup() {
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    psql -q "$PG_BASE_URL/postgres" -c "drop database if exists $db with (force)" >/dev/null 2>&1 || true
}
trap cleanup EXIT
for _ in $(seq 1 120); do
    curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
    kill -0 "$server" 2>/dev/null || { tail -20 "$log" >&2; exit 1; }
    sleep 0.5
done

# Real ids for the operations that address one thing: a tenant, a finished replay (with
# requests, series, decisions and recorded ops) and a plugin; without them every such
# call would only meet a 404.
api() { curl -fsS -H "Authorization: Bearer $token" -H 'content-type: application/json' "$@"; }
base="http://127.0.0.1:$port/api/v1"
json_id() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(eval("d" + sys.argv[1]))' "$1"; }
tenant="$(api "$base/tenants" -d '{"name":"st-tenant","sla":{"ttft_ms":500,"tpot_ms":60}}' | json_id '["tenant"]["id"]')"
# DELETE /tenants/{id} removes its tenant: give it its own, or every later call on the
# fixture tenant would only meet a 404.
doomed="$(api "$base/tenants" -d '{"name":"st-doomed","sla":{"ttft_ms":500,"tpot_ms":60}}' | json_id '["tenant"]["id"]')"
run="$(api "$base/runs" -d '{"kind":"replay","scenario":"smoke","policy":"dedicated"}' | json_id '["id"]')"
while api "$base/runs/$run" | grep -q '"status":"\(queued\|running\)"'; do sleep 0.5; done
plugin="$(api "$base/plugins" | json_id '["items"][0]["id"]')"
cat >.data/schemathesis.toml <<TOML
[[operations]]
include-path-regex = "^/api/v1/runs/"
parameters = { "path.id" = "$run" }

# Method and path in one entry are matched together (separate include-method and
# include-path-regex keys would match either).
[[operations]]
include-path-regex = "^/api/v1/tenants/"
include-method-regex = "^(GET|PUT|POST|PATCH)$"
parameters = { "path.id" = "$tenant" }

[[operations]]
include-path-regex = "^/api/v1/tenants/"
include-method-regex = "^DELETE$"
parameters = { "path.id" = "$doomed" }

[[operations]]
include-path-regex = "^/api/v1/plugins/"
parameters = { "path.id" = "$plugin" }
TOML

"$venv/bin/schemathesis" --config-file .data/schemathesis.toml run "http://127.0.0.1:$port/api/openapi.json" \
    --header "Authorization: Bearer $token" \
    --checks not_a_server_error \
    --max-examples "${ST_MAX_EXAMPLES:-40}" \
    --workers 2 \
    --seed 1 2>&1 | tee .data/schemathesis.log
# A server error the checks missed (e.g. a 500 while the run stored results) shows in the log.
if grep -q '"status":5\|status=5[0-9][0-9]' "$log"; then
    echo "schemathesis: the server logged a 5xx" >&2
    exit 1
fi
