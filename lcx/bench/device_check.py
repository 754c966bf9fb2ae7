"""`./launch.sh bench --device_check [--out=DIR/device_check.json]`: issue 26's accelerator
numbers in one command, for a lent GPU or TPU (experiments/bench/README.md says how).

Every measurement runs in a fresh process (`--device_point=JSON`), so its peak memory is its own
and an out-of-memory point is a row with its error, not the end of the check:
  peak     bf16 and f32 square matmul FLOP/s (the MFU denominator: bf16)
  train    lcx's train step (default and large model, bf16), impl=xla and impl=pallas:
           tokens/s, MFU, peak memory
  scheme   every registered scheme's train step / NoPE's (impl=auto: pallas on an accelerator,
           CoPE and stick-breaking on XLA), one process each
  eval     the long evaluation's forward (batch 1, RoPE) at 64k and 256k tokens, xla vs pallas
The JSON (--out) and a markdown table beside it (.md) give the device and versions on every
row. On CPU (or with --quick) the plan is tiny, so the whole path runs end to end in a test.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time

import jax

from lcx import kernels, positions
from lcx.bench import long_eval, peak, throughput
from lcx.bench.timing import timed
from lcx.bench.workload import bench_config, lcx_program, synthetic_batch
from lcx.report import markdown_table

TITLE = "Device check (issue 26): one fresh process per row"
PLANS = {
  "full": {
    "peak_n": 8192,
    "train": [("default", 64, 1024), ("large", 64, 1024)],
    "schemes_model": ("default", 64, 1024),
    "eval_model": ("default", 1024),
    "schemes": None,  # every registered scheme
    "eval_lengths": [65536, 262144],
    "steps": 10,
    "repeats": 2,
    "timeout_s": 600,
  },
  "tiny": {
    "peak_n": 256,
    "train": [("tiny", 2, 32)],
    "schemes_model": ("tiny", 2, 32),
    "eval_model": ("tiny", 32),
    "schemes": ["nope", "rope", "alibi"],
    "eval_lengths": [64],
    "steps": 2,
    "repeats": 1,
    "timeout_s": 600,
  },
}
IMPLS = ("xla", "pallas")
DTYPE = "bfloat16"


def device() -> dict:
  """What ran the numbers: device kind and count, backend and versions."""
  import flax

  d = jax.devices()[0]
  return {
    "device": f"{len(jax.devices())} x {d.device_kind}",
    "backend": jax.default_backend(),
    "jax": jax.__version__,
    "jaxlib": jax.lib.__version__ if hasattr(jax.lib, "__version__") else "",
    "flax": flax.__version__,
    "python": platform.python_version(),
  }


def _config(scheme, size, batch, seq_len, impl):
  config = bench_config(scheme, size, batch, seq_len)
  config.model.dtype = DTYPE
  config.model.attention.impl = impl
  return config


def _train(point) -> dict:
  config = _config(point["scheme"], point["size"], point["batch"], point["seq_len"], point["impl"])
  program = lcx_program(config)
  times = [timed(program.step) for _ in range(point["steps"])]
  step_s = sorted(times)[len(times) // 2]
  tokens = point["batch"] * point["seq_len"]
  return {
    "compile_s": program.compile_s,
    "step_s": step_s,
    "tokens_per_s": tokens / step_s,
    "flops_per_token": throughput.train_flops_per_token(config.model, point["seq_len"]),
    "impl_resolved": kernels.resolve_impl(config.model),  # what auto chose on this backend
  }


def _scheme(point) -> dict:
  """One scheme's train step with impl=auto (the Pallas kernel on an accelerator)."""
  return {**_train({**point, "impl": "auto"}), "impl": "auto"}


def _eval(point) -> dict:
  runner = long_eval.eval_runner(
    "rope", point["size"], point["train_len"], "chunked", point["length"], point["impl"], DTYPE
  )
  batch = synthetic_batch(1, point["length"], runner.config.model.vocab_size)
  rows = (batch["inputs"], batch["targets"], batch["positions"], batch["segment_ids"])
  first_s = timed(lambda: runner.nll(*rows))
  times = [timed(lambda: runner.nll(*rows)) for _ in range(point["repeats"])]
  return {"first_call_s": first_s, "forward_s": sorted(times)[len(times) // 2]}


def _peak(point) -> dict:
  out = {}
  for dtype in ("bfloat16", "float32"):
    program = peak.xla_matmul(dtype, point["n"])
    times = [timed(program.step) for _ in range(5)]
    out[f"{dtype}_flops"] = 2 * point["n"] ** 3 / sorted(times)[2]
  return out


POINTS = {"peak": _peak, "train": _train, "scheme": _scheme, "eval": _eval}


def run_point(point: dict) -> dict:
  """One measurement in this process, with the device, versions and this process's peak."""
  start = time.perf_counter()
  result = POINTS[point["what"]](point)
  return {
    **point,
    **result,
    **device(),
    "peak_gb": long_eval._peak_bytes() / long_eval.GB,
    "wall_s": time.perf_counter() - start,
  }


def _in_process(point: dict, timeout_s: int) -> dict:
  """`run_point` in a fresh `python -m lcx.bench --device_point=...` (no preallocation)."""
  env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
  cmd = [sys.executable, "-m", "lcx.bench", f"--device_point={json.dumps(point)}"]
  try:
    proc = subprocess.run(
      cmd, capture_output=True, text=True, cwd=long_eval.REPO_ROOT, env=env, timeout=timeout_s
    )
  except subprocess.TimeoutExpired:
    return {**point, "error": f"timed out after {timeout_s} s"}
  lines = [x for x in proc.stdout.splitlines() if x.startswith("DEVICE_POINT ")]
  if proc.returncode != 0 or not lines:
    return {**point, "error": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"}
  return json.loads(lines[-1][len("DEVICE_POINT ") :])


def plan_points(plan: dict) -> list[dict]:
  points = [{"what": "peak", "n": plan["peak_n"]}]
  for size, batch, seq_len in plan["train"]:
    for impl in IMPLS:
      points.append(
        {
          "what": "train",
          "scheme": "rope",
          "size": size,
          "batch": batch,
          "seq_len": seq_len,
          "impl": impl,
          "steps": plan["steps"],
        }
      )
  size, batch, seq_len = plan["schemes_model"]
  for scheme in ["nope"] + [s for s in plan["schemes"] or positions.SCHEMES if s != "nope"]:
    points.append(
      {
        "what": "scheme",
        "scheme": scheme,
        "size": size,
        "batch": batch,
        "seq_len": seq_len,
        "steps": plan["steps"],
      }
    )
  size, train_len = plan["eval_model"]
  for length in plan["eval_lengths"]:
    for impl in IMPLS:
      points.append(
        {
          "what": "eval",
          "size": size,
          "train_len": train_len,
          "length": length,
          "impl": impl,
          "repeats": plan["repeats"],
        }
      )
  return points


def run(out: str, quick: bool = False) -> dict:
  """Every point of the plan (tiny on CPU or with `quick`), MFU against the measured bf16 peak;
  writes `out` (JSON) and `out` with .md (the table) as it goes, so a cut-short run keeps its
  rows."""
  plan_name = "tiny" if quick or jax.default_backend() == "cpu" else "full"
  plan = PLANS[plan_name]
  results = {"plan": plan_name, "command": " ".join(sys.argv), "rows": []}
  for point in plan_points(plan):
    print(f"[device_check] {json.dumps(point)}", flush=True)
    row = _in_process(point, plan["timeout_s"])
    done = results["rows"] + [row]
    nope = [r for r in done if r["what"] == "scheme" and r["scheme"] == "nope"]
    if row["what"] == "scheme" and "step_s" in row and nope and "step_s" in nope[0]:
      row["vs_nope"] = row["step_s"] / nope[0]["step_s"]
    if row["what"] == "train" and "tokens_per_s" in row:
      peak_rows = [r for r in results["rows"] if r["what"] == "peak" and "bfloat16_flops" in r]
      if peak_rows:
        row["mfu_bf16"] = (
          row["flops_per_token"] * row["tokens_per_s"] / peak_rows[0]["bfloat16_flops"]
        )
    print(json.dumps(row), flush=True)
    results["rows"].append(row)
    write(results, out)
  return results


def _cells(row: dict) -> tuple[str, str]:
  """(what was measured, its numbers) of one row, for the table."""
  w = row["what"]
  if "error" in row:
    return w, "error: " + row["error"][:120]
  if w == "peak":
    return f"matmul {row['n']}^3", (
      f"bf16 {row['bfloat16_flops'] / 1e9:.0f} GFLOP/s, f32 {row['float32_flops'] / 1e9:.0f}"
    )
  if w == "train":
    mfu = f", MFU {100 * row['mfu_bf16']:.1f}%" if "mfu_bf16" in row else ""
    return (
      f"train {row['size']} {row['batch']}x{row['seq_len']} {row['scheme']} impl={row['impl']}",
      f"{row['tokens_per_s']:.0f} tokens/s{mfu}, step {row['step_s']:.4f} s, "
      f"compile {row['compile_s']:.1f} s",
    )
  if w == "scheme":
    ratio = f"{row['vs_nope']:.3f} x NoPE, " if "vs_nope" in row else ""
    return (
      f"step {row['scheme']}, {row['size']} {row['batch']}x{row['seq_len']} impl=auto",
      f"{ratio}{row['tokens_per_s']:.0f} tokens/s, step {row['step_s']:.4f} s",
    )
  return (
    f"eval {row['length']} tokens {row['size']} impl={row['impl']}",
    f"forward {row['forward_s']:.3f} s (first {row['first_call_s']:.1f} s)",
  )


def table(results: dict) -> str:
  rows = []
  for row in results["rows"]:
    what, numbers = _cells(row)
    peak_gb = f"{row['peak_gb']:.2f}" if "peak_gb" in row else ""
    versions = f"jax {row['jax']}, flax {row['flax']}" if "jax" in row else ""
    rows.append([what, numbers, peak_gb, row.get("device", ""), versions])
  return markdown_table(["measurement", "numbers", "peak GB", "device", "versions"], rows)


def write(results: dict, out: str) -> None:
  for path, text in ((out, json.dumps(results, indent=2)), (_md(out), table(results) + "\n")):
    with open(path + ".tmp", "w") as f:
      f.write(text)
    os.replace(path + ".tmp", path)


def _md(out: str) -> str:
  return os.path.splitext(out)[0] + ".md"
