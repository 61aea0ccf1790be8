#!/usr/bin/env bash
# Property-based and hostile API tests: schemathesis (from PyPI, in a venv under .data/)
# generates requests from the service's own OpenAPI document -- valid and invalid ones
# (`--mode all`: negative testing), and sequences of calls following the document's
# links (the stateful phase) -- and fails on any 5xx; then the hostile inputs of issue 16
# (a 4-billion-node cluster, 46.8 M requests in an 800-byte body, a 200 KB header, deep
# nesting, NULs) must each get a 4xx. The service runs on a free port with a fresh
# database (dropped afterwards) under a 1 GiB memory budget; its peak resident memory
# must stay under that budget, and it must still be alive at the end.
#   SLICESCHED_BIN=path   the binary (default: build target/release/slicesched)
#   ST_MAX_EXAMPLES=n     examples per operation (default 50)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/toolchain.sh
source scripts/lib/postgres.sh
ensure_toolchain
ensure_postgres

ensure_venv
venv=$VENV
if [ ! -x "$venv/bin/schemathesis" ]; then
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
budget=$((1024 * 1024 * 1024))
cat >.data/schemathesis-serve.toml <<TOML
[limits]
memory_budget_bytes = $budget
TOML
DATABASE_URL="$PG_BASE_URL/$db" SLICESCHED_ADMIN_TOKEN="$token" RUST_LOG=warn \
    "$bin" serve --addr "127.0.0.1:$port" --no-demo --config .data/schemathesis-serve.toml >"$log" 2>&1 &
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
    --mode all \
    --phases examples,coverage,fuzzing,stateful \
    --max-examples "${ST_MAX_EXAMPLES:-50}" \
    --workers 2 \
    --seed 1 2>&1 | tee .data/schemathesis.log
# The hostile inputs of issue 16, each of which once took the service down or stored
# something it must not: every one a 4xx problem, none a 5xx, the process alive.
hostile=0
expect_4xx() {
    local what="$1"; shift
    local code
    code="$(curl -sS -o .data/hostile-answer.json -w '%{http_code}' -H "Authorization: Bearer $token" "$@")"
    hostile=$((hostile + 1))
    case "$code" in
        4??) ;;
        *) echo "hostile input '$what': HTTP $code $(head -c 300 .data/hostile-answer.json)" >&2; exit 1 ;;
    esac
}
node='{"gpu":"A100-80GB","gpus":64,"count":4294967295}'
expect_4xx "4e9-node cluster" -H 'content-type: application/json' "$base/clusters" \
    -d "{\"name\":\"huge\",\"spec\":{\"nodes\":[$node]}}"
t() { printf '[[tenants]]\nname = "t%s"\nmodel = "llama-2-7b"\ngpus = [%s]\nsla = { ttft_ms = 500, tpot_ms = 60 }\ntrace = { kind = "poisson", rate = 13000.0 }\n' "$1" "$1"; }
scn="$(printf 'name = "x"\nseed = 1\nduration_s = 3600\n[cluster]\n[[cluster.nodes]]\ngpu = "A100-80GB"\ngpus = 4\n'; t 0; t 1; t 2; t 3)"
body="$(python3 -c 'import json,sys; print(json.dumps({"kind":"replay","policy":"dedicated","scenario":sys.argv[1]}))' "$scn")"
expect_4xx "46.8M requests per tenant" -H 'content-type: application/json' "$base/runs" -d "$body"
big="$(python3 -c 'import json; print(json.dumps({"kind":"replay","policy":"dedicated","scenario":"name = \"x\"\nseed = 1\nduration_s = 10\ncluster = { nodes = [{ gpu = \"A100-80GB\", gpus = 64, count = 4294967295 }] }\ntenants = []\n"}))')"
expect_4xx "4e9-node inline cluster" -H 'content-type: application/json' "$base/runs" -d "$big"
deep="$(python3 -c 'import json; print(json.dumps({"kind":"replay","policy":"dedicated","scenario":"a = " + "[" * 100000}))')"
printf '%s' "$deep" >.data/hostile-body.json
expect_4xx "100,000-deep TOML" -H 'content-type: application/json' "$base/runs" --data-binary @.data/hostile-body.json
expect_4xx "reserve_gb = 2e10" -H 'content-type: application/json' "$base/runs" -d "$(python3 -c 'import json; print(json.dumps({"kind":"replay","policy":"dedicated","scenario":open("scenarios/smoke.toml").read() + "\n[memory]\nreserve_gb = 2e10\n"}))')"
expect_4xx "NUL in a name" -H 'content-type: application/json' "$base/tenants" -d '{"name":"a\u0000b","sla":{"ttft_ms":1,"tpot_ms":1}}'
# Over the argument-length limit of one command-line argument: curl reads it from a file.
printf 'x-pad: %s\n' "$(head -c 200000 /dev/zero | tr '\0' a)" >.data/hostile-header.txt
expect_4xx "200 KB header" -H @.data/hostile-header.txt "$base/me"
expect_4xx "unknown query parameter" "$base/runs?limt=5"
expect_4xx "README as a cluster" -H 'content-type: application/json' "$base/runs" -d "$(python3 -c 'import json,re; t=open("scenarios/smoke.toml").read(); t=re.sub(r"\[cluster\].*?(?=\[\[tenants\]\])", "", t, flags=re.S).replace("duration_s = 60", "duration_s = 60\ncluster = \"../README.md\""); print(json.dumps({"kind":"replay","policy":"dedicated","scenario":t}))')"
expect_4xx "admin token file as a trace" -H 'content-type: application/json' "$base/runs" -d "$(python3 -c 'import json; print(json.dumps({"kind":"replay","policy":"dedicated","scenario":open("scenarios/smoke.toml").read().replace("kind = \"poisson\", rate = 2.0", "kind = \"azure\", path = \"../.data/admin_token\"")}))')"
echo "hostile inputs: $hostile tried, all refused with a 4xx"

# A server error the checks missed (e.g. a 500 while the run stored results) shows in the log.
if grep -q '"status":5\|status=5[0-9][0-9]' "$log"; then
    echo "schemathesis: the server logged a 5xx" >&2
    exit 1
fi
kill -0 "$server" 2>/dev/null || { echo "the service died under the hostile suite" >&2; tail -20 "$log" >&2; exit 1; }
peak_kb="$(awk '/^VmHWM/ {print $2}' "/proc/$server/status")"
echo "service peak resident memory: $((peak_kb / 1024)) MiB (budget $((budget / 1024 / 1024)) MiB)"
if [ $((peak_kb * 1024)) -ge "$budget" ]; then
    echo "the service's peak memory passed its configured budget" >&2
    exit 1
fi
