#!/usr/bin/env bash
# Runs every test. CI runs exactly this (.ci/run).
#   1. the workspace's Rust tests, the API's on a real Postgres (a fresh database per test);
#   2. schemathesis (PyPI) against the served OpenAPI document: zero server errors;
#   3. the web UI's browser tests against the real service.
# Provisions what it needs: the C toolchain, a Postgres server (see scripts/lib/postgres.sh),
# a Python venv with schemathesis under .data/, Chromium and Node.js for the web tests.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/toolchain.sh
source scripts/lib/postgres.sh
ensure_toolchain
ensure_postgres
# #[sqlx::test] creates and drops one database per test on this server.
export DATABASE_URL="${DATABASE_URL:-$PG_BASE_URL/postgres}"
# One profile for the tests and the binary the later steps serve: the workspace builds once.
cargo test --release --workspace --locked --all-targets --no-fail-fast 2>&1
cargo build --release --locked --bin slicesched
export SLICESCHED_BIN="$PWD/target/release/slicesched"
bash scripts/schemathesis.sh
if [ -f web/scripts/test.sh ]; then
    bash web/scripts/test.sh
fi
echo "all tests passed"
