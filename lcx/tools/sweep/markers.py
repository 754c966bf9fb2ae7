"""What a run recorded and what changed since: RUN/sweep_started.json (each launch) and
RUN/sweep_done.json (exit status 0) hold its command, resolved config and the checkpoint it read;
a run is done while all three are unchanged, and a trained run whose settings changed is refused
(`select`)."""

from __future__ import annotations

import hashlib
import json
import os
import warnings

from absl import flags

from lcx import cli, files
from lcx.tools.sweep import plan
from lcx.tools.sweep.plan import TRAINS, Sweep, _shown, shards

MARKER = "sweep_done.json"
STARTED = "sweep_started.json"  # the command of the last launch, finished or not


def done(sweep: Sweep, run: str) -> bool:
  """Finished earlier (the marker is written after exit status 0) and nothing it recorded has
  changed since: its command, its resolved config, the checkpoint it read (`changes`)."""
  return changed_since_done(sweep, run) == []


def changed_since_done(sweep: Sweep, run: str) -> list[str] | None:
  """What changed since `run` was marked done (`changes`); None when it is not marked."""
  marker = os.path.join(sweep.workdir(run), MARKER)
  recorded = _read_record(marker)
  return None if recorded is None else changes(sweep, run, recorded, os.path.getmtime(marker))


def _read_record(path: str) -> dict | None:
  """A marker's or launch record's contents, None if it is missing or unreadable."""
  recorded = _read_json_dict(path)
  return recorded if "command" in recorded else None


def _recorded(sweep: Sweep, run: str) -> dict | None:
  """What last ran `run`: its marker, else the record of its launch, if any."""
  for name in (MARKER, STARTED):
    recorded = _read_record(os.path.join(sweep.workdir(run), name))
    if recorded is not None:
      return recorded
  return None


def resolved_config(sweep: Sweep, run: str) -> dict | None:
  """The config the run's command gives lcx, {dotted field: value} as JSON holds it: its config
  file and overrides parsed as lcx.main parses them (a run `on` another: that run's config.json
  and the overrides). None when it does not load (the run's own error will say why) or the run
  it is `on` has no config.json yet."""
  from ml_collections import config_dict, config_flags

  spec = sweep.runs[run]
  if spec.config:
    path = str(plan.ROOT / spec.config)
  elif os.path.exists(os.path.join(sweep.target(run), "config.json")):
    path = f"{cli.RUN_CONFIG}:{os.path.abspath(sweep.target(run))}"
  else:
    return None
  argv = ["sweep", f"--config={path}"]
  argv += [a for a in sweep.command(run) if a.startswith("--config.")]
  values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "", values, lock_config=True, sys_argv=argv)
  cli.select_sections_on_parse(argv, values)
  try:
    with warnings.catch_warnings():  # ml_collections loads the file with load_module
      warnings.simplefilter("ignore", DeprecationWarning)
      values(argv)
    fields = {
      field: value.to_dict() if isinstance(value, config_dict.ConfigDict) else value
      for field, value in cli.leaves(values.config)
    }
  except Exception:  # the user's config file may raise anything; the run reports it
    return None
  return json.loads(json.dumps(fields, default=str))


def _digest(fields: dict) -> str:
  return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def config_difference(old: dict, new: dict, most: int = 6) -> str:
  """`train.lr 0.001 -> 0.002, model.num_layers 2 -> 4`: the fields whose values differ (at most
  `most` named, then how many more)."""
  differ = [
    f"{field} {old.get(field, '(absent)')!r} -> {new.get(field, '(absent)')!r}"
    for field in sorted(set(old) | set(new))
    if old.get(field, "(absent)") != new.get(field, "(absent)")
  ]
  more = f" and {len(differ) - most} more" if len(differ) > most else ""
  return ", ".join(differ[:most]) + more


def config_change(sweep: Sweep, run: str, recorded: dict) -> str | None:
  """How the run's resolved config differs from the one `recorded` (`config_difference`); ""
  when it no longer loads; None when it is the same, or `recorded` predates config records."""
  old = recorded.get("config")
  if not isinstance(old, dict) or "digest" not in old:
    return None
  new = resolved_config(sweep, run)
  if new is None:
    return ""
  return None if _digest(new) == old["digest"] else config_difference(old.get("fields") or {}, new)


def _steps(workdir: str) -> list[int]:
  """The workdir's complete checkpoint steps, ascending (Orbax renames a save's temporary folder
  to its step when it completes)."""
  directory = os.path.join(workdir, "checkpoints")
  if not os.path.isdir(directory):
    return []
  return sorted(int(n) for n in os.listdir(directory) if n.isdigit())


def _has_checkpoint(workdir: str) -> bool:
  return bool(_steps(workdir))


def checkpoint_id(workdir: str, step: int | None = None) -> str | None:
  """`step STEP FINGERPRINT` of checkpoint `step` in `workdir` (None: the latest, the one a run
  `on` it reads), None without it: the fingerprint its results record (`checkpoint.fingerprint`,
  a unique id written at save time), so a retrained checkpoint is told from the one it replaced."""
  steps = _steps(workdir)
  step = steps[-1] if steps and step is None else step
  if step not in steps:
    return None
  from lcx.run import checkpoint  # jax is imported, never started: the runs hold the devices

  meta_path = os.path.join(workdir, "checkpoints", str(step), "meta", "metadata")
  meta = _read_json_dict(meta_path)  # Orbax's JSON item; unreadable: its files' digest
  return f"step {step} {checkpoint.fingerprint(workdir, step, meta)}"


def source(sweep: Sweep, run: str) -> tuple[str, str, int | None] | None:
  """The checkpoint `run` reads as (whose: a run of the sweep or a path, its workdir, its step,
  None for the latest): that of the run it is `on`, or a training run's train.init_from (where
  a fine-tune starts); None when it reads none."""
  spec = sweep.runs[run]
  if spec.on:
    return f"{sweep.name}/{spec.on}", sweep.target(run), None
  fields = resolved_config(sweep, run) if spec.mode in TRAINS else None
  if not (fields or {}).get("train.init_from"):
    return None
  from lcx.run import prepare  # its DIR[@STEP]

  try:
    path, step = prepare.parse_init_from(fields["train.init_from"])
  except ValueError:  # the run refuses it, naming the field
    return None
  workdir = os.path.abspath(os.path.join(plan.ROOT, path))  # relative to the run's cwd
  runs = [r for r in sweep.runs if os.path.abspath(sweep.workdir(r)) == workdir]
  return (f"{sweep.name}/{runs[0]}" if runs else _shown(workdir)), workdir, step


def source_change(sweep: Sweep, run: str, recorded: dict) -> str | None:
  """`the checkpoint of toy/a it read changed (step 10 F1 -> step 10 F2)` when the checkpoint
  `run` reads (`source`) is not the one `recorded`; None when it is, or nothing was recorded."""
  read = source(sweep, run)
  if read is None or "checkpoint" not in recorded:
    return None
  now = checkpoint_id(read[1], read[2])
  if now == recorded["checkpoint"]:
    return None
  return (
    f"the checkpoint of {read[0]} it read changed ({recorded['checkpoint'] or 'none'} -> "
    f"{now or 'none'})"
  )


def _read_json_dict(path: str) -> dict:
  try:
    with open(path) as f:
      value = json.load(f)
  except (OSError, ValueError):
    return {}
  return value if isinstance(value, dict) else {}


def record(sweep: Sweep, run: str) -> dict:
  """What a run's launch and its marker record: its command, its resolved config (a digest, and
  the fields, to name what changed), and for a run `on` another the checkpoint it reads."""
  out: dict = {"command": sweep.command(run)}
  fields = resolved_config(sweep, run)
  if fields is not None:
    out["config"] = {"digest": _digest(fields), "fields": fields}
  read = source(sweep, run)
  if read is not None:
    out["checkpoint"] = checkpoint_id(read[1], read[2])
  return out


def changes(sweep: Sweep, run: str, recorded: dict, written: float) -> list[str]:
  """Why `recorded` (written at time `written`) no longer describes what `run` would do now,
  each reason a phrase; empty when it still does. A record from before lcx recorded the config
  or the checkpoint is compared on what it holds (for a run `on` another, a checkpoint saved
  after it counts)."""
  out = []
  if recorded.get("command") != sweep.command(run):
    out.append("its command changed")
  config = config_change(sweep, run, recorded)
  if config is not None:
    out.append(f"its config changed: {config}" if config else "its config no longer loads")
  read = source_change(sweep, run, recorded)
  if read:
    out.append(read)
  on = sweep.runs[run].on
  if on and "checkpoint" not in recorded:  # a marker from before the records
    now = checkpoint_id(sweep.target(run))
    if now and _saved_after(sweep.target(run), written):
      out.append(f"{sweep.name}/{on} saved its checkpoint ({now}) after it ran")
  return out


def _saved_after(workdir: str, written: float) -> bool:
  """Whether the latest checkpoint in `workdir` was saved after time `written`."""
  path = os.path.join(workdir, "checkpoints", str(_steps(workdir)[-1]))
  return os.path.getmtime(path) > written


def check_unchanged(sweep: Sweep, chosen: list[str]) -> None:
  """ValueError naming the difference for a training run whose command, resolved config or
  train.init_from checkpoint changed while its workdir holds checkpoints: resuming would train
  (or evaluate) old weights under the new settings, and its config.json would claim them."""
  for run in chosen:
    if sweep.runs[run].mode not in TRAINS or sweep.runs[run].on:
      continue
    recorded = _recorded(sweep, run)
    if recorded is None or not _has_checkpoint(sweep.workdir(run)):
      continue
    old, new = recorded["command"], sweep.command(run)
    if old != new:
      removed = [a for a in old if a not in new] or ["(nothing)"]
      added = [a for a in new if a not in old] or ["(nothing)"]
      what = f"{' '.join(removed)} became {' '.join(added)}"
    elif config := config_change(sweep, run, recorded):  # "": no longer loads, the run says why
      what = f"its config's {config}"
    else:
      what = source_change(sweep, run, recorded)  # a fine-tune's start retrained
      if not what:
        continue
    raise ValueError(
      f"run {sweep.name}/{run} changed since it trained: {what}, and "
      f"{_shown(sweep.workdir(run))} holds the old settings' checkpoints; remove that directory "
      "to train it again, or restore the old settings"
    )


def select(sweep: Sweep, only: list[str], shard: tuple[int, int]) -> list[str]:
  """The runs this invocation handles: this shard's, filtered by --only, in dependency order.
  A selected run's needs must be selected too or already done."""
  unknown = [name for name in only if name not in sweep.runs]
  if unknown:
    raise ValueError(
      f"--only={','.join(only)}: unknown run(s) {', '.join(unknown)}; runs: {', '.join(sweep.runs)}"
    )
  chosen = shards(sweep.runs, shard[1])[shard[0]]
  chosen = [name for name in chosen if not only or name in only]
  for name in chosen:
    for need in sweep.runs[name].needs:
      if need not in chosen and not done(sweep, need):
        raise ValueError(
          f"run {name} needs {need}, which is neither selected nor done; add it to --only"
        )
  check_unchanged(sweep, chosen)
  return chosen


def _write_json(path: str, value: dict) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  files.write_json(path, value, indent=2)
