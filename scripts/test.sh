#!/usr/bin/env bash
# Runs every test of the workspace. CI runs exactly this (.ci/run).
# The shipped policy plugins are built from source first: the host's tests compare each
# one's Wasm build with its native build, and build their own hostile plugins.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/toolchain.sh
source scripts/lib/wasm.sh
ensure_toolchain
ensure_wasm_toolchain
build_plugins debug
cargo test --workspace --locked --all-targets --no-fail-fast 2>&1
