"""`./launch.sh provenance [PATH...] [--list]` (default: experiments/): which committed results
a reviewer can trace. A result is traceable when it names a clean commit (`source.commit` with
`source.dirty` false: that commit alone reproduces its code) and carries its outcomes per
document or example (`per_document` at every length, `per_example` in every task bucket), so
a claim can be judged on paired units. Passkey cells record counts only: their share is of the
commit alone. One row per results folder (experiments/NAME/results, experiments/NAME/ARG/results)
and kind, then the totals; `--list` names every result that falls short and why. No jax."""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import pathlib
import sys
from collections.abc import Iterable, Sequence

from absl import app, flags

from lcx import cli
from lcx.tools.report.load import HISTORY, SCHEMA

# kind -> whether a result carries its outcomes per unit (None: the kind records none).
OUTCOMES = {
  "lengths": lambda r: all(
    isinstance(e, dict) and bool(e.get("per_document")) for e in r["lengths"].values()
  ),
  "tasks": lambda r: all(
    isinstance(b, dict) and bool(b.get("per_example"))
    for b in r["buckets"].values()
    if not (isinstance(b, dict) and b.get("skipped"))  # a size the model cannot take
  ),
  "passkey": None,
}


@dataclasses.dataclass(frozen=True)
class Entry:
  path: str
  folder: str  # the results folder's parent: experiments/NAME or experiments/NAME/ARG
  kind: str
  clean: bool
  outcomes: bool | None  # None: the kind records no per-unit outcomes

  @property
  def traceable(self) -> bool:
    return self.clean and self.outcomes is not False

  @property
  def why(self) -> str:
    lacking = {"no clean commit": not self.clean, "no per-unit outcomes": self.outcomes is False}
    return ", ".join(w for w, short in lacking.items() if short)


def _folder(path: str) -> str:
  parts = os.path.normpath(path).split(os.sep)
  if "results" in parts:
    return os.sep.join(parts[: len(parts) - 1 - parts[::-1].index("results")]) or "."
  return os.path.dirname(path) or "."


def entry(path: str, result: dict) -> Entry | None:
  """The provenance of one result file; None for JSON that is not an lcx result of a known kind
  (a run's config.json, a sweep marker)."""
  if not isinstance(result, dict) or result.get("schema") != SCHEMA:
    return None
  kind = result.get("kind")
  if kind not in OUTCOMES:
    return None
  source = result.get("source") or {}
  clean = bool(source.get("commit")) and source.get("dirty") is False
  has = OUTCOMES[kind]
  return Entry(path, _folder(path), kind, clean, None if has is None else bool(has(result)))


def scan(paths: Iterable[str]) -> list[Entry]:
  """Every lcx result below `paths` (files or directories, recursively), results from an
  evaluation's history/ folders left out as the report leaves them. A path that does not exist
  is a ValueError naming it; a .json that does not parse is one too (a truncated result)."""
  found = []
  for path in paths:
    if not os.path.exists(path):
      raise ValueError(f"{path}: no such file or directory")
    files = [path] if os.path.isfile(path) else sorted(_json_below(path))
    for f in files:
      try:
        with open(f) as fh:
          result = json.load(fh)
      except json.JSONDecodeError as error:
        raise ValueError(f"{f}: not JSON ({error})") from error
      e = entry(f, result)
      if e is not None:
        found.append(e)
  return found


def _json_below(top: str) -> Iterable[str]:
  for root, dirs, files in os.walk(top):
    dirs[:] = sorted(d for d in dirs if d not in (HISTORY, ".git", ".venv"))
    yield from (os.path.join(root, f) for f in files if f.endswith(".json"))


@dataclasses.dataclass
class Count:
  results: int = 0
  clean: int = 0
  outcomes: int = 0  # with per-unit outcomes (kinds that record none: not counted)
  traceable: int = 0

  def add(self, e: Entry) -> None:
    self.results += 1
    self.clean += e.clean
    self.outcomes += bool(e.outcomes)
    self.traceable += e.traceable


def counts(entries: Sequence[Entry]) -> dict[tuple[str, str], Count]:
  """(folder, kind) -> Count, sorted; plus ("all", kind) totals."""
  table: dict[tuple[str, str], Count] = collections.defaultdict(Count)
  for e in entries:
    table[(e.folder, e.kind)].add(e)
    table[("all", e.kind)].add(e)
  rows = sorted(
    (k for k in table if k[0] != "all"), key=lambda k: (k[0], list(OUTCOMES).index(k[1]))
  )
  totals = sorted((k for k in table if k[0] == "all"), key=lambda k: list(OUTCOMES).index(k[1]))
  return {k: table[k] for k in rows + totals}


def format_table(table: dict[tuple[str, str], Count]) -> str:
  lines = [
    "| results folder | kind | results | clean commit | per-unit outcomes | both | share |",
    "|---|---|---:|---:|---:|---:|---:|",
  ]
  for (folder, kind), c in table.items():
    outcomes = "n/a" if OUTCOMES[kind] is None else str(c.outcomes)
    share = f"{c.traceable / c.results:.1%}" if c.results else "-"
    name = f"**{folder}**" if folder == "all" else folder
    lines.append(
      f"| {name} | {kind} | {c.results} | {c.clean} | {outcomes} | {c.traceable} | {share} |"
    )
  return "\n".join(lines)


def _experiments() -> str:
  """experiments/ where the command runs, else the checkout's (as lcx finds configs)."""
  here = "experiments"
  return here if os.path.isdir(here) else str(pathlib.Path(__file__).resolve().parents[3] / here)


def main(argv):
  paths = argv[1:] or [_experiments()]
  try:
    entries = scan(paths)
  except ValueError as error:
    cli.fail(str(error))
  if not entries:
    cli.fail(f"no lcx result below {', '.join(paths)}")
  print(format_table(counts(entries)))
  if flags.FLAGS.list:
    short = [e for e in entries if not e.traceable]
    print(f"\n{len(short)} of {len(entries)} results fall short:")
    for e in short:
      print(f"  {e.path}: {e.why}")
  sys.stdout.flush()


if __name__ == "__main__":
  flags.DEFINE_boolean("list", False, "Also list every result that falls short, and why.")
  app.run(main, flags_parser=cli.parse_flags)
