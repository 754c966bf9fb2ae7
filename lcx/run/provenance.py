"""Which code produced a result: the git commit of the lcx checkout and whether its tracked
files differed from it (a dirty tree: the commit alone does not reproduce the numbers)."""

from __future__ import annotations

import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def _git(*args: str) -> str | None:
  try:
    done = subprocess.run(
      ["git", "-C", HERE, *args], capture_output=True, text=True, timeout=30, check=True
    )
  except (OSError, subprocess.SubprocessError):
    return None
  return done.stdout


def source() -> dict:
  """{"commit": sha, "dirty": bool} of the checkout lcx runs from; both None outside git (an
  installed wheel). Dirty: a tracked file differs from the commit (untracked results and runs
  do not count)."""
  commit = _git("rev-parse", "HEAD")
  if commit is None:
    return {"commit": None, "dirty": None}
  status = _git("status", "--porcelain", "--untracked-files=no")
  return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}
