"""The quickstart end to end at a reduced size, from a fresh clone: every family trains,
evaluates, reports, and a second call reuses what finished."""

import os
import pathlib
import subprocess
import sys

import pytest

from tests.helpers import DATA_DIR, run_lcx


@pytest.mark.slow
def test_launch_quickstart_from_a_fresh_clone_trains_evaluates_reports_then_reuses(tmp_path):
  """`./launch.sh quickstart` in a clone of this checkout's HEAD: everything it needs is
  committed, and the launcher dispatches. The clone borrows the tests' venv (its stamp matches the
  same pyproject.toml, so nothing installs) and the built dataset; `python -m` in the clone's
  root imports the clone's lcx, not this checkout's."""
  root = pathlib.Path(__file__).resolve().parents[2]
  clone, runs = tmp_path / "lcx", tmp_path / "runs"
  subprocess.run(["git", "clone", "--quiet", str(root), str(clone)], check=True)
  (clone / ".venv").symlink_to(sys.prefix)  # the venv running these tests
  flags = [f"--workdir={runs}", "--schemes=nope,alibi", "--steps=4"]
  flags += ["--eval_tokens=2048"]  # a stream of two documents or more: an interval needs two
  out = subprocess.run(
    ["./launch.sh", "quickstart", *flags],
    cwd=clone,
    env=dict(os.environ, LCX_DATA_DIR=DATA_DIR, PYTHONUNBUFFERED="1"),
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert out.returncode == 0, out.stderr[-2000:]
  assert "installing" not in out.stderr
  assert "== [2/2] alibi: training 4 steps at length 64" in out.stdout
  lines = out.stdout.splitlines()
  table_rows = [line for line in lines if line.startswith("| ")]
  assert any(line.startswith("| alibi/none ") for line in table_rows)
  assert any(line.startswith("| nope/none ") for line in table_rows)
  assert "512 (8x)" in out.stdout  # the table with every length
  last_run = max(i for i, line in enumerate(lines) if line.startswith("== ["))
  assert all(i > last_run for i, line in enumerate(lines) if line.startswith("| "))  # at the end
  for scheme in ("nope", "alibi"):
    assert os.path.exists(runs / scheme / "eval" / "none.json")
  for name in ("report.md", "results.csv", "perplexity.png"):
    assert (runs / name).stat().st_size > 0, name
  again = run_lcx(flags, module="lcx.tools.quickstart", env={"LCX_DATA_DIR": DATA_DIR})
  assert "reusing" in again.stderr  # finished runs are not trained or evaluated again
