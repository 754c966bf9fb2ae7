"""lcx.tools.bench.throughput (section `train`): MFU over both denominators, recorded and named."""

import pytest

from lcx.tools.bench import mfu, throughput
from tests.helpers import bench_options


def test_train_section_records_and_prints_mfu_over_the_datasheet_and_the_measured_peak(
  monkeypatch,
):
  monkeypatch.setitem(mfu.DATASHEET_BF16_TFLOPS, "cpu", 2)  # this CPU given a datasheet
  opts = bench_options("--sizes=tiny", "--batch_size=2", "--seq_len=16", "--train_steps=2")
  peak = {"xla": {"float32": {"flops": 5e11}}, "torch": {"float32": {"flops": 4e11}}}
  (row,) = throughput.run(opts, {"peak": peak}).values()
  tokens_per_s = row["tokens_per_s"]
  for count, key in (("palm", "flops_per_token"), ("causal", "flops_per_token_causal")):
    assert row[f"mfu_{count}_datasheet"] == pytest.approx(row[key] * tokens_per_s / 2e12)
    assert row[f"mfu_{count}_measured"] == pytest.approx(row[key] * tokens_per_s / 5e11)
  assert row["flops_per_token_causal"] < row["flops_per_token"]
  text = throughput.table({"tiny": row})
  assert "of the datasheet 2 TFLOP/s" in text and "of the measured 0.5 TFLOP/s (25.0%" in text
