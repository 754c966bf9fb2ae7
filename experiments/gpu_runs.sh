#!/usr/bin/env bash
# Runs an experiment's runs on one lent accelerator, JOBS at a time (a small model leaves most of a
# GPU idle), and brings back every finished run's eval JSONs in one archive; checkpoints stay on
# the machine.
#
#   experiments/gpu_runs.sh LIST JOBS DEADLINE_S ARCHIVE.tar.gz
#
# LIST: one run a line, "EXPERIMENT RUN COMMAND..." (`python experiments/gpu_list.py` writes it
# from the sweeps; EXPERIMENT is NAME, or NAME/ARG for `NAME:ARG`). Lines go to the jobs round
# robin in order. No run starts after DEADLINE_S seconds, and a running one is stopped then (it
# is simply missing from the archive). The archive (one file: a lent machine sends back a few
# files, two folders deep at most) holds results/EXPERIMENT/RUN/*.json of every finished run,
# logs/EXPERIMENT/RUN.log of every run, and status.tsv, a line a run: experiment, run, exit code,
# seconds. Unpack it, copy results/EXPERIMENT/* into experiments/EXPERIMENT/results/ and write
# the report (`./launch.sh report`) there.
set -u
list=$1 jobs=$2 deadline=$3 archive=$4
start=$(date +%s)
out=$(mktemp -d)
mkdir -p "$out/results" "$out/logs"
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # JOBS processes share the device
export PYTHONUNBUFFERED=1

worker() {  # worker K: the lines K, K + JOBS, ...
  awk -v k="$1" -v n="$jobs" 'NF && (NR - 1) % n == k' "$list" | while read -r exp run cmd; do
    left=$((deadline - ($(date +%s) - start)))
    if ((left <= 0)); then
      printf '%s\t%s\tnot run: past the deadline\t0\n' "$exp" "$run" >>"$out/status.tsv"
      continue
    fi
    mkdir -p "$out/logs/$exp"
    t0=$(date +%s)
    eval "timeout $left $cmd" >"$out/logs/$exp/$run.log" 2>&1 </dev/null
    rc=$?
    workdir=$(sed -n "s/.*--workdir=\([^ ]*\).*/\1/p" <<<"$cmd")
    if ((rc == 0)); then
      mkdir -p "$out/results/$exp/$run"
      cp "$workdir"/eval/*.json "$out/results/$exp/$run/"
    fi
    printf '%s\t%s\t%s\t%s\n' "$exp" "$run" "$rc" "$(($(date +%s) - t0))" >>"$out/status.tsv"
  done
}

for ((k = 0; k < jobs; k++)); do worker "$k" & done
wait
tar -czf "$archive" -C "$out" .
echo "[gpu_runs] $(grep -c $'\t0\t' "$out/status.tsv" 2>/dev/null) of $(grep -c . "$list") runs finished in $(($(date +%s) - start)) s"
rm -rf "$out"
