#!/usr/bin/env bash
# Runs SliceScheduler's main job on this machine: builds the release binary and replays
# the shipped Azure code-trace scenario, writing the report under out/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/toolchain.sh
ensure_toolchain
cargo build --release --locked --bin slicesched
scenario="${1:-scenarios/azure-code-4t.toml}"
name="$(basename "$scenario" .toml)"
./target/release/slicesched replay --scenario "$scenario" --policy dedicated --out "out/$name-dedicated"
echo "report: out/$name-dedicated/ (summary.json, requests.csv, *.svg)"
