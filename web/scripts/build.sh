#!/usr/bin/env bash
# Builds the web UI into web/dist (served by `slicesched serve` at /). Called by the
# repository's scripts/demo.sh and scripts/test.sh; needs Node.js >= 20 and npm.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
  else
    echo "web: Node.js >= 20 and npm are needed to build the UI" >&2
    exit 1
  fi
fi
# npm ci only when the lockfile changed since the last install: it wipes node_modules.
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
npm run --silent build
echo "web: built into web/dist"
