#!/usr/bin/env bash
# Runs SliceScheduler's control plane on http://127.0.0.1:8080 (REST API, API docs at
# /api/docs, web UI at /): builds the web UI, the binary and the shipped policy plugins
# (Wasm, from source, into target/plugins/, registered at start-up), provisions
# Postgres (the server on 127.0.0.1:5432 when one answers and DATABASE_URL is unset,
# else a private one under .data/pg), registers the shipped policies, stores a demo
# replay (scenarios/smoke.toml under dedicated and slice) on a fresh database, and serves
# two tiny tenants live on the CPU executor (demo-chat, demo-code: their keys and a ready
# `curl` are printed when they are first registered). `--no-demo` starts nothing.
# The admin token is SLICESCHED_ADMIN_TOKEN, or one generated once into .data/admin-token.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/toolchain.sh
source scripts/lib/postgres.sh
source scripts/lib/wasm.sh
ensure_toolchain
ensure_wasm_toolchain
ensure_postgres
export DATABASE_URL="${DATABASE_URL:-$PG_BASE_URL/slicesched}"

if [ -f web/scripts/build.sh ]; then
    bash web/scripts/build.sh
fi
build_plugins release

mkdir -p .data
if [ -z "${SLICESCHED_ADMIN_TOKEN:-}" ]; then
    if [ ! -s .data/admin-token ]; then
        (umask 077 && od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >.data/admin-token)
    fi
    SLICESCHED_ADMIN_TOKEN="$(cat .data/admin-token)"
fi
export SLICESCHED_ADMIN_TOKEN
cat <<MSG
SliceScheduler on http://127.0.0.1:8080  (web UI /, API docs /api/docs)
database:    $DATABASE_URL
admin token: $SLICESCHED_ADMIN_TOKEN
  curl -H "Authorization: Bearer \$(cat .data/admin-token)" http://127.0.0.1:8080/api/v1/runs
MSG
exec ./target/release/slicesched serve --addr 127.0.0.1:8080 --web-dir web/dist "$@"
