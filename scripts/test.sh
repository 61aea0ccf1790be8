#!/usr/bin/env bash
# Runs every test of the workspace. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/toolchain.sh
ensure_toolchain
cargo test --workspace --locked --all-targets --no-fail-fast 2>&1
