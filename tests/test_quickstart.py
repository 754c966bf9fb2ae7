"""The quickstart end to end at a reduced size: every family trains, evaluates, reports."""

import os

import pytest

from tests.helpers import DATA_DIR, run_lcx


@pytest.mark.slow
def test_reduced_quickstart_trains_evaluates_and_reports(tmp_path):
  out = run_lcx(
    [f"--workdir={tmp_path}", "--schemes=nope,alibi", "--steps=4", "--eval_tokens=1024"],
    module="lcx.quickstart",
    env={"LCX_DATA_DIR": DATA_DIR},
    timeout=600,
  )
  assert "== [2/2] alibi: training 4 steps at length 64" in out.stdout
  table_rows = [line for line in out.stdout.splitlines() if line.startswith("| ")]
  assert any(line.startswith("| alibi/none ") for line in table_rows)
  assert any(line.startswith("| nope/none ") for line in table_rows)
  assert "512 (8x)" in out.stdout  # the table with every length
  for scheme in ("nope", "alibi"):
    assert os.path.exists(tmp_path / scheme / "eval" / "none.json")
  for name in ("report.md", "results.csv", "perplexity.png"):
    assert (tmp_path / name).stat().st_size > 0, name
  again = run_lcx(
    [f"--workdir={tmp_path}", "--schemes=nope,alibi", "--steps=4", "--eval_tokens=1024"],
    module="lcx.quickstart",
    env={"LCX_DATA_DIR": DATA_DIR},
    timeout=600,
  )
  assert "reusing" in again.stderr  # finished runs are not trained or evaluated again
