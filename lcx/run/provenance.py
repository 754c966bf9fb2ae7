"""Which code produced a result: the git commit of the lcx checkout and whether its tracked
files differed from it (a dirty tree: the commit alone does not reproduce the numbers)."""

from __future__ import annotations

import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))

# What a run writes or a write-up edits, never what computes a number: a sweep rewrites its
# committed results, report and plots as it goes, and its later runs are not dirty for that.
OUTPUTS = (
  ":(top,exclude,glob)experiments/**/results/**",
  ":(top,exclude,glob)**/*.md",
  ":(top,exclude,glob)**/*.csv",
  ":(top,exclude,glob)**/*.png",
  ":(top,exclude,glob)**/*.ipynb",
)


def _git(where: str, *args: str) -> str | None:
  try:
    done = subprocess.run(
      ["git", "-C", where, *args], capture_output=True, text=True, timeout=30, check=True
    )
  except (OSError, subprocess.SubprocessError):
    return None
  return done.stdout


def source(where: str = HERE) -> dict:
  """{"commit": sha, "dirty": bool} of the checkout lcx runs from; both None outside git (an
  installed wheel). Dirty: a tracked file differs from the commit, other than the OUTPUTS
  (untracked results and runs do not count either)."""
  commit = _git(where, "rev-parse", "HEAD")
  if commit is None:
    return {"commit": None, "dirty": None}
  status = _git(where, "status", "--porcelain", "--untracked-files=no", "--", ":/", *OUTPUTS)
  return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}
