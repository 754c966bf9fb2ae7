"""Reading result JSON (files, directories, globs) and the warnings about what was read."""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Iterable, Sequence

from lcx import errors
from lcx.tools.report import kinds, tables

SCHEMA = "lcx.eval/1"
# eval/history/: results an evaluation replaced (another checkpoint or other settings); a
# directory's results are the newest ones, so the history is read only when named.
HISTORY = "history"
COMMON_KEYS = ("schema", "kind", "run", "variant", "step", "train_len")


def check(result: dict, where: str = "result") -> None:
  """Raises ValueError naming `where` unless `result` is an lcx result the report can render:
  the common keys, a kind of kinds.KINDS, that kind's keys and its own check."""
  if not isinstance(result, dict) or result.get("schema") != SCHEMA:
    found = result.get("schema") if isinstance(result, dict) else type(result).__name__
    raise ValueError(f"{where}: not an lcx result: schema={found!r}; expected {SCHEMA!r}")
  missing = [k for k in COMMON_KEYS if k not in result]
  if missing:
    raise ValueError(f"{where}: lcx result lacks {', '.join(missing)}")
  kind = kinds.KINDS.get(result["kind"]) if isinstance(result["kind"], str) else None
  if kind is None:
    raise errors.not_allowed(f"{where}: kind", result["kind"], tuple(kinds.KINDS))
  missing = [k for k in kind.keys if k not in result]
  if missing:
    raise ValueError(f"{where}: kind {kind.name!r} result lacks {', '.join(missing)}")
  kind.check(result, where)


def load(
  paths: str | os.PathLike | Sequence[str | os.PathLike], *, allow_empty: bool = False
) -> list[dict]:
  """Results from files, directories (every lcx result JSON below, recursively) and globs.

  A path that matches nothing, a named file that is not an lcx result, or (unless allow_empty)
  a directory without any is a ValueError naming the path. Directories skip other JSON (a run's
  config.json, checkpoint metadata) and replaced results (`HISTORY` folders, see `superseded`),
  but not a .json file that does not parse (a truncated result). Sorted by run, variant ("none"
  first), kind, then the rest.
  """
  if isinstance(paths, (str, os.PathLike)):
    paths = [paths]
  found: dict[str, dict] = {}  # real path -> result: a file named twice is read once
  for path in map(os.fspath, paths):
    if re.search(r"[*?[]", path):
      matches = sorted(glob.glob(path, recursive=True))
      if not matches:
        raise ValueError(f"{path}: the pattern matches no file")
    elif os.path.exists(path):
      matches = [path]
    else:
      raise ValueError(f"{path}: no such file or directory")
    for match in matches:
      if os.path.isdir(match):
        below = {os.path.realpath(f): r for f, r in _results_below(match)}
        if not below and not allow_empty:
          raise ValueError(f"{match}: no lcx result JSON (schema {SCHEMA!r}) below it")
        found.update(below)
      else:
        result = _read_json(match)
        check(result, match)
        found[os.path.realpath(match)] = result
  return [found[p] for p in sorted(found, key=lambda p: (_sort_key(found[p]), p))]


def corpus_warning(results: Sequence[dict]) -> str | None:
  """A warning when the results come from different corpora (their `corpus` fingerprints,
  e.g. stdlib built by two Python versions): their numbers do not compare. Results written
  before lcx recorded the corpus are left out."""
  runs: dict[str, set[str]] = {}
  for r in results:
    if r.get("corpus"):
      runs.setdefault(r["corpus"], set()).add(r["run"])
  if len(runs) < 2:
    return None
  listed = "; ".join(f"{c} ({', '.join(sorted(names))})" for c, names in sorted(runs.items()))
  return (
    "warning: the results compared come from different corpora, so their numbers do not "
    f"compare: {listed}"
  )


def checkpoint_warning(results: Sequence[dict]) -> str | None:
  """A warning when one run's results come from different checkpoints (another step, or a
  retrained one: its `checkpoint` fingerprint), e.g. a run retrained while the results of an
  evaluation `on` it were kept: its rows would compare old weights with new. Results written
  before lcx recorded the checkpoint are left out."""
  mixed = []
  for run in tables.groups([r for r in results if r.get("checkpoint")], _run_key):
    read = {}
    for r in run:
      read.setdefault(f"step {r['step']} {r['checkpoint']}", []).append(str(r["variant"]))
    if len(read) > 1:
      listed = "; ".join(f"{', '.join(v)} ({c})" for c, v in sorted(read.items()))
      mixed.append(f"{run[0]['run']}: {listed}")
  if not mixed:
    return None
  return (
    "warning: a run's results come from different checkpoints, so its rows do not compare "
    "(evaluate it again: lcx.main --mode=eval): " + " | ".join(mixed)
  )


def _run_key(r: dict) -> tuple:
  return str(r["run"]), r.get("workdir")


def _read_json(path: str):
  try:
    with open(path) as f:
      return json.load(f)
  except (UnicodeDecodeError, json.JSONDecodeError) as error:
    raise ValueError(f"{path}: not an lcx result: not JSON ({error})") from None


def superseded(paths: Sequence[str]) -> list[str]:
  """The replaced results (`HISTORY` folders) below the directories among `paths`: a directory
  gives the newest result of each name, and the report says what it left out."""
  out = []
  for pattern in paths:
    for path in glob.glob(pattern, recursive=True) if re.search(r"[*?[]", pattern) else [pattern]:
      for root, _, files in os.walk(path) if os.path.isdir(path) else ():
        if os.path.basename(root) == HISTORY and not os.path.samefile(root, path):
          out += [os.path.join(root, f) for f in sorted(files) if f.endswith(".json")]
  return sorted(set(out))


def _results_below(directory: str) -> Iterable[tuple[str, dict]]:
  """Every result below `directory`; other JSON is skipped, but a .json file that does not parse
  is a ValueError naming it: a result truncated by a kill or a full disk is no longer
  recognizable as one, and skipping it would drop a row from the tables without a word."""
  for root, dirs, files in os.walk(directory):
    dirs[:] = sorted(d for d in dirs if d not in (HISTORY, "checkpoints"))  # no Orbax files
    for name in sorted(files):
      if not name.endswith(".json"):
        continue
      path = os.path.join(root, name)
      try:
        result = _read_json(path)
      except ValueError as error:
        raise ValueError(
          f"{error}; a truncated result? Remove the file, or name the files to read"
        ) from None
      if isinstance(result, dict) and result.get("schema") == SCHEMA:
        check(result, path)
        yield path, result


def _sort_key(r: dict) -> tuple:
  return (
    str(r["run"]),
    r["variant"] != "none",
    str(r["variant"]),
    r["kind"],
    str(r.get("task", "")),
    tables.protocol_key(r),
    str(r.get("workdir", "")),
    int(r["step"]),
  )
