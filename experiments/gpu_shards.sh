#!/usr/bin/env bash
# Runs shards of an experiment's sweep on one lent GPU and leaves their archives in $OUT.
#
#   experiments/gpu_shards.sh experiments/NAME[:ARG] N FIRST LAST DEADLINE_S
#
# Shard FIRST of N starts alone; once one of its runs has finished (a whole run timed on an
# otherwise idle machine), it has stopped, or half the deadline has passed, shards FIRST+1..LAST
# start beside it (a small model leaves most of the GPU idle); GPU_SHARDS_FIRST_ALONE=0 starts
# them all at once, for a machine whose single-run times are known; GPU_SHARDS_JOBS=N passes
# --jobs=N to each shard (a shard holding a chain: the experiment's SHARD_JOBS). DEADLINE_S
# seconds after the start every sweep still going gets SIGTERM: its runs save a checkpoint and
# the sweep packs the runs it finished (shard-i-of-N-partial.tar.gz). GPU_SHARDS_AT_ONCE=K keeps
# at most K shards going, starting the next as one ends and, so queued, none with under
# GPU_SHARDS_LATE_S (120) seconds left: a queue of many shards in one window (13 sweeps
# compiling at once took 95 s to a first step on an H200). $OUT gets shards.tar, every shard's
# archive in one file (a lent machine sends back 8 at most; two experiments side by side, each
# with its own OUT=$OUT/NAME, fit), and logs.tar.gz: every shard's log with a UNIX time on each
# line, each run's sweep markers, the versions, nvidia-smi and the git state. Wheels, when there
# are any, and the built data (LCX_DATA_DIR) travel in .whl/ and .whl/data. Runs go to
# $GPU_SHARDS_RUNS (default /tmp/gpu_shards_runs). Unpack the archives into the experiment's
# shards/ folder and `--merge_shards` writes the report. experiments/schemes/README.md has a run
# of it.
# `experiments/gpu_tree.sh slim` before the device call (and `restore` after it) keeps the
# committed outputs from counting against what the call may send.
set -u
sweep=$1 n=$2 first=$3 last=$4 deadline=$5
out=${OUT:?set OUT to the folder that comes back}
runs=${GPU_SHARDS_RUNS:-/tmp/gpu_shards_runs}
start=$(date +%s)
mkdir -p "$out/logs" "$runs"
since=$(mktemp /tmp/gpu_shards_since.XXXXXX)  # this call's start: its archives and runs are newer
if compgen -G ".whl/*.whl" >/dev/null; then  # once per machine and wheels; others wait
  wheels=$(cat .whl/*.whl | md5sum | cut -c1-32)
  (
    flock 9
    if [ "$(cat /tmp/site/.installed 2>/dev/null)" != "$wheels" ]; then
      python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
        .whl/*.whl && echo "$wheels" >/tmp/site/.installed
    fi
  ) 9>/tmp/gpu_shards_pip.lock
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export LCX_DATA_DIR=${LCX_DATA_DIR:-$PWD/.whl/data} JAX_COMPILATION_CACHE_DIR=$runs/.jax_cache
{
  git rev-parse HEAD
  git status --short | head -20
  python3 -c "import jax, flax; print('jax', jax.__version__, 'flax', flax.__version__, jax.devices())"
  nvidia-smi
} >"$out/logs/machine.txt" 2>&1

stamp() { while IFS= read -r line; do printf '%(%s)T %s\n' -1 "$line"; done; }
elapsed() { echo $(($(date +%s) - start)); }
shard() {
  local left=$((deadline - $(elapsed)))
  ((left > 0)) || return 0
  timeout -k 60 "$left" python3 -m lcx.tools.sweep "$sweep" --shard="$1/$n" \
    --runs_dir="$runs" --jobs="${GPU_SHARDS_JOBS:-1}" 2>&1 | stamp >"$out/logs/shard-$1.log"
}

finished() { find "$runs" -name sweep_done.json -newer "$since" | sort; }
shard "$first" &
first_pid=$!
while ((${GPU_SHARDS_FIRST_ALONE:-1})) && [ -z "$(finished)" ] && kill -0 $first_pid 2>/dev/null &&
  (($(elapsed) < deadline / 2)); do
  sleep 2
done
echo "[gpu_shards] after $(elapsed) s, first finished: $(finished | head -1)"
at_once=${GPU_SHARDS_AT_ONCE:-0} late=${GPU_SHARDS_LATE_S:-120}
for ((i = first + 1; i <= last; i++)); do
  while ((at_once > 0 && $(jobs -rp | wc -l) >= at_once)); do wait -n; done
  if ((at_once > 0 && $(elapsed) > deadline - late)); then
    echo "[gpu_shards] shards $i..$last not started: under ${late} s left before the deadline"
    break
  fi
  shard "$i" &
done
wait

archives=$(find "${sweep%%:*}" -path "*/shards/shard-*.tar.gz" -newer "$since" | sort -V)
[ -n "$archives" ] && tar -cf "$out/shards.tar" --transform='s,.*/,,' $archives
(cd "$runs" && find . -name 'sweep_*.json' | tar -czf "$out/logs/markers.tar.gz" -T -)
tar -czf "$out/logs.tar.gz" -C "$out" logs && rm -rf "$out/logs"
echo "[gpu_shards] $(finished | wc -l) runs finished in $(elapsed) s;" \
  "archives: $(for a in $archives; do basename "$a"; done | tr '\n' ' ')"
