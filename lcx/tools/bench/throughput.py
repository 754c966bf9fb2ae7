"""Section `train`: tokens/s, MFU and compile time of lcx's train step per model size.

MFU per lcx/tools/bench/mfu.py: model FLOPs counted PaLM-style (attention over all T) and causally
(over T/2), each over the device's datasheet dense bf16 peak (none on a CPU) and over the best
matmul measured in the model's dtype by section `peak`.
"""

from __future__ import annotations

import statistics

import jax

from lcx.tools.bench import mfu, peak
from lcx.tools.bench.measure import timed
from lcx.tools.bench.workload import lcx_program, options_config
from lcx.tools.report import markdown_table

TITLE = "Training throughput (after compilation; median step)"
MFU_FORMULA = (
  "(6 x matmul params + 12 x layers x K x heads x head_dim) x tokens/s / peak, K = T (PaLM) or "
  "T/2 (causal); peak = the device's datasheet dense bf16 FLOP/s, and the best matmul measured "
  "in the model's dtype (section peak)"
)


def peaks(results: dict, dtype: str) -> dict[str, float | None]:
  """The two MFU denominators (mfu.py): this device's datasheet peak and the measured one."""
  kind = jax.devices()[0].device_kind
  return {"datasheet": mfu.datasheet_peak(kind), "measured": peak.measured(results, dtype)}


def run(opts, results) -> dict:
  """Tokens/s and MFU of lcx's train step per model size (RoPE unless --train_scheme)."""
  out = {}
  for size in opts.sizes:
    config = options_config(opts, opts.train_scheme, size)
    program = lcx_program(config)
    times = [timed(program.step) for _ in range(opts.train_steps)]
    step_s = statistics.median(times)
    tokens = config.data.batch_size * config.data.seq_len
    counted = mfu.counts(config.model, config.data.seq_len)
    out[size] = {
      "scheme": opts.train_scheme,
      "batch": config.data.batch_size,
      "seq_len": config.data.seq_len,
      "params_matmul": mfu.matmul_params(config.model),
      **counted,
      "compile_s": program.compile_s,
      "step_s": step_s,
      "step_s_all": times,
      "tokens_per_s": tokens / step_s,
      **mfu.figures(counted, tokens / step_s, peaks(results, config.model.dtype)),
    }
    print(f"  train {size}: {step_s:.3f} s/step", flush=True)
  return out


def table(result: dict) -> str:
  return markdown_table(
    ["model", "scheme", "B x T", "GFLOP/token", "compile s", "s/step", "tokens/s", "MFU"],
    [
      [
        size,
        v["scheme"],
        f"{v['batch']}x{v['seq_len']}",
        f"{v['flops_per_token'] / 1e9:.4f}",
        f"{v['compile_s']:.1f}",
        f"{v['step_s']:.3f}",
        f"{v['tokens_per_s']:.0f}",
        mfu.describe(v),
      ]
      for size, v in result.items()
    ],
  )
