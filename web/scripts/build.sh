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
  # npm 11's `ci` refuses the lockfile when a registry lacks an optional, other-platform
  # dependency (vite's Windows-only napi-windows-process-start-time is absent from some
  # mirrors, so no lockfile can list it); `install` then installs the same locked tree.
  npm ci --no-audit --no-fund --loglevel=error || npm install --no-audit --no-fund --loglevel=error
fi
npm run --silent build
echo "web: built into web/dist"
