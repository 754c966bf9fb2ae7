"""The two wordings of a bad config value, shared by every check (and jax-free, for lcx.report
and lcx.sweep), so a user reads one form whichever module found the mistake."""

from __future__ import annotations

import json
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
  """`PATH is not a known field; allowed: A, B, C` (raise it): a key its section lacks."""
  return ValueError(f"{path} is not a known field; allowed: {_listed(sorted(allowed))}")


def load_json(path: str, remedy: str = "") -> Any:
  """`path`'s JSON; a file that is not (truncated by a kill or a full disk, not UTF-8) is a
  ValueError naming it, and `remedy`, what the user can do about it."""
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except (UnicodeDecodeError, json.JSONDecodeError) as error:
    raise ValueError(f"{path}: not JSON, truncated or corrupt ({error}){remedy and '; '}{remedy}")
