#!/usr/bin/env bash
# GPU call 2: the kernel's correctness on the device (one process per case) beside experiment runs.
# (As run. experiments/gpu_runs.sh now takes an archive path as its last argument, $OUT/runs.tar.gz,
# since a lent machine sends back at most 8 files, two folders deep.)
# Usage: bash .whl/call2.sh DEADLINE_S JOBS SKIP(comma list of schemes runs the CPU has)
[ -d /tmp/site ] || python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
(git rev-parse HEAD; git status --short | head -5) > $OUT/git.txt 2>&1
python3 -c "
import json; from lcx.tools.bench import device_check as d
(p,) = [p for p in d.plan_points(d.PLANS['full']) if p['what'] == 'correct']
for case in p['cases']: print(json.dumps(p | {'cases': [case]}))" > /tmp/correct.jsonl
mkdir -p $OUT/correct; i=0
while read -r point; do
  (XLA_PYTHON_CLIENT_PREALLOCATE=false timeout $1 python3 -m lcx.tools.bench --device_point="$point" > $OUT/correct/$i.log 2>&1) &
  i=$((i+1))
done < /tmp/correct.jsonl
export LCX_DATA_DIR=$PWD/.whl/data JAX_COMPILATION_CACHE_DIR=/tmp/jaxcache JAX_DEFAULT_MATMUL_PRECISION=highest
python3 experiments/gpu_list.py scale_invariant:full schemes --skip=$3 > $OUT/list.txt
bash experiments/gpu_runs.sh $OUT/list.txt $2 $1 $OUT/runs
wait
for f in $OUT/correct/*.log; do grep DEVICE_POINT $f | cut -c1-400 || tail -2 $f; done; cat $OUT/runs/status.tsv
