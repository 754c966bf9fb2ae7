"""lcx.tools.bench.mfu: the FLOPs counts against a hand count, the datasheet table, and MFU
figures with their denominators named."""

import pytest

from lcx.tools.bench import mfu, workload


def test_flops_match_a_hand_count_for_the_tiny_model_palm_and_causal():
  m = workload.bench_config("rope", "tiny", 2, 32).model  # d=64, 2 layers, 4 heads x 16, mlp 256
  assert m.vocab_size == 259
  per_layer = 4 * 64 * 64 + 2 * 64 * 256  # q, k, v, o; MLP in and out
  assert mfu.matmul_params(m) == 2 * per_layer + 64 * 259
  attention = 12 * 2 * 32 * 4 * 16  # QK^T and PV, forward + backward, every query over all T
  six_n = 6 * (2 * per_layer + 64 * 259)
  assert mfu.train_flops_per_token(m, 32) == six_n + attention
  assert mfu.counts(m, 32) == {
    "flops_per_token": six_n + attention,
    "flops_per_token_causal": six_n + attention // 2,  # a causal query: T/2 keys on average
  }


def test_flops_count_grouped_query_attention_and_swiglu():
  m = workload.bench_config("rope", "tiny", 2, 32).model
  m.num_kv_heads, m.mlp = 1, "swiglu"
  per_layer = 2 * 64 * 64 + 2 * 64 * 16 + 3 * 64 * 256  # q, o; one k, v head; gate, in, out
  assert mfu.matmul_params(m) == 2 * per_layer + 64 * 259


def test_datasheet_dense_bf16_peaks_by_the_device_kind_jax_reports():
  tflops = {
    "NVIDIA H200": 989,
    "NVIDIA H100 80GB HBM3": 989,
    "NVIDIA A100-SXM4-80GB": 312,
    "NVIDIA L4": 121,
    "TPU v4": 275,
    "TPU v5 lite": 197,
    "TPU v5": 459,
    "TPU v6 lite": 918,
  }
  assert {kind: mfu.datasheet_peak(kind) for kind in tflops} == {
    kind: t * 1e12 for kind, t in tflops.items()
  }
  assert mfu.datasheet_peak("cpu") is None and mfu.datasheet_peak("NVIDIA H100 PCIe") is None


def test_figures_name_each_denominator_and_the_probe_share_of_the_datasheet():
  counted = {"flops_per_token": 6e8, "flops_per_token_causal": 5e8}
  row = counted | mfu.figures(counted, 1e6, {"datasheet": 989e12, "measured": 816e12})
  assert row["mfu_palm_datasheet"] == pytest.approx(6e14 / 989e12)
  assert row["mfu_causal_datasheet"] == pytest.approx(5e14 / 989e12)
  assert row["mfu_palm_measured"] == pytest.approx(6e14 / 816e12)
  assert row["mfu_causal_measured"] == pytest.approx(5e14 / 816e12)
  assert (row["peak_datasheet"], row["peak_measured"]) == (989e12, 816e12)
  assert mfu.describe(row) == (
    "MFU 60.7% PaLM, 50.6% causal of the datasheet 989 TFLOP/s; "
    "MFU 73.5% PaLM, 61.3% causal of the measured 816 TFLOP/s (82.5% of the datasheet)"
  )


def test_a_device_without_a_datasheet_peak_says_so_and_gives_the_measured_figure_only():
  counted = {"flops_per_token": 6e8, "flops_per_token_causal": 5e8}
  row = counted | mfu.figures(counted, 100.0, {"datasheet": None, "measured": 2e11})
  assert row["peak_datasheet"] is None and "mfu_palm_datasheet" not in row
  assert mfu.describe(row) == (
    "no datasheet peak; MFU 30.0% PaLM, 25.0% causal of the measured 0.2 TFLOP/s"
  )
