"""Section `eval`: forward (per-token loss) time and peak memory at long lengths, dense vs
chunked, each point in a fresh `python -m lcx.tools.bench --eval_point=...` process so its peak
memory is its own. The forward is the evaluator's own (`lcx.tools.evaluate.runner.Runner.nll`)."""

from __future__ import annotations

import json
import pathlib
import statistics
import subprocess
import sys

import jax
from flax import nnx

from lcx.model.decoder import Decoder
from lcx.run import prepare, timing
from lcx.tools.bench.measure import timed
from lcx.tools.bench.workload import bench_config, options_config, synthetic_batch
from lcx.tools.evaluate.runner import Runner
from lcx.tools.report import markdown_table

TITLE = "Long evaluation: forward (loss) of batch 1, one fresh process per point"
GB = 1024**3
REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]


def dense_eval_bytes(model_cfg, length: int, batch: int = 1) -> int:
  """Dense attention's peak, estimated as four float32 B x H x T x T buffers live at once
  (logits, masked logits, exponentials, probabilities); measured: 14.9 GB at 16k, this 17.2."""
  return 4 * 4 * batch * model_cfg.num_heads * length * length


def run(opts, results) -> dict:
  """Forward (loss) time and peak memory per (length, kernel), each point in a fresh process."""
  del results
  model_cfg = options_config(opts, opts.eval_scheme).model
  points = []
  for length in opts.eval_lengths:
    for kernel in ("dense", "chunked"):
      need = dense_eval_bytes(model_cfg, length)
      if kernel == "dense" and need > opts.max_dense_gb * GB:
        points.append(
          {
            "length": length,
            "kernel": kernel,
            "skipped": f"would need {need / GB:.1f} GB (> --max_dense_gb)",
          }
        )
        continue
      point = run_eval_point(
        f"{opts.eval_scheme}:{opts.model_size}:{opts.seq_len}", kernel, length, opts.eval_repeats
      )
      points.append(point)
      print(f"  eval {kernel} {length}: {point.get('forward_s', point.get('error'))}", flush=True)
  return {"scheme": opts.eval_scheme, "batch": 1, "points": points}


def run_eval_point(model: str, kernel: str, length: int, repeats: int) -> dict:
  """`eval_point` in a fresh `python -m lcx.tools.bench` process; `model` is
  "SCHEME:SIZE:TRAIN_LEN"."""
  cmd = [
    sys.executable,
    "-m",
    "lcx.tools.bench",
    f"--eval_point={model}:{kernel}:{length}",
    f"--eval_repeats={repeats}",
  ]
  proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)
  lines = [line for line in proc.stdout.splitlines() if line.startswith("EVAL_POINT ")]
  if proc.returncode != 0 or not lines:
    return {
      "length": length,
      "kernel": kernel,
      "error": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}",
    }
  return json.loads(lines[-1][len("EVAL_POINT ") :])


def _proc_status_kb(field: str) -> int:
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1])
  raise KeyError(field)


def _peak_bytes() -> int:
  """Peak memory of the device the forward ran on: the accelerator's allocator peak, or on
  CPU the process's resident high-water mark (VmHWM, host RAM is the device memory there)."""
  stats = jax.devices()[0].memory_stats() if jax.default_backend() != "cpu" else None
  if stats and "peak_bytes_in_use" in stats:
    return stats["peak_bytes_in_use"]
  return _proc_status_kb("VmHWM") * 1024


def eval_runner(
  scheme: str,
  size: str,
  train_len: int,
  kernel: str,
  length: int,
  impl: str = "auto",
  dtype: str = "float32",
  block_size: int | None = None,
) -> Runner:
  """The evaluator's Runner on a freshly initialized model, one row of `length` per forward
  with `kernel` (eval.chunked_from and eval.batch_tokens set for that); `impl`, `dtype` and
  `block_size`: model.attention.impl (whose pallas runs both kernel names), model.dtype and
  the Pallas kernel's block (None: the default)."""
  config = bench_config(scheme, size, 1, train_len)
  config.model.attention.impl, config.model.dtype = impl, dtype
  if block_size is not None:
    config.model.attention.block_size = block_size
  config.eval.batch_tokens = length
  config.eval.chunked_from = length if kernel == "chunked" else length + 1
  prepared = prepare.prepare(config)
  shardings = jax.tree.map(lambda a: a.sharding, prepared.abstract_params)
  params = nnx.state(Decoder(prepared.config.model, rngs=nnx.Rngs(0)), nnx.Param)
  return Runner(prepared, jax.device_put(params, shardings))


def eval_point(
  scheme: str, size: str, train_len: int, kernel: str, length: int, repeats: int
) -> dict:
  """Forward passes (per-token loss, `Runner.nll` as the evaluator runs it) of batch 1 x `length`.

  The first call compiles; `repeats` more run the same length again, which must not recompile
  (XLA compilations are counted). Peak memory on CPU is VmHWM after resetting it (clear_refs 5)
  once the program is compiled, so it covers the repeated forward passes only; on an
  accelerator it is the allocator's peak over the whole process (first call included).
  """
  runner = eval_runner(scheme, size, train_len, kernel, length)
  batch = synthetic_batch(1, length, runner.config.model.vocab_size)
  rows = (batch["inputs"], batch["targets"], batch["positions"], batch["segment_ids"])

  def forward():
    return runner.nll(*rows)  # returns host values: the forward is done

  with timing.span() as built:  # the first call's programs, and any a repeat builds again
    first_s = timed(forward)
    rss_before = _proc_status_kb("VmRSS")
    try:
      with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
      hwm_reset = True
    except OSError:
      hwm_reset = False
    times = [timed(forward) for _ in range(repeats)]
  return {
    "length": length,
    "kernel": kernel,
    "compile_s": built.xla_compiling,
    "first_call_s": first_s,
    "forward_s": statistics.median(times),
    "forward_s_all": times,
    "peak_gb": _peak_bytes() / GB,
    "peak_of": jax.default_backend(),
    "rss_before_gb": rss_before * 1024 / GB,
    "hwm_reset": hwm_reset,
    "programs_compiled": built.programs,
  }


def table(result: dict) -> str:
  rows = []
  for p in result["points"]:
    if "forward_s" in p:
      rows.append(
        [
          str(p["length"]),
          p["kernel"],
          f"{p['compile_s']:.1f}",
          f"{p['forward_s']:.2f}",
          f"{p['peak_gb']:.2f}",
          str(p["programs_compiled"]),
        ]
      )
    else:
      rows.append([str(p["length"]), p["kernel"], p.get("skipped") or p.get("error"), "", "", ""])
  return markdown_table(["tokens", "kernel", "compile s", "forward s", "peak GB", "programs"], rows)
