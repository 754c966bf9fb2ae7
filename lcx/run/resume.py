"""What a resumed run may change, one table for every config field, and the record of what did.

A run resumes its checkpoint with the settings it trained with, so that its config.json says
what the weights were trained with. Each field has one of three kinds (`KINDS`):

- FIXED: what the weights and the data mean (the seed, the corpus, tokenizer, rows and splits,
  the model, the optimizer's own settings, sampled positions, the starting point). A change is
  refused, every changed field named with its old and new value, before anything is built.
- SCHEDULE: how long and how fast the run goes on (train.steps, the learning-rate schedule).
  A change applies from the resumed step when `train.allow_changes` names the field, and is
  recorded, with that step and the config it replaced, in WORKDIR/config_history.jsonl.
- FREE: what never touches the weights (evaluation, logging, checkpoint cadence, trackers, the
  attention kernel's implementation, the mesh): it changes silently.

The table itself (`KINDS`) lives in lcx/config/changes.py, below lcx.run: the config checks read
its SCHEDULE fields for `train.allow_changes` before jax loads.
"""

from __future__ import annotations

import datetime
import json
import os
from typing import Any

from lcx import errors, files
from lcx.config import defaults
from lcx.config.changes import FIXED, SCHEDULE, kind

# Sections picked by their `name`: a new name explains every other field of the section.
NAMED = ("model.position", *defaults.SECTIONS)
HISTORY = "config_history.jsonl"  # in the workdir: every accepted change, oldest first


def _by_section_name(differences: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any]]:
  """`differences` without the fields of a NAMED section whose name changed (the name says it)."""
  renamed = [s for s in NAMED if any(field == f"{s}.name" for field, _, _ in differences)]
  return [
    d
    for d in differences
    if not any(d[0].startswith(f"{s}.") and d[0] != f"{s}.name" for s in renamed)
  ]


def _listed(changes: list[tuple[str, Any, Any]]) -> str:
  return ", ".join(f"{field}: {old!r} -> {new!r}" for field, new, old in changes)


def check(differences, allowed: list[str], where: str, step: int) -> dict | None:
  """The history entry of a resume from checkpoint `step` whose config differs from the one it
  was trained with by `differences` ((field, new value, trained value), as
  `lcx.config.variants.differences` gives them), or None when no SCHEDULE field changed.

  ValueError (one line; `where` says which checkpoint) naming every FIXED field changed and
  every SCHEDULE field changed that `allowed` (train.allow_changes' names) lacks; or naming
  train.steps when it falls below `step`, which is already trained.
  """
  differences = _by_section_name(list(differences))
  steps = [new for field, new, _ in differences if field == "train.steps"]
  if steps and steps[0] < step:
    raise errors.not_allowed(
      "train.steps",
      steps[0],
      f">= {step}, as {where}; train.resume_step=N resumes from an earlier one",
    )
  fixed = [d for d in differences if kind(d[0]) == FIXED]
  unasked = [d for d in differences if kind(d[0]) == SCHEDULE and d[0] not in allowed]
  problems = []
  if fixed:
    problems.append(
      f"{_listed(fixed)} cannot change (they set what the weights and the data mean): resume "
      "with the run's own values, or train in another --workdir"
    )
  if unasked:
    names = ",".join(dict.fromkeys([*allowed, *(field for field, _, _ in unasked)]))
    problems.append(
      f"{_listed(unasked)} change the schedule: to apply them from step {step}, resume with "
      f"--config.train.allow_changes={names}"
    )
  if problems:
    raise ValueError(f"{where} trained with other settings: {'; '.join(problems)}")
  accepted = [d for d in differences if kind(d[0]) == SCHEDULE]
  if not accepted:
    return None
  return {
    "step": step,
    "changes": {field: {"from": old, "to": new} for field, new, old in accepted},
  }


def describe(entry: dict) -> str:
  """One line for the log: what changed and from which step."""
  changes = ", ".join(f"{f}: {c['from']!r} -> {c['to']!r}" for f, c in entry["changes"].items())
  return f"from step {entry['step']}: {changes}"


def record(workdir: str, entry: dict) -> bool:
  """Appends `entry` (`check`'s, with `before`: the config it replaced) and the time to
  WORKDIR/config_history.jsonl, rewritten whole through a temporary file and a rename (never
  torn, earlier lines kept verbatim); unless the last line records the same changes at the same
  step (the same command again, its run killed before a checkpoint). Whether it wrote."""
  path = os.path.join(workdir, HISTORY)
  lines = []
  if os.path.exists(path):
    with open(path) as f:
      lines = f.read().splitlines(keepends=True)
  if lines and _same(lines[-1], entry):
    return False
  now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
  line = json.dumps({**entry, "time": now}, sort_keys=True, default=list)
  if lines and not lines[-1].endswith("\n"):
    lines[-1] += "\n"
  files.write_atomic(path, "".join([*lines, line + "\n"]))
  return True


def _same(line: str, entry: dict) -> bool:
  """Whether a history line records `entry`'s changes at its step."""
  try:
    last = json.loads(line)
  except ValueError:
    return False
  keys = ("step", "changes")
  plain = json.loads(json.dumps({k: entry[k] for k in keys}, default=list))
  return isinstance(last, dict) and {k: last.get(k) for k in keys} == plain


def history(workdir: str) -> list[dict]:
  """The entries of WORKDIR/config_history.jsonl, oldest first ([] without one)."""
  path = os.path.join(workdir, HISTORY)
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]
