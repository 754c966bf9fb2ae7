"""`python -m lcx.tools.bench` (lcx/tools/bench/__init__.py): one tiny end-to-end run (slow) whose
JSON and tables have every section. No timing thresholds. The run is the smallest that takes every
branch: --schemes=rope still times NoPE (the positions section's denominator) but compiles one
peers pair instead of two; one option row (rope+qk_norm) covers the SCHEME+OPTION rows."""

import importlib.util
import json

import pytest

from lcx.tools import bench
from lcx.tools.bench import measure
from tests.helpers import run_lcx


@pytest.mark.slow
def test_tiny_end_to_end_run_writes_every_section(tmp_path):
  out = tmp_path / "bench.json"
  proc = run_lcx(
    [
      "--model_size=tiny",
      "--sizes=tiny",
      "--batch_size=2",
      "--seq_len=16",
      "--schemes=rope",
      "--options=qk_norm",
      "--rounds=2",
      "--steps=1",
      "--train_steps=2",
      "--peak_sizes=64",
      "--eval_lengths=32",
      "--eval_repeats=1",
      "--max_dense_gb=1e-9",
      f"--out={out}",
    ],
    module="lcx.tools.bench",
  )
  results = json.loads(out.read_text())
  s = results["sections"]
  assert set(s) == set(bench.SECTIONS)
  assert set(s["peak"]["xla"]) == {"float32"}  # a CPU has no native bfloat16 matmul
  assert s["peak"]["skipped"] == {"bfloat16": "no native bfloat16 matmul on cpu"}
  assert s["peak"]["roofline_float32"] >= s["peak"]["xla"]["float32"]["flops"] > 0
  train = s["train"]["tiny"]
  assert train["tokens_per_s"] == pytest.approx(2 * 16 / train["step_s"])
  for count, key in (("palm", "flops_per_token"), ("causal", "flops_per_token_causal")):
    assert train[f"mfu_{count}_measured"] == pytest.approx(
      train[key] * train["tokens_per_s"] / s["peak"]["roofline_float32"]
    )
  assert train["peak_datasheet"] is None and "no datasheet peak; MFU" in proc.stdout
  assert s["positions"]["schemes"]["nope"]["ratio_to_nope"] == 1.0
  assert set(s["positions"]["schemes"]) == {"nope", "rope", "rope+qk_norm"}
  qk_norm = s["positions"]["schemes"]["rope+qk_norm"]
  assert qk_norm["ratio_to_scheme"] > 0 and "x scheme" in proc.stdout
  low, high, coverage = s["positions"]["schemes"]["rope"]["ratio_to_nope_ci"]
  assert low <= s["positions"]["schemes"]["rope"]["ratio_to_nope"] <= high and 0 < coverage < 1
  assert s["positions"]["skipped"] == {}
  assert set(s["peers"]["schemes"]) == {"rope"}
  rope = s["peers"]["schemes"]["rope"]
  assert rope["lcx"]["step_s"] > 0
  for peer in ("plain_nnx", "x_transformers"):
    if peer == "x_transformers" and not importlib.util.find_spec("x_transformers"):
      assert rope[peer] == {
        "unavailable": "not importable: x_transformers (pip install torch==2.13.0 x-transformers)"
      }
      continue
    assert rope[peer]["lcx_speedup"] == pytest.approx(
      measure.ratio(rope[peer]["rounds_s"], rope["lcx"]["rounds_s"])
    )
  dense, chunked = s["eval"]["points"]
  assert dense["skipped"].startswith("would need")  # --max_dense_gb tiny: computed, not run
  assert chunked["forward_s"] > 0 and chunked["peak_gb"] > 0
  assert chunked["programs_compiled"] == 1  # the same length again: no recompilation
  for section in bench.SECTIONS.values():
    assert section.TITLE in proc.stdout
  assert "MFU = " + bench.MFU_FORMULA in proc.stdout
  assert "| scheme" in proc.stdout and f"wrote {out}" in proc.stdout  # report's markdown tables
