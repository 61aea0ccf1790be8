#!/bin/bash
# Replays `native:slice` at the rate scales of `pooled`'s answers in a family sweep.
# usage: FAMILY_JSON=out/family/family.json [BIN=./target/release/slicesched] [OUT=out/fp]
#        [SUFFIX=...] docs/experiments/slice-at-pooled-points.sh GATE
# GATE selects a variant of docs/experiments/slice-routing-variants.patch (SLX_GATE);
# SLX_REPL / SLX_NOMB / SLX_NOBACKLOG / SLX_COUNT pass through from the environment. Run
# from the repository root.
set -euo pipefail
G=$1; B=${BIN:-./target/release/slicesched}; OUT=${OUT:-out/fp}/g$G${SUFFIX:-}; mkdir -p "$OUT"
FAMILY_JSON=${FAMILY_JSON:?the family sweep\'s family.json} python3 - > "$OUT/jobs.txt" <<'PY'
import json, os
f = json.load(open(os.environ['FAMILY_JSON']))
for s in f['scenarios']:
    for r in s['results']:
        if r['policy'] == 'native:pooled' and r['status'] == 'found':
            print(s['file'], r['target'], r['rate_scale'])
PY
export G B OUT
xargs -P 2 -L 1 bash -c 'f=$0; t=$1; r=$2; n=$(basename $f .toml)-$t
  SLX_GATE=$G $B replay --scenario $f --policy native:slice --rate-scale $r --duration-s 300 --quiet --out $OUT/$n > $OUT/$n.log 2>&1
  echo "$n $r $(sed -n 2p $OUT/$n.log | grep -o "violation rate [0-9.]*%")"' < "$OUT/jobs.txt" > "$OUT/result.txt"
cat "$OUT/result.txt"
