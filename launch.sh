#!/usr/bin/env bash
# lcx launcher: creates .venv on first use, installs what the subcommand needs (re-installs when
# pyproject.toml changes), then dispatches. Flags after the subcommand pass through unchanged.
# Commands run in the caller's directory: relative paths (--workdir, --out, --runs_dir, data
# paths, --config files) mean what they mean where the user typed them; lcx falls back to the
# checkout for configs/ and experiments/ that are not there.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")" && pwd)

VENV=$ROOT/.venv
PYTHON=${PYTHON:-python3}
LCX_GLIBC_TUNABLES=glibc.malloc.hugetlb=1

usage() {
  cat <<'USAGE'
usage: ./launch.sh COMMAND [FLAGS...]

  quickstart   train one tiny model per position family (sinusoidal, rope, alibi, t5, nope) on
               the default data, print the length-sweep table once at the end
  train        python -m lcx.main --mode=train --config=... --workdir=...  [--config.x.y=V]
  eval         python -m lcx.main --mode=eval  --config=... --workdir=...  (same config as train)
  generate     python -m lcx.tools.generate --workdir=DIR --prompt=TEXT [--max_new_tokens=64]
               [--temperature=0 --top_k=0 --seed=0 --eval_step=STEP] [--config.model...=V]:
               the run's checkpoint continues TEXT (KV cache; temperature 0 is greedy);
               prints the prompt and continuation, and tokens/s on stderr
  report       python -m lcx.tools.report PATH... --out=DIR [--title=T] [--baseline=RUN/VARIANT]
               [--effective_tolerance=NATS]: tables
               (stdout), DIR/report.md, results.csv and plots from result JSON files,
               directories or globs (no jax); paired intervals where results allow
  provenance   python -m lcx.tools.report.provenance [PATH...] [--list]: per results folder,
               how many results name a clean commit and carry per-document (per-example)
               outcomes (default: experiments/); --list names each that falls short and why
  sweep        python -m lcx.tools.sweep experiments/NAME[:full] [--dry_run] [--only=RUN,...]
               [--shard=i/n] [--runs_dir=runs] [--force_eval] [--merge_shards]: the experiment's
               runs in order (resumable), then experiments/NAME/results/ and its report (a
               shard of n > 1: one archive in shards/; --merge_shards: unpack them, report)
  longrope     python -m lcx.tools.longrope --workdir=DIR --config.eval.longrope.target_len=N
               [--config.eval.longrope.*=V]: LongRoPE's evolutionary search for a run's RoPE
               rescale factors at length N (resumable) -> DIR/longrope/{state,factors}.json;
               evaluate them with eval --config.eval.variants=longrope@DIR/longrope/factors.json
  bench        throughput, MFU, position overhead, long eval, peers -> bench.json (adds the bench extra)
  data         dataset statistics: --config=configs/base.py [--config.data.name=...]
  export       python -m lcx.tools.export --workdir=DIR [--step=N] [--out=DIR/export]: the
               checkpoint's parameters as model.safetensors plus config.json (lcx.tools.export.load)
  config       python -m lcx.config.listing [--config=...]: every config field, its default, what is
               allowed and a one-line description
  test         the test suite (pytest flags pass through; adds the test extra)
  notebook     JupyterLab on experiments/notebooks/ (adds the notebooks extra; flags pass through)
  tensorboard  TensorBoard on DIR (a run or a folder of runs): training curves, evaluation
               during training and final evaluation (adds the tensorboard extra)
  help         this text

Multi-host: run the same train/eval command on every host. --distributed=auto (the default)
calls jax.distributed.initialize() when the environment shows a cluster: SLURM with more than
one task (`srun ./launch.sh train ...`), TPU pod variables (TPU_WORKER_ID, TPU_ACCELERATOR_TYPE,
TPU_WORKER_HOSTNAMES, ...), or JAX's own Cloud TPU VM check, which is what finds a GCE pod slice
reached by `gcloud compute tpus tpu-vm ssh NAME --worker=all --command="cd lcx && ./launch.sh
train ..."` (it sets none of those variables). --distributed=on always initializes,
--distributed=off never; elsewhere pass --coordinator_address=HOST:PORT --num_processes=N
--process_id=I.
Environment: LCX_EXTRAS (pip extras added to every command: gpu (CUDA 12), cuda13, tpu,
wandb (train.trackers=tensorboard,wandb)),
LCX_CONSTRAINTS (the pinned versions installed, default constraints.txt; empty: pyproject's
ranges, e.g. to keep an image's newer jax), LCX_DATA_DIR
(datasets), GLIBC_TUNABLES (when unset, every command runs with glibc.malloc.hugetlb=1:
XLA:CPU's per-step buffers on transparent huge pages fault 2 MB at a time, CPU steps 1.3x
faster). The first command installs into .venv under a file lock, so concurrent srun tasks
wait for one install; a venv that already has the wanted extras is reused.
USAGE
}

# ensure_venv EXTRA...: the venv has lcx with at least these extras (and LCX_EXTRAS). The stamp
# holds the hash of pyproject.toml and constraints.txt and the extras installed: a superset is reused, anything else
# installs the union, so alternating `test` and `bench` installs each extra once.
ensure_venv() {
  local stamp="$VENV/.lcx-install" hash old_hash="" have="" want extra spec=. caller=$PWD
  cd "$ROOT"  # pip installs the checkout; the command itself runs back in $caller
  # constraints.txt pins every package to the versions the tests passed on (the lock);
  # LCX_CONSTRAINTS= (empty) resolves pyproject's ranges instead, e.g. in a newer jax image.
  local lock=${LCX_CONSTRAINTS-constraints.txt}
  hash=$({ cat pyproject.toml; if [[ -n "$lock" ]]; then cat "$lock"; fi; } | sha256sum | cut -d' ' -f1)
  mkdir -p "$VENV"
  exec 9>"$VENV/.lcx-install.lock"
  command -v flock >/dev/null && flock 9  # concurrent srun tasks: one installs, the rest wait
  [[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
  if [[ -f "$stamp" ]]; then read -r old_hash have < "$stamp" || true; fi
  [[ "$old_hash" == "$hash" ]] || have=""
  want=$have
  local always=${LCX_EXTRAS:-}
  for extra in "$@" ${always//,/ }; do
    [[ ",$want," == *",$extra,"* ]] || want="${want:+$want,}$extra"
  done
  if [[ "$old_hash" != "$hash" || "$want" != "$have" ]]; then
    [[ -n "$want" ]] && spec=".[$want]"
    echo "[lcx] installing lcx${spec#.} into $VENV ..." >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check ${lock:+-c "$lock"} \
      -e "$spec"
    echo "$hash $want" > "$stamp"
  fi
  exec 9>&-
  cd "$caller"
}

cmd=${1:-help}
[[ $# -gt 0 ]] && shift
# Extras each command needs beyond the base install.
case "$cmd" in
  help|-h|--help) usage; exit 0 ;;
  quickstart|train|eval|generate|data|config|report|provenance|sweep|longrope|export) ensure_venv ;;
  test) ensure_venv test ;;
  bench) ensure_venv bench ;;
  notebook) ensure_venv notebooks ;;
  tensorboard) ensure_venv tensorboard ;;
  *) echo "unknown command: $cmd" >&2; usage >&2; exit 2 ;;
esac

PY="$VENV/bin/python"
# glibc's malloc on transparent huge pages (where the kernel's THP mode is madvise or always).
# XLA:CPU allocates a program's temporaries as one buffer per run (500 MB for the default train
# step) that glibc maps afresh each time: in 4 KB pages that was 120k page faults a step, a fifth
# of the CPU time in the kernel; in 2 MB pages a few hundred. Train steps 1.27-1.34x faster, the
# same peak memory (experiments/bench/page_faults.py). An existing GLIBC_TUNABLES is kept as it is.
export GLIBC_TUNABLES=${GLIBC_TUNABLES:-$LCX_GLIBC_TUNABLES}
# This checkout's lcx, whatever the caller's directory holds (from ~, ~/lcx/ would otherwise be
# a namespace package `lcx` shadowing the venv's editable install).
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
case "$cmd" in
  quickstart) exec "$PY" -m lcx.tools.quickstart "$@" ;;
  train) exec "$PY" -m lcx.main --mode=train "$@" ;;
  eval) exec "$PY" -m lcx.main --mode=eval "$@" ;;
  generate) exec "$PY" -m lcx.tools.generate "$@" ;;
  report) exec "$PY" -m lcx.tools.report "$@" ;;
  provenance) exec "$PY" -m lcx.tools.report.provenance "$@" ;;
  sweep) exec "$PY" -m lcx.tools.sweep "$@" ;;
  longrope) exec "$PY" -m lcx.tools.longrope "$@" ;;
  bench) exec "$PY" -m lcx.tools.bench "$@" ;;
  data) exec "$PY" -m lcx.data.stats "$@" ;;
  config) exec "$PY" -m lcx.config.listing "$@" ;;
  export) exec "$PY" -m lcx.tools.export "$@" ;;
  test)
    # Bytecode caches (gitignored __pycache__/) even where PYTHONDONTWRITEBYTECODE is set: else
    # each worker rewrites every test module's asserts (a worker's collection 8.5-10 s, not 5.4)
    # and every command line a test runs compiles lcx's sources again.
    unset PYTHONDONTWRITEBYTECODE
    cd "$ROOT" && exec "$PY" -m pytest -n "${LCX_TEST_WORKERS:-2}" "$@" ;;
  tensorboard) exec "$PY" -m tensorboard.main --logdir "$@" ;;
  notebook)
    # JupyterLab refuses root (the default user in GPU containers) without --allow-root.
    root_flag=(); [[ $(id -u) == 0 ]] && root_flag=(--allow-root)
    exec "$PY" -m jupyterlab --notebook-dir="$ROOT/experiments/notebooks" "${root_flag[@]}" "$@" ;;
esac
