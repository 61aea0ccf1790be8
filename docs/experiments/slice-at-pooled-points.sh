#!/bin/bash
# Replays `native:slice` at the rate scales of `pooled`'s answers in a family sweep.
# usage: FAMILY_JSON=out/family/family.json [BIN=./target/release/slicesched] [OUT=out/fp]
#        [SUFFIX=...] [SCALES="0.97 1 1.03"] docs/experiments/slice-at-pooled-points.sh GATE
# GATE selects a variant of docs/experiments/slice-routing-variants.patch (SLX_GATE);
# SLX_REPL / SLX_NOMB / SLX_NOBACKLOG / SLX_COUNT / SLX_NOCOPYLEND / SLX_PRIO / SLX_MBCOV /
# SLX_NOBORROW / SLX_PHASE pass through from the environment (the patch says what each
# does). SCALES multiplies each point (default 1: the points themselves; "0.97 1 1.03"
# also replays 3% either side, since a violation curve can jump by points between
# neighbouring scales). Run from the repository root.
set -euo pipefail
G=$1; B=${BIN:-./target/release/slicesched}; OUT=${OUT:-out/fp}/g$G${SUFFIX:-}; mkdir -p "$OUT"
FAMILY_JSON=${FAMILY_JSON:?the family sweep\'s family.json} SCALES=${SCALES:-1} python3 - > "$OUT/jobs.txt" <<'PY'
import json, os
f = json.load(open(os.environ['FAMILY_JSON']))
ms = os.environ['SCALES'].split()
for s in f['scenarios']:
    for r in s['results']:
        if r['policy'] == 'native:pooled' and r['status'] == 'found':
            for m in ms:
                name = f"{os.path.basename(s['file'])[:-5]}-{r['target']}" + ("" if ms == ['1'] else f"-x{m}")
                print(s['file'], name, repr(r['rate_scale'] * float(m)))
PY
export G B OUT
xargs -P 2 -L 1 bash -c 'f=$0; n=$1; r=$2
  SLX_GATE=$G $B replay --scenario $f --policy native:slice --rate-scale $r --duration-s 300 --quiet --out $OUT/$n > $OUT/$n.log 2>&1
  echo "$n $r $(sed -n 2p $OUT/$n.log | grep -o "violation rate [0-9.]*%")"' < "$OUT/jobs.txt" > "$OUT/result.txt"
cat "$OUT/result.txt"
# Per target: points within it, and the mean violation rate over the points.
python3 - "$OUT/result.txt" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if 'violation rate' in l]
for t in sorted({r[0].split('-')[2] for r in rows}):
    v = [float(r[-1].rstrip('%')) for r in rows if r[0].split('-')[2] == t]
    print(f"target {float(t):.0%}: {sum(x <= 100 * float(t) for x in v)}/{len(v)} met, mean {sum(v) / len(v):.2f}%")
PY
