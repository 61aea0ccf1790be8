#!/usr/bin/env bash
# Load benchmark of the control plane (a benchmark, not a test): seeds a run with
# 1,000,000 request records, shows the history queries' plans and times (EXPLAIN
# ANALYZE), then drives the summary and request-list endpoints with wrk on loopback.
#   SLICESCHED_BIN=path  the binary (default: build target/release/slicesched)
#   BENCH_SECONDS=n      seconds per wrk run (default 15)
# Writes .data/bench-api.txt.
set -euo pipefail
export PGOPTIONS='-c client_min_messages=warning'
cd "$(dirname "$0")/.."
source scripts/lib/toolchain.sh
source scripts/lib/postgres.sh
ensure_toolchain
ensure_postgres
command -v wrk >/dev/null 2>&1 || { as_root apt-get update -qq; as_root apt-get install -y -qq wrk >/dev/null; }
bin="${SLICESCHED_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release --locked --bin slicesched
    bin="$PWD/target/release/slicesched"
fi
secs="${BENCH_SECONDS:-15}"
db="slicesched_bench_$$"
psql -q "$PG_BASE_URL/postgres" -c "create database $db" >/dev/null
url="$PG_BASE_URL/$db"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
token="bench-admin-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
mkdir -p .data
DATABASE_URL="$url" SLICESCHED_ADMIN_TOKEN="$token" RUST_LOG=warn "$bin" serve --addr "127.0.0.1:$port" --no-demo \
    >.data/bench-server.log 2>&1 &
server=$!
cleanup() {
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    psql -q "$PG_BASE_URL/postgres" -c "drop database if exists $db with (force)" >/dev/null 2>&1 || true
}
trap cleanup EXIT
base="http://127.0.0.1:$port"
for _ in $(seq 1 120); do curl -fsS "$base/readyz" >/dev/null 2>&1 && break; sleep 0.5; done
api() { curl -fsS -H "Authorization: Bearer $token" -H 'content-type: application/json' "$@"; }

# A real replay gives the summary; the 1M records are generated next to it.
id="$(api -X POST "$base/api/v1/runs" -d '{"kind":"replay","scenario":"smoke","policy":"dedicated"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')"
while api "$base/api/v1/runs/$id" | grep -q '"status":"\(queued\|running\)"'; do sleep 0.5; done
analyst="$(api -X POST "$base/api/v1/keys" -d '{"name":"bench","role":"analyst"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["api_key"])')"
big="$(python3 -c 'import uuid; print(uuid.uuid4())')"
t0=$(date +%s.%N)
psql -q -v ON_ERROR_STOP=1 "$PG_BASE_URL/$db" <<SQL
insert into runs (id, kind, scenario, scenario_toml, policies, tenant_names, gpus, status, progress, created_by, summary, started_at, finished_at)
select '$big', kind, 'bench-1m', scenario_toml, policies, array['t0','t1','t2','t3','t4','t5','t6','t7'], gpus, 'succeeded', 1, 'bench', summary, now(), now()
from runs where id = '$id';
insert into run_requests (run_id, request_id, tenant, arrival_ns, prompt_tokens, output_tokens, first_token_ns, finish_ns,
    ttft_ms, tpot_ms, preemptions, dropped, violated, ttft_target_ms, tpot_target_ms)
select '$big', i::int, 't' || (i % 8), i * 3600000, (100 + (i * 7919) % 4000)::int, (1 + (i * 104729) % 600)::int,
    i * 3600000 + 200000000, i * 3600000 + 9000000000, 200, 30, 0, null, (i * 2654435761) % 100 < 9, 500, 60
from generate_series(0::int8, 999999::int8) as i;
analyze run_requests;
SQL
t1=$(date +%s.%N)
out=.data/bench-api.txt
{
    echo "seeded 1,000,000 request records in $(python3 -c "print(round($t1 - $t0, 1))") s"
    echo
    for q in \
        "select * from run_requests where run_id = '$big' and request_id > -1 order by request_id limit 101" \
        "select * from run_requests where run_id = '$big' and request_id > 900000 order by request_id limit 101" \
        "select * from run_requests where run_id = '$big' and request_id > -1 and tenant = 't3' order by request_id limit 101" \
        "select * from run_requests where run_id = '$big' and request_id > -1 and violated = true order by request_id limit 101" \
        "select * from run_requests where run_id = '$big' and request_id > 500000 and tenant = 't5' and violated = true order by request_id limit 101" \
        "select id, kind, scenario, policies, status, progress, created_at from runs where 'dedicated' = any(policies) order by created_at desc, id desc limit 51"
    do
        echo "=== $q"
        psql -q "$PG_BASE_URL/$db" -c "explain (analyze, costs off, timing on) $q"
    done
    # Paced: 12 connections, each waiting 10 ms between requests (about 1,000 req/s
    # in all), so the latency is that of a server at that load, not of a saturated one.
    printf 'function delay()\n  return 10\nend\n' >.data/pace.lua
    for path in "/api/v1/runs/$big" "/api/v1/runs/$big/requests?limit=100" \
        "/api/v1/runs/$big/requests?tenant=t3&violated=true&limit=100"; do
        echo "=== paced ~1,000 req/s: wrk -t2 -c12 -d${secs}s -s pace.lua GET $path (analyst key)"
        wrk -t2 -c12 -d"${secs}s" --latency -s .data/pace.lua -H "Authorization: Bearer $analyst" "$base$path"
        echo "=== saturated: wrk -t2 -c8 -d${secs}s GET $path (analyst key)"
        wrk -t2 -c8 -d"${secs}s" --latency -H "Authorization: Bearer $analyst" "$base$path"
    done
} 2>&1 | tee "$out"
echo "figures in $out"
