#!/usr/bin/env bash
# Retakes the README's web UI screenshots (docs/img/web-run-detail.png, web-timeline.png)
# from the real service: web/scripts/test.sh's harness (Chromium, a fresh database, the
# service on a free port) running web/tests/readme-shots.mjs on `bursty-8t`.
set -euo pipefail
web="$(cd "$(dirname "$0")/.." && pwd)"
export UI_TEST_SCENARIO="${UI_TEST_SCENARIO:-bursty-8t}" WEB_TEST_FILES=tests/readme-shots.mjs
exec bash "$web/scripts/test.sh"
