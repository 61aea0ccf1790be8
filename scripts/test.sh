#!/usr/bin/env bash
# Runs every test. CI runs exactly this (.ci/run).
#   1. the workspace's Rust tests, the API's on a real Postgres (a fresh database per test);
#   2. schemathesis (PyPI) against the served OpenAPI document: zero server errors;
#   3. the web UI's browser tests against the real service.
# The shipped policy plugins are built from source first: the host's tests compare each
# one's Wasm build with its native build, and build their own hostile plugins.
# Provisions what it needs: the C toolchain, the Wasm guest toolchain, a Postgres server (see scripts/lib/postgres.sh),
# a Python venv with schemathesis under .data/, Chromium and Node.js for the web tests.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step says how long it took: CI's log then shows where its time goes.
step() { echo "== $1 (${SECONDS}s since the start)"; }
source scripts/lib/toolchain.sh
source scripts/lib/postgres.sh
source scripts/lib/wasm.sh
ensure_toolchain
ensure_wasm_toolchain
ensure_postgres
# #[sqlx::test] creates and drops one database per test on this server.
export DATABASE_URL="${DATABASE_URL:-$PG_BASE_URL/postgres}"
# One profile for the plugins, the tests and the binary the later steps serve: the
# workspace builds once.
step "building the policy plugins"
build_plugins release
step "NVRTC for the CUDA kernel compile check"
source scripts/lib/nvrtc.sh
ensure_nvrtc
step "cargo test"
# NVRTC (no GPU) compiles every CUDA kernel to sm_90 and the test fails on a spill; here
# a missing NVRTC fails it instead of skipping.
LD_LIBRARY_PATH="$NVRTC_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" SLICESCHED_REQUIRE_NVRTC=1 \
    cargo test --release --workspace --locked --all-targets --no-fail-fast 2>&1
cargo build --release --locked --bin slicesched
export SLICESCHED_BIN="$PWD/target/release/slicesched"
step "schemathesis"
bash scripts/schemathesis.sh
if [ -f web/scripts/test.sh ]; then
    step "web UI tests"
    bash web/scripts/test.sh
fi
step "done"
echo "all tests passed"
