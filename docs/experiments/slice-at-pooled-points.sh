#!/bin/bash
# usage: fp.sh GATE  -> runs slice at pooled's 1% and 9% scales on every family mix
G=$1; B=${BIN:-/work/p2-slicesched}; OUT=/work/exp/g$G$SUFFIX; mkdir -p $OUT
python3 - > $OUT/jobs.txt <<'PY'
import json
f=json.load(open('/work/exp/fam0.json'))
for s in f['scenarios']:
    for r in s['results']:
        if r['policy']=='native:pooled' and r['status']=='found':
            print(s['file'], r['target'], r['rate_scale'])
PY
cd /work/main
cat $OUT/jobs.txt | xargs -P 2 -L 1 bash -c 'f=$0; t=$1; r=$2; n=$(basename $f .toml)-$t; SLX_GATE='$G' '$B' replay --scenario $f --policy native:slice --rate-scale $r --duration-s 300 --quiet --out '$OUT'/$n > '$OUT'/$n.log 2>&1; echo "$n $r $(sed -n 2p '$OUT'/$n.log | grep -o "violation rate [0-9.]*%")"' > $OUT/result.txt
