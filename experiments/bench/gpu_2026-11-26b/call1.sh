#!/usr/bin/env bash
# GPU call 1: the device check (issue 26). Usage: bash .whl/call1.sh DEADLINE_S
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
(git rev-parse HEAD; git status --short | head -5) > $OUT/git.txt 2>&1
python3 -c "import jax,flax,torch;print(jax.__version__,flax.__version__,torch.__version__,jax.devices())" > $OUT/versions.txt 2>&1
nvidia-smi > $OUT/nvidia-smi.txt 2>&1
python3 -m lcx.tools.bench --device_check --deadline_s=$1 --out=$OUT/device_check.json > $OUT/device_check.log 2>&1
cat $OUT/git.txt $OUT/versions.txt; cat $OUT/device_check.md
