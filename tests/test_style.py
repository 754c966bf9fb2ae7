"""The tree follows the one lint and format configuration ([tool.ruff] in pyproject.toml)."""

import subprocess
import sys

from tests.helpers import ROOT

PATHS = ["lcx", "tests", "configs", "experiments"]


def _ruff(*args):
  return subprocess.run(
    [sys.executable, "-m", "ruff", *args, *PATHS],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )


def test_ruff_check_passes():
  proc = _ruff("check", "--no-cache")
  assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]


def test_ruff_format_leaves_the_tree_unchanged():
  proc = _ruff("format", "--check", "--no-cache")
  assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
