"""Section `train`: tokens/s, MFU and compile time of lcx's train step per model size.

MFU = model FLOPs per token x tokens/s / measured float32 matmul peak (section `peak`), where
  model FLOPs per token = 6 x matmul parameters + 12 x layers x T x heads x head_dim
(forward + backward; attention over the full T x T, the PaLM convention).
"""

from __future__ import annotations

import statistics

from lcx.tools.bench import peak
from lcx.tools.bench.measure import timed
from lcx.tools.bench.workload import lcx_program, options_config
from lcx.tools.report import markdown_table

TITLE = "Training throughput (after compilation; median step)"
MFU_FORMULA = (
  "(6 x matmul params + 12 x layers x T x heads x head_dim) x tokens/s "
  "/ best measured float32 matmul FLOP/s (XLA or PyTorch)"
)


def matmul_params(model_cfg) -> int:
  """Parameters that take part in a matmul: projections, MLP and the output head."""
  m = model_cfg
  attn = m.d_model * m.head_dim * (2 * m.num_heads + 2 * m.num_kv_heads)  # q, o; k, v
  mlp = (3 if m.mlp == "swiglu" else 2) * m.d_model * m.mlp_dim
  return m.num_layers * (attn + mlp) + m.d_model * m.vocab_size


def train_flops_per_token(model_cfg, seq_len: int) -> int:
  """6 N + 12 x layers x T x heads x head_dim: forward (2 per multiply-add) and backward (2x)."""
  m = model_cfg
  return 6 * matmul_params(m) + 12 * m.num_layers * seq_len * m.num_heads * m.head_dim


def mfu(flops_per_token: float, tokens_per_s: float, peak_flops: float) -> float:
  return flops_per_token * tokens_per_s / peak_flops


def run(opts, results) -> dict:
  """Tokens/s and MFU of lcx's train step per model size (RoPE unless --train_scheme)."""
  out = {}
  for size in opts.sizes:
    config = options_config(opts, opts.train_scheme, size)
    program = lcx_program(config)
    times = [timed(program.step) for _ in range(opts.train_steps)]
    step_s = statistics.median(times)
    tokens = config.data.batch_size * config.data.seq_len
    fpt = train_flops_per_token(config.model, config.data.seq_len)
    out[size] = {
      "scheme": opts.train_scheme,
      "batch": config.data.batch_size,
      "seq_len": config.data.seq_len,
      "params_matmul": matmul_params(config.model),
      "flops_per_token": fpt,
      "compile_s": program.compile_s,
      "step_s": step_s,
      "step_s_all": times,
      "tokens_per_s": tokens / step_s,
      "mfu": mfu(fpt, tokens / step_s, peak.roofline(results)),
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
        f"{100 * v['mfu']:.1f}%",
      ]
      for size, v in result.items()
    ],
  )
