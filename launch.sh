#!/usr/bin/env bash
# lcx launcher: creates .venv on first use (re-installs when pyproject.toml changes), then
# dispatches a subcommand. Flags after the subcommand pass through unchanged.
set -euo pipefail
cd "$(dirname "$0")"

VENV=.venv
PYTHON=${PYTHON:-python3}
EXTRAS=${LCX_EXTRAS:-test}  # e.g. LCX_EXTRAS=test,gpu ./launch.sh train ...

usage() {
  cat <<'USAGE'
usage: ./launch.sh COMMAND [FLAGS...]

  quickstart   train NoPE and RoPE briefly on the default data, print the length-sweep table
  train        python -m lcx.main --mode=train --config=... --workdir=...  [--config.x.y=V]
  eval         python -m lcx.main --mode=eval  --config=... --workdir=...  (same config as train)
  bench        throughput, MFU, position overhead, long eval, peers -> bench.json (adds the bench extra)
  data         dataset statistics: --config=configs/base.py [--config.data.name=...]
  test         the test suite (pytest flags pass through)
  help         this text

Multi-host: run the same train/eval command on every host. On a TPU pod slice
(`gcloud compute tpus tpu-vm ssh NAME --worker=all --command="cd lcx && ./launch.sh train ..."`)
and under SLURM (`srun ./launch.sh train ...`), JAX finds the other processes from the
environment. Elsewhere pass --coordinator_address=HOST:PORT --num_processes=N --process_id=I.
Environment: LCX_EXTRAS (pip extras, default "test"; add gpu or tpu), LCX_DATA_DIR (datasets).
USAGE
}

ensure_venv() {
  local stamp="$VENV/.lcx-install" want
  want="$(sha256sum pyproject.toml | cut -d' ' -f1) $EXTRAS"
  [[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
  if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    echo "[lcx] installing lcx[$EXTRAS] into $VENV ..." >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[$EXTRAS]"
    echo "$want" > "$stamp"
  fi
}

cmd=${1:-help}
[[ $# -gt 0 ]] && shift
case "$cmd" in
  help|-h|--help) usage; exit 0 ;;
  bench) [[ ",$EXTRAS," == *,bench,* ]] || EXTRAS="$EXTRAS,bench"; ensure_venv ;;
  quickstart|train|eval|data|test) ensure_venv ;;
  *) echo "unknown command: $cmd" >&2; usage >&2; exit 2 ;;
esac

PY="$VENV/bin/python"
case "$cmd" in
  quickstart) exec "$PY" -m lcx.quickstart "$@" ;;
  train) exec "$PY" -m lcx.main --mode=train "$@" ;;
  eval) exec "$PY" -m lcx.main --mode=eval "$@" ;;
  bench) exec "$PY" -m lcx.bench "$@" ;;
  data) exec "$PY" -m lcx.data.stats "$@" ;;
  test) exec "$PY" -m pytest -n "${LCX_TEST_WORKERS:-2}" "$@" ;;
esac
