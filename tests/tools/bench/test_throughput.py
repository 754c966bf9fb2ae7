"""lcx.tools.bench.throughput: the FLOPs formula against a hand count, and MFU."""

import pytest

from lcx.tools.bench import throughput, workload


def test_flops_match_a_hand_count_for_the_tiny_model():
  m = workload.bench_config("rope", "tiny", 2, 32).model  # d=64, 2 layers, 4 heads x 16, mlp 256
  assert m.vocab_size == 259
  per_layer = 4 * 64 * 64 + 2 * 64 * 256  # q, k, v, o; MLP in and out
  assert throughput.matmul_params(m) == 2 * per_layer + 64 * 259
  attention = 12 * 2 * 32 * 4 * 16  # QK^T and PV, forward + backward, full T x T
  assert throughput.train_flops_per_token(m, 32) == 6 * (2 * per_layer + 64 * 259) + attention


def test_flops_count_grouped_query_attention_and_swiglu():
  m = workload.bench_config("rope", "tiny", 2, 32).model
  m.num_kv_heads, m.mlp = 1, "swiglu"
  per_layer = 2 * 64 * 64 + 2 * 64 * 16 + 3 * 64 * 256  # q, o; one k, v head; gate, in, out
  assert throughput.matmul_params(m) == 2 * per_layer + 64 * 259


def test_mfu():
  assert throughput.mfu(1e6, 100.0, 2e8) == pytest.approx(0.5)
