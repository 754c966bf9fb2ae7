"""Model FLOPs utilization as a reviewer reads it: a train step's model FLOPs per token, counted two
ways, over two peaks, each figure labelled with its denominator.

Counts (forward 2 FLOPs per multiply-add, backward twice the forward; N = matmul parameters):
  palm    6 N + 12 x layers x T x heads x head_dim: every query over all T keys (PaLM, app. B)
  causal  6 N + 6 x layers x T x heads x head_dim: a causal query sees T/2 keys on average
Peaks:
  datasheet  the device's datasheet dense bf16 peak (DATASHEET_BF16_TFLOPS, keyed by the device
             kind jax reports): the denominator papers use; none for a device not in the table
  measured   a looped, warmed matmul probe on this device (peak.xla_matmul): what this software
             stack reaches, printed with its share of the datasheet
"""

from __future__ import annotations

# Dense (not 2:4 sparse) bf16 TFLOP/s from the vendors' datasheets, by `jax.Device.device_kind`.
DATASHEET_BF16_TFLOPS = {
  "NVIDIA H200": 989,  # SXM
  "NVIDIA H100 80GB HBM3": 989,  # SXM
  "NVIDIA A100-SXM4-80GB": 312,
  "NVIDIA A100-SXM4-40GB": 312,
  "NVIDIA A100 80GB PCIe": 312,
  "NVIDIA A100-PCIE-40GB": 312,
  "NVIDIA L4": 121,
  "TPU v4": 275,
  "TPU v5 lite": 197,  # v5e
  "TPU v5": 459,  # v5p
  "TPU v5p": 459,
  "TPU v6 lite": 918,  # v6e
}
# Count -> the share of the T keys a query's attention is counted over, and its printed name.
ATTENTION_SHARE = {"palm": 1.0, "causal": 0.5}
NAMES = {"palm": "PaLM", "causal": "causal"}
NO_DATASHEET = "no datasheet peak"


def datasheet_peak(device_kind: str) -> float | None:
  """The datasheet dense bf16 FLOP/s of `device_kind`, or None (a CPU, a device not listed)."""
  tflops = DATASHEET_BF16_TFLOPS.get(device_kind)
  return None if tflops is None else tflops * 1e12


def matmul_params(model_cfg) -> int:
  """Parameters that take part in a matmul: projections, MLP and the output head."""
  m = model_cfg
  attn = m.d_model * m.head_dim * (2 * m.num_heads + 2 * m.num_kv_heads)  # q, o; k, v
  mlp = (3 if m.mlp == "swiglu" else 2) * m.d_model * m.mlp_dim
  return m.num_layers * (attn + mlp) + m.d_model * m.vocab_size


def train_flops_per_token(model_cfg, seq_len: int, count: str = "palm") -> int:
  """6 N + 12 x layers x (keys attended) x heads x head_dim, keys per ATTENTION_SHARE[count]."""
  m = model_cfg
  attention = 12 * m.num_layers * seq_len * m.num_heads * m.head_dim
  return 6 * matmul_params(m) + round(ATTENTION_SHARE[count] * attention)


def counts(model_cfg, seq_len: int) -> dict[str, int]:
  """{"flops_per_token": PaLM count, "flops_per_token_causal": causal count}: a row's fields."""
  return {_fpt_key(c): train_flops_per_token(model_cfg, seq_len, c) for c in ATTENTION_SHARE}


def figures(row: dict, tokens_per_s: float, peaks: dict[str, float | None]) -> dict:
  """{"peak_PEAK": FLOP/s or None, "mfu_COUNT_PEAK": ...}: every peak (a missing datasheet one
  as None) and an MFU for each count in `row` (`counts`) over each peak that is known."""
  mfus = {
    f"mfu_{count}_{name}": row[_fpt_key(count)] * tokens_per_s / peak
    for name, peak in peaks.items()
    if peak
    for count in ATTENTION_SHARE
  }
  return {**{f"peak_{name}": peak for name, peak in peaks.items()}, **mfus}


def describe(row: dict) -> str:
  """`figures`' MFUs of a row in words, each with its denominator; "no datasheet peak" where
  the device has none."""
  parts = []
  for name in ("datasheet", "measured"):
    if f"mfu_palm_{name}" not in row:
      continue
    shares = ", ".join(f"{100 * row[f'mfu_{c}_{name}']:.1f}% {NAMES[c]}" for c in ATTENTION_SHARE)
    parts.append(f"MFU {shares} of the {name} {row[f'peak_{name}'] / 1e12:.4g} TFLOP/s")
  if "mfu_palm_datasheet" not in row:
    parts.insert(0, NO_DATASHEET)
  elif "mfu_palm_measured" in row:
    parts[-1] += f" ({100 * row['peak_measured'] / row['peak_datasheet']:.1f}% of the datasheet)"
  return "; ".join(parts)


def _fpt_key(count: str) -> str:
  return "flops_per_token" if count == "palm" else f"flops_per_token_{count}"
