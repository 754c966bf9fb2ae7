"""`python -m lcx.tools.bench`: how close lcx gets to this machine's peak, in one command.

Sections (`--sections`, run in this order), one module each with `TITLE`, `run(opts, results)`
and `table(result)`:
  peak       (peak.py)        measured matmul throughput in float32 and bfloat16 (float32 only,
                              at most 2048, on a CPU): the roofline
  train      (throughput.py)  train-step tokens/s, MFU (mfu.py) and compile time, default and
                              large model
  positions  (overhead.py)    train-step time of every registered scheme as a ratio to NoPE,
                              and of model options such as rope+qk_norm (--options)
  eval       (long_eval.py)   forward time and peak memory at long lengths, dense vs chunked
                              (a subprocess each)
  peers      (peers.py)       lcx vs a plain `nnx.jit` step and vs x-transformers on PyTorch
Shared: measure.py (programs, interleaved rounds, ratios), workload.py (configs, the synthetic
batch, lcx's train step), options.py (flags). Timings are medians of repeated steps after
compilation; programs that are compared run interleaved (measure.py). Results: one JSON
(--out, default bench.json; experiments/bench/README.md) and the tables on stdout.
"""

from __future__ import annotations

import os
import platform
import sys
import time

import jax

from lcx import files
from lcx.tools.bench import long_eval, overhead, peak, peers, throughput
from lcx.tools.bench.measure import load_average
from lcx.tools.bench.options import SECTION_NAMES

SECTIONS = dict(zip(SECTION_NAMES, (peak, throughput, overhead, long_eval, peers)))
MFU_FORMULA = throughput.MFU_FORMULA


def machine() -> dict:
  return {
    "cpu": platform.processor() or platform.machine(),
    "cores": os.cpu_count(),
    "jax": jax.__version__,
    "backend": jax.default_backend(),
    "xla_flags": os.environ.get("XLA_FLAGS", ""),
    # ./launch.sh puts glibc's malloc on huge pages: without it XLA:CPU's per-step buffers
    # fault in 4 KB pages every step (CPU steps 1.3x slower), so numbers differ with it.
    "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
  }


def run(opts) -> dict:
  """Runs the asked sections in order (train and peers need peak: it runs if left out)."""
  results = {
    "command": " ".join(["python -m lcx.tools.bench"] + sys.argv[1:]),
    "machine": machine(),
    "mfu_formula": MFU_FORMULA,
    "load_average": {"before": load_average()},
    "sections": {},
    "wall_s": {},
  }
  needs_peak = {"train", "peers"} & set(opts.sections)
  names = [n for n in SECTIONS if n in opts.sections or (n == "peak" and needs_peak)]
  for name in names:
    print(f"[bench] {name} ...", flush=True)
    start = time.perf_counter()
    results["sections"][name] = SECTIONS[name].run(opts, results["sections"])
    results["wall_s"][name] = time.perf_counter() - start
  results["load_average"]["after"] = load_average()
  return results


def format_report(results: dict) -> str:
  m, load = results["machine"], results["load_average"]
  lines = [
    f"lcx bench on {m['cpu']} ({m['cores']} cores, jax {m['jax']}); load average "
    f"before/after: {load['before']} / {load['after']}; GLIBC_TUNABLES="
    f"{m.get('glibc_tunables') or '(unset)'}",
    "MFU = " + results["mfu_formula"],
  ]
  for name, section in SECTIONS.items():
    if name in results["sections"]:
      lines += ["", section.TITLE, "", section.table(results["sections"][name])]
  return "\n".join(lines)


def write(results: dict, path: str) -> None:
  files.write_json(path, results, indent=2)
