"""lcx.bench.device_check: the full plan has every row of issue 26, a failed row stays a row,
and the tiny plan runs end to end on CPU (slow)."""

import json

import pytest

from lcx import positions
from lcx.bench import device_check
from tests.helpers import run_lcx


def test_device_check_full_plan_has_every_row_of_issue_26():
  points = device_check.plan_points(device_check.PLANS["full"])
  train = {(p["size"], p["batch"], p["seq_len"], p["impl"]) for p in points if p["what"] == "train"}
  assert train == {(s, 64, 1024, i) for s in ("default", "large") for i in ("xla", "pallas")}
  evals = {(p["length"], p["impl"]) for p in points if p["what"] == "eval"}
  assert evals == {(n, i) for n in (65536, 262144) for i in ("xla", "pallas")}
  assert [p["scheme"] for p in points if p["what"] == "scheme"] == [
    "nope",
    *[s for s in positions.SCHEMES if s != "nope"],
  ]  # every registered scheme, NoPE (the denominator) first
  failed = {"what": "train", "size": "large", "batch": 64, "seq_len": 1024, "impl": "xla"}
  table = device_check.table({"rows": [{**failed, "error": "exit 1: RESOURCE_EXHAUSTED"}]})
  assert "error: exit 1: RESOURCE_EXHAUSTED" in table  # a failed row stays a row


@pytest.mark.slow
def test_device_check_runs_end_to_end_on_cpu(tmp_path):
  """`--device_check` on CPU: the tiny plan, one process per row, JSON and table written."""
  out = tmp_path / "device_check.json"
  run_lcx(["--device_check", f"--out={out}"], module="lcx.bench", timeout=900)
  rows = json.loads(out.read_text())["rows"]
  assert [r["what"] for r in rows] == ["peak", "train", "train"] + ["scheme"] * 3 + ["eval"] * 2
  for row in rows:
    assert "error" not in row, row
    assert row["backend"] == "cpu" and row["jax"] and row["device"] and row["peak_gb"] > 0
  peak_bf16 = rows[0]["bfloat16_flops"]
  for row, impl in zip(rows[1:3], ("xla", "pallas")):
    assert row["impl"] == impl and row["tokens_per_s"] == pytest.approx(64 / row["step_s"])
    assert row["mfu_bf16"] == pytest.approx(
      row["flops_per_token"] * row["tokens_per_s"] / peak_bf16
    )
  assert [(r["scheme"], r["impl"]) for r in rows[3:6]] == [
    ("nope", "auto"),
    ("rope", "auto"),
    ("alibi", "auto"),
  ]
  assert rows[3]["vs_nope"] == 1.0
  assert rows[5]["vs_nope"] == pytest.approx(rows[5]["step_s"] / rows[3]["step_s"])
  assert [r["impl"] for r in rows[6:]] == ["xla", "pallas"] and rows[6]["forward_s"] > 0
  table = out.with_suffix(".md").read_text().strip().splitlines()
  assert len(table) == 2 + len(rows) and all("cpu" in line for line in table[2:])
