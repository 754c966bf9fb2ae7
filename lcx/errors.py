"""The two wordings of a bad config value, shared by every check (and jax-free, for lcx.tools.report
and lcx.tools.sweep), so a user reads one form whichever module found the mistake."""

from __future__ import annotations

import difflib
import json
import os
from typing import Any, Iterable


def _listed(allowed: str | Iterable[Any]) -> str:
  if isinstance(allowed, str):
    return allowed
  return ", ".join(str(a) for a in allowed) or "(none)"


def not_allowed(field: str, value: Any, allowed: str | Iterable[Any]) -> ValueError:
  """`FIELD=VALUE is not allowed; allowed: A, B, C` (raise it). `allowed` lists the values, or
  is a phrase for a range such as ">= 1"."""
  return ValueError(f"{field}={value!r} is not allowed; allowed: {_listed(allowed)}")


def unknown_field(path: str, allowed: Iterable[Any]) -> ValueError:
  """`PATH is not a known field; allowed: A, B, C; did you mean B?` (raise it): a key its
  section lacks."""
  allowed = sorted(map(str, allowed))
  hint = did_you_mean(path.rpartition(".")[2], allowed)
  return ValueError(f"{path} is not a known field; allowed: {_listed(allowed)}{hint}")


def did_you_mean(name: str, candidates: Iterable[str], prefix: str = "") -> str:
  """`; did you mean PREFIX+A or PREFIX+B?` for the candidates closest to `name`, whole or by
  their last dotted part (`steps` finds `train.steps`); "" when none is close."""
  candidates = list(dict.fromkeys(candidates))
  by_leaf: dict[str, list[str]] = {}
  for candidate in candidates:
    by_leaf.setdefault(candidate.rpartition(".")[2], []).append(candidate)
  found = difflib.get_close_matches(name, candidates, n=3, cutoff=0.8)
  for leaf in difflib.get_close_matches(name.rpartition(".")[2], list(by_leaf), n=3, cutoff=0.8):
    found += by_leaf[leaf]
  found = list(dict.fromkeys(found))[:3]
  return f"; did you mean {' or '.join(prefix + f for f in found)}?" if found else ""


def load_json(path: str, remedy: str = "") -> Any:
  """`path`'s JSON; a file that is not (truncated by a kill or a full disk, not UTF-8) is a
  ValueError naming it, and `remedy`, what the user can do about it."""
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except (UnicodeDecodeError, json.JSONDecodeError) as error:
    raise ValueError(f"{path}: not JSON, truncated or corrupt ({error}){remedy and '; '}{remedy}")


def not_a_directory(field: str, path: str) -> ValueError | None:
  """`FIELD=PATH: FILE is a file, not a directory; allowed: ...` when PATH, or a folder on the
  way to it, is an existing file (creating the directory would end in a traceback), else
  None."""
  part = os.path.abspath(os.path.expanduser(path))
  while not os.path.exists(part) and os.path.dirname(part) != part:
    part = os.path.dirname(part)
  if os.path.isdir(part):
    return None
  where = "" if part == os.path.abspath(os.path.expanduser(path)) else f": {part}"
  return ValueError(
    f"{field}={path}{where} is a file, not a directory; allowed: a directory, or a path "
    "that does not exist yet"
  )


class RunFault(RuntimeError):
  """A fault of a run's state or surroundings, not of the code: another process holds the
  workdir, the loss diverged, a checkpoint is unreadable, the disk is full. The entry points
  print it as one `error: ...` line (exit status 2); the message says what to do."""
