#!/usr/bin/env bash
# Runs SliceScheduler's main job on this machine: builds the release binary and the
# shipped policy plugins (Wasm, from source), validates them, and replays the shipped
# Azure code-trace scenario under the Wasm `slice` policy, writing the report under out/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/toolchain.sh
source scripts/lib/wasm.sh
ensure_toolchain
ensure_wasm_toolchain
build_plugins release
./target/release/slicesched plugin validate target/plugins/slice.wasm
scenario="${1:-scenarios/azure-code-4t.toml}"
policy="${2:-slice}"
name="$(basename "$scenario" .toml)"
./target/release/slicesched replay --scenario "$scenario" --policy "$policy" --out "out/$name-$policy"
echo "report: out/$name-$policy/ (summary.json, requests.csv, *.svg)"
