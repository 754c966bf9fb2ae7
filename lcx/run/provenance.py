"""Which code produced a result: the git commit of the lcx checkout, whether its code differed
from it (a dirty tree: the commit alone does not reproduce the numbers), and a digest of that
difference, so a result made on a copy of a working tree (a lent GPU's) names the tree it ran,
not only the stale HEAD it sat on."""

from __future__ import annotations

import hashlib
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
  """{"commit": sha, "dirty": bool, "diff": sha256 or None} of the checkout lcx runs from; all
  None outside git (an installed wheel). Dirty: a tracked file differs from the commit, or an
  untracked Python file sits in the tree (a sweep.py not yet committed), other than the OUTPUTS
  (untracked results, runs and notes do not count). diff: the digest of exactly that
  difference (the tracked files' binary diff against HEAD, each untracked Python file's path
  and bytes), None when clean; two trees with one digest ran the same code."""
  commit = _git(where, "rev-parse", "HEAD")
  if commit is None:
    return {"commit": None, "dirty": None, "diff": None}
  top = _git(where, "rev-parse", "--show-toplevel")
  diff = _git(where, "diff", "HEAD", "--binary", "--", ":/", *OUTPUTS)
  untracked = _git(
    where,
    "ls-files",
    "-z",
    "--full-name",
    "--others",
    "--exclude-standard",
    "--",
    ":/*.py",
    *OUTPUTS,
  )
  if None in (top, diff, untracked):
    return {"commit": commit.strip(), "dirty": None, "diff": None}
  digest = hashlib.sha256(diff.encode())
  for path in sorted(filter(None, untracked.split("\0"))):
    digest.update(b"\0" + path.encode() + b"\0")
    with open(os.path.join(top.strip(), path), "rb") as f:
      digest.update(f.read())
  dirty = bool(diff.strip() or untracked.strip())
  return {"commit": commit.strip(), "dirty": dirty, "diff": digest.hexdigest() if dirty else None}
