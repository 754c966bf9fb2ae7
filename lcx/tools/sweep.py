"""A named set of runs, trained and evaluated in dependency order, then one report.

    python -m lcx.tools.sweep experiments/NAME[:ARG] [--dry_run] [--only=RUN,...] [--shard=i/n]
                        [--runs_dir=runs] [--force_eval] [--merge_shards] [--jobs=N]

experiments/NAME/sweep.py defines `get_runs(arg) -> {name: Run}` (arg "" for the CPU-sized
sweep, e.g. "full" for the GPU-sized one). Each run is `python -m lcx.main` in a subprocess with
workdir RUNS_DIR/NAME/RUN (RUNS_DIR/NAME_ARG/RUN with an ARG, so the two sizes never share a
checkpoint), in dependency order. A run that exits 0 gets RUN/sweep_done.json holding its
command, a digest of its resolved config (the ConfigDict its command gives lcx, the fields too)
and, for a run `on` another or a fine-tune (train.init_from), the step and fingerprint of the
checkpoint it read; later invocations skip it while all three are unchanged, run it again
saying what changed otherwise, and re-run an interrupted one (lcx.main resumes from its
checkpoint). A training run whose command, resolved config or starting checkpoint changed
while its workdir holds checkpoints is refused, naming the difference (RUN/sweep_started.json
records each launch): those weights belong to the old settings.
Afterwards every RUNS_DIR/.../RUN/eval/*.json is copied to experiments/NAME/results/RUN/
(experiments/NAME/ARG/results/RUN/ with an ARG; never checkpoints) and lcx.tools.report writes
report.md, results.csv and the plots next to results/. A shard of n > 1 (`--shard=i/n`, e.g.
one lent GPU's share) instead packs its runs' results into one archive,
OUT/shards/shard-i-of-n.tar.gz (at most 16 MiB, to bring back and commit), and leaves results/
and report.md alone; `--merge_shards` unpacks every archive there and writes the report once.
A shard stopped early (a signal, say a lent machine's deadline, or a failed run) still packs the
runs it finished, into shard-i-of-n-partial.tar.gz, so what a lent window trained comes back.
`--jobs=N` runs up to N at once, each as soon as its needs are done: a seed's fine-tunes beside
each other once its base has trained (a small model leaves most of a GPU, or a second core, idle).
"""

from __future__ import annotations

import ctypes
import dataclasses
import datetime
import glob
import gzip
import hashlib
import json
import os
import pathlib
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import types
import warnings

from absl import flags

from lcx import cli, errors
from lcx.run import progress
from lcx.tools import report

ROOT = pathlib.Path(__file__).resolve().parents[2]  # config paths are relative to it
MODES = ("train", "eval", "train_and_eval", "longrope")
MARKER = "sweep_done.json"
STARTED = "sweep_started.json"  # the command of the last launch, finished or not
TRAINS = ("train", "train_and_eval")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclasses.dataclass(frozen=True)
class Run:
  """One run of a sweep.

  config: a --config spec, e.g. "configs/base.py:pos=alibi,size=small" (relative to the repo
    root). overrides: dotted config field -> value, each passed as --config.FIELD=VALUE; `{runs}`
    in a string value becomes this sweep's runs directory (init_from="{runs}/rope"). needs: runs
    that must finish first (they also stay on this run's shard). mode: an lcx.main --mode, or
    "longrope" (`python -m lcx.tools.longrope`, the LongRoPE search). on: another run (one of needs)
    whose checkpoint this run works on, in that run's workdir: an evaluation with other settings
    or the LongRoPE search; config "" then means that run's own config.json. Its results are
    collected with that run's.
  """

  config: str
  overrides: dict = dataclasses.field(default_factory=dict)
  needs: tuple[str, ...] = ()
  mode: str = "train_and_eval"
  on: str = ""


@dataclasses.dataclass(frozen=True)
class Sweep:
  """A loaded sweep: its runs in dependency order and where everything goes."""

  name: str
  arg: str
  runs: dict[str, Run]  # dependency order
  runs_dir: str  # RUNS_DIR/NAME[_ARG]: the runs' workdirs are below it
  out_dir: str  # experiments/NAME[/ARG]: results/, report.md, results.csv, plots

  def workdir(self, run: str) -> str:
    """The run's own directory (its checkpoints, or only its marker for a run `on` another)."""
    return os.path.join(self.runs_dir, run)

  def target(self, run: str) -> str:
    """The workdir the run's command works in: its own, or that of the run it is `on`."""
    return self.workdir(self.runs[run].on or run)

  def command(self, run: str) -> list[str]:
    """The argument list (after `python`) that runs `run`."""
    spec = self.runs[run]
    head = (
      ["-m", "lcx.tools.longrope"]
      if spec.mode == "longrope"
      else ["-m", "lcx.main", f"--mode={spec.mode}"]
    )
    config = [f"--config={spec.config}"] if spec.config else []
    return (
      head
      + config
      + [f"--workdir={_shown(self.target(run))}"]
      + [f"--config.{field}={self._value(value)}" for field, value in spec.overrides.items()]
    )

  def _value(self, value) -> str:
    if isinstance(value, bool):
      return str(value).lower()
    if isinstance(value, (tuple, list)):
      return "(" + ",".join(self._value(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return str(value).replace("{runs}", _shown(self.runs_dir))


def _shown(path: str) -> str:
  """A path as the subprocess (cwd: the repo root) sees it: relative inside the repo, so the
  command and its marker read `runs/NAME/RUN` and survive moving the checkout."""
  path = os.path.abspath(path)
  relative = os.path.relpath(path, ROOT)
  return path if relative == ".." or relative.startswith(".." + os.sep) else relative


def _check_runs(runs, where: str) -> None:
  if not isinstance(runs, dict) or not runs:
    raise ValueError(
      f"{where}: get_runs must return a non-empty dict {{name: Run}}, got {type(runs).__name__}"
    )
  for name, run in runs.items():
    if not isinstance(name, str) or not NAME.match(name):
      raise ValueError(
        f"{where}: run name {name!r} must match {NAME.pattern} (it is a directory name)"
      )
    if not isinstance(run, Run):
      raise ValueError(f"{where}: run {name!r} is a {type(run).__name__}; use lcx.tools.sweep.Run")
    if run.mode not in MODES:
      raise errors.not_allowed(f"{where}: run {name!r}: mode", run.mode, MODES)
    if not isinstance(run.overrides, dict) or not all(isinstance(k, str) for k in run.overrides):
      raise ValueError(f"{where}: run {name!r}: overrides must be a dict of dotted field names")
    if isinstance(run.needs, str) or not all(isinstance(n, str) for n in run.needs):
      raise ValueError(f"{where}: run {name!r}: needs must be a tuple of run names")
    unknown = [n for n in run.needs if n not in runs]
    if unknown:
      raise ValueError(
        f"{where}: run {name!r} needs unknown run(s) {', '.join(unknown)}; runs: {', '.join(runs)}"
      )
    if run.on and run.on not in run.needs:
      raise ValueError(f"{where}: run {name!r}: on={run.on!r} must be one of its needs")
    if not run.on and (run.mode == "longrope" or not run.config):
      raise ValueError(
        f"{where}: run {name!r}: mode={run.mode!r} without a config needs "
        "on=<the run whose checkpoint it uses>"
      )
    config_file = run.config.split(":", 1)[0]
    if run.config and not (ROOT / config_file).is_file():
      raise ValueError(
        f"{where}: run {name!r}: config file {config_file} not found (config "
        f"paths are relative to the repo root {ROOT})"
      )


def dependency_order(runs: dict[str, Run]) -> list[str]:
  """Runs with each after the runs it needs, otherwise in get_runs order; a cycle is an error."""
  order, state = [], {}

  def visit(name, chain):
    if state.get(name) == "done":
      return
    if state.get(name) == "visiting":
      raise ValueError(f"runs need each other in a cycle: {' -> '.join(chain + [name])}")
    state[name] = "visiting"
    for need in runs[name].needs:
      visit(need, chain + [name])
    state[name] = "done"
    order.append(name)

  for name in runs:
    visit(name, [])
  return order


def shards(runs: dict[str, Run], count: int) -> list[list[str]]:
  """Runs split into `count` shards: runs connected by `needs` form a group that stays on one
  shard, and groups go round-robin in dependency order (group k on shard k mod count)."""
  parent = {name: name for name in runs}

  def root(name):
    while parent[name] != name:
      name = parent[name]
    return name

  for name, run in runs.items():
    for need in run.needs:
      parent[root(name)] = root(need)
  groups: dict[str, int] = {}
  out = [[] for _ in range(count)]
  for name in dependency_order(runs):
    group = groups.setdefault(root(name), len(groups))
    out[group % count].append(name)
  return out


def parse_shard(text: str) -> tuple[int, int]:
  match = re.fullmatch(r"(\d+)/(\d+)", text)
  if not match or not int(match.group(1)) < int(match.group(2)):
    raise errors.not_allowed("--shard", text, "i/n with 0 <= i < n, e.g. 0/2")
  return int(match.group(1)), int(match.group(2))


def load(target: str, runs_dir: str = "runs") -> Sweep:
  """experiments/NAME[:ARG] -> its Sweep (get_runs(ARG), checked, in dependency order)."""
  directory, arg = target, ""
  head, sep, tail = target.rpartition(":")
  if sep and "/" not in tail:
    directory, arg = head, tail
  if arg and not re.fullmatch(r"[A-Za-z0-9_]+", arg):
    raise ValueError(f"{target}: the argument after ':' must be a word, e.g. full")
  directory = os.path.normpath(cli.shipped(directory))
  if not os.path.isdir(directory):
    raise ValueError(f"{target}: no experiment directory {directory}")
  path = os.path.join(directory, "sweep.py")
  if not os.path.isfile(path):
    raise ValueError(f"{target}: no {path} (it defines get_runs(arg) -> {{name: Run}})")
  name = os.path.basename(os.path.abspath(directory))
  if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # a sweep.py may import configs
  module = types.ModuleType(f"lcx_sweep_{name}")
  module.__file__ = path
  # In sys.modules while it runs, as an import would put it: a dataclass reads its module there.
  sys.modules[module.__name__] = module
  try:  # compiled from the file as it is now: no .pyc, which an edit within a second can outlive
    exec(compile(pathlib.Path(path).read_text(), path, "exec"), module.__dict__)
  except SyntaxError as error:  # the user's file: where, not a traceback through importlib
    raise ValueError(f"{path}:{error.lineno}: {error.msg}: {(error.text or '').strip()}") from None
  if not callable(getattr(module, "get_runs", None)):
    raise ValueError(f"{path} defines no get_runs(arg) -> {{name: Run}}")
  runs = module.get_runs(arg)
  _check_runs(runs, path)
  order = dependency_order(runs)
  suffix = f"_{arg}" if arg else ""
  return Sweep(
    name,
    arg,
    {r: runs[r] for r in order},
    os.path.join(runs_dir, name + suffix),
    os.path.join(directory, arg) if arg else directory,
  )


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
    path = str(ROOT / spec.config)
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
  workdir = os.path.abspath(os.path.join(ROOT, path))  # relative to the run's cwd
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


class _Signals:
  """SIGTERM while runs train is passed on to them (lcx.main saves a checkpoint and exits 0) and
  they are not marked done; SIGINT (Ctrl-C reaches the whole process group) stops the sweep
  after the runs going. Either way the sweep then exits 128 + the signal number."""

  def __init__(self):
    self.children, self.received = set(), None
    self.ended_before = set()  # children that had exited (0 means finished) when SIGTERM came

  def __enter__(self):
    self.previous = {s: signal.signal(s, self._handle) for s in (signal.SIGTERM, signal.SIGINT)}
    return self

  def __exit__(self, *exc):
    for s, handler in self.previous.items():
      signal.signal(s, handler)

  def _handle(self, signum, frame):
    del frame
    self.received = signum
    for child in list(self.children) if signum == signal.SIGTERM else ():
      if child.poll() is None:
        child.send_signal(signum)  # lcx.main's handler only sets a flag: twice is harmless
      else:
        self.ended_before.add(child)


def to_run(sweep: Sweep, run: str, force_eval: bool) -> list[str] | None:
  """The command this call runs for `run`: None when it is done (skipped); with force_eval an
  evaluating run gets --force, and a done one is evaluated again (--mode=eval)."""
  command = sweep.command(run)
  if not (force_eval and sweep.runs[run].mode not in ("train", "longrope")):
    return None if done(sweep, run) else command
  if done(sweep, run):
    command = ["--mode=eval" if c.startswith("--mode=") else c for c in command]
  return command + ["--force"]


def stopped_line(sweep: Sweep, run: str, signum: int) -> str:
  """What the sweep says when a signal stops it during `run`: whether the run is marked done
  (it may finish on its own while the signal reached the sweep alone, `kill PID`), and how to
  go on."""
  state = "it finished and is marked done" if done(sweep, run) else "it is not marked done"
  return (
    f"[sweep] {signal.Signals(signum).name} during {sweep.name}/{run}: stopped; {state}, run "
    "the same command to resume"
  )


def skipped_line(sweep: Sweep, run: str) -> str:
  return f"done earlier ({os.path.join(_shown(sweep.workdir(run)), MARKER)}): skipped"


def again_line(sweep: Sweep, run: str, why: list[str], doing: str) -> str:
  """What the sweep says of a run it marked done that runs again: what changed since."""
  return f"[sweep] {sweep.name}/{run}: {'; '.join(why)} since it finished: {doing} again"


def start_line(head: str, done: int, total: int, durations: list[float]) -> str:
  """A run's first line; once a run has finished in this call, with the runs done/total and an
  ETA from the finished runs' mean duration (runs skipped as done earlier cost nothing)."""
  if not durations:
    return head
  return f"{head} runs {progress.progress_text(done, total, sum(durations) / len(durations))}"


def launch(
  sweep: Sweep, run: str, command: list[str], signals: _Signals, env: dict | None = None, **popen
):
  """Starts `run` (its launch recorded, a stale marker removed) as a child `signals` knows;
  `env`: defaults for variables the environment does not set."""
  why = changed_since_done(sweep, run)
  if why:
    print(again_line(sweep, run, why, "running"), flush=True)
    os.remove(os.path.join(sweep.workdir(run), MARKER))
  _write_json(os.path.join(sweep.workdir(run), STARTED), record(sweep, run))
  print("$ python " + shlex.join(command), flush=True)
  child = subprocess.Popen(
    [sys.executable, *command],
    cwd=ROOT,
    env={**(env or {}), **os.environ, "PYTHONUNBUFFERED": "1"},
    preexec_fn=_dies_with(os.getpid()),
    **popen,
  )
  signals.children.add(child)
  if signals.received == signal.SIGTERM and child.poll() is None:  # it came during the start
    child.send_signal(signal.SIGTERM)
  return child


def finish(sweep: Sweep, run: str, child, signals: _Signals) -> int:
  """The exit status of `run`'s child; 0 (not after SIGTERM, where 0 means "saved") marks it
  done with its command."""
  status = child.wait()
  signals.children.discard(child)
  if status == 0 and (signals.received != signal.SIGTERM or child in signals.ended_before):
    # the launch's record says what ran (a config edited meanwhile did not); made now if lost
    launched = _read_record(os.path.join(sweep.workdir(run), STARTED))
    if launched is None or launched["command"] != sweep.command(run):
      launched = record(sweep, run)
    finished = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    _write_json(os.path.join(sweep.workdir(run), MARKER), {**launched, "finished": finished})
  return status


def run_one(sweep: Sweep, run: str, command: list[str], signals: _Signals) -> int:
  return finish(sweep, run, launch(sweep, run, command, signals), signals)


# A child's output through a pipe, read as text whatever bytes it holds: a thread that stopped
# reading would leave the child blocked on a full pipe.
PIPED = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
# Side by side, each run allocates GPU memory as it needs it (JAX's default takes 75% at once).
SIDE_BY_SIDE_ENV = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def _prefixed(stream, prefix: str):
  """A thread copying a child's output to ours line by line, each line led by its run's name;
  it reads to the end even when writing fails."""

  def copy():
    for line in stream:
      try:
        sys.stdout.write(prefix + line if line.endswith("\n") else prefix + line + "\n")
        sys.stdout.flush()
      except (OSError, ValueError):
        pass

  thread = threading.Thread(target=copy, daemon=True)
  thread.start()
  return thread


def ready(sweep: Sweep, waiting: list[str], going) -> list[str]:
  """The waiting runs `--jobs` may start now, in order: none of their needs waiting or going,
  and no run going in their workdir."""
  return [
    r
    for r in waiting
    if not any(n in waiting or n in going for n in sweep.runs[r].needs)
    and all(sweep.target(g) != sweep.target(r) for g in going)
  ]


def run_side_by_side(
  sweep: Sweep, chosen: list[str], jobs: int, force_eval: bool, signals: _Signals
) -> tuple[list[tuple[str, int]], list[str]]:
  """Runs `chosen` with up to `jobs` at once (`--jobs`), each as soon as its needs are done and
  no other run works in its workdir (runs `on` the same base take turns); output lines carry
  their run's name. Stops starting runs after a failure or a signal and waits for those going.
  Returns (failed runs with their exit status, runs that were going when a signal came)."""
  waiting, going, failed, interrupted = list(chosen), {}, [], []
  while waiting or going:
    while signals.received is None and not failed and len(going) < jobs:
      startable = ready(sweep, waiting, going)
      if not startable:
        break
      run = startable[0]
      waiting.remove(run)
      head = f"[sweep {sweep.name}/{run} {len(chosen) - len(waiting)}/{len(chosen)}]"
      command = to_run(sweep, run, force_eval)
      if command is None:
        print(f"{head} {skipped_line(sweep, run)}", flush=True)
        continue
      print(f"{head} starting beside {len(going)} other runs", flush=True)
      child = launch(sweep, run, command, signals, env=SIDE_BY_SIDE_ENV, **PIPED)
      going[run] = (child, _prefixed(child.stdout, f"[{run}] "), time.perf_counter())
    if not going:
      if waiting and not failed and signals.received is None:  # select() rules this out
        raise RuntimeError(f"runs {', '.join(waiting)} can never start: their needs are not run")
      break
    time.sleep(0.2)
    for run, (child, thread, started) in list(going.items()):
      if child.poll() is None:
        continue
      thread.join()
      del going[run]
      status = finish(sweep, run, child, signals)
      if signals.received is not None:
        interrupted.append(run)
      elif status != 0:
        failed.append((run, status))
      else:
        seconds = time.perf_counter() - started
        print(f"[sweep {sweep.name}/{run}] finished in {seconds:.0f} s", flush=True)
  return failed, interrupted


def _pack_finished(sweep: Sweep, shard: tuple[int, int], chosen: list[str]) -> None:
  """A shard stopping early packs the runs it finished (nothing to pack: nothing written)."""
  finished = [r for r in chosen if done(sweep, r)]
  if shard[1] > 1 and finished:
    try:
      print(pack_shard(sweep, shard, finished, partial=True), file=sys.stderr, flush=True)
    except ValueError as error:
      print(f"[sweep] {error}", file=sys.stderr, flush=True)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _dies_with(parent: int):
  """A run's preexec_fn: the kernel sends it SIGTERM (lcx.main saves a checkpoint and exits)
  when the sweep dies, even by SIGKILL, so no training outlives its sweep and overlaps a
  re-run. Linux only; elsewhere a no-op. Until exec the child still holds the sweep's Python
  SIGTERM handler, which would take a SIGTERM arriving then and lose it at exec (the run then
  trained on, orphaned): SIGTERM goes back to the default, death, first."""

  def arm():
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
      ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
    except (OSError, AttributeError):
      return
    if os.getppid() != parent:  # the sweep died before prctl took effect
      os.kill(os.getpid(), signal.SIGTERM)

  return arm


def _write_json(path: str, value: dict) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path + ".tmp", "w") as f:
    json.dump(value, f, indent=2)
  os.replace(path + ".tmp", path)


def collect(sweep: Sweep) -> list[str]:
  """Copies every run's eval/*.json to OUT/results/RUN/ (overwriting); returns the copies."""
  copied = []
  for run in (r for r, spec in sweep.runs.items() if not spec.on):  # `on` runs: with theirs
    for source in sorted(glob.glob(os.path.join(sweep.workdir(run), "eval", "*.json"))):
      target = os.path.join(sweep.out_dir, "results", run, os.path.basename(source))
      os.makedirs(os.path.dirname(target), exist_ok=True)
      shutil.copyfile(source, target + ".tmp")  # a killed copy leaves no truncated result
      os.replace(target + ".tmp", target)
      copied.append(target)
  return copied


MAX_ARCHIVE_BYTES = 16 * 2**20  # what one shard may bring back from a lent machine and commit
RESULT_MEMBER = re.compile(r"^results/([A-Za-z0-9][A-Za-z0-9_.-]*)/([^/]+\.json)$")
ARCHIVE_NAME = re.compile(r"^shard-([0-9]+)-of-([0-9]+)(-partial)?\.tar\.gz$")


def archive_path(sweep: Sweep, shard: tuple[int, int], partial: bool = False) -> str:
  """A shard's archive; `partial` for a shard stopped before its last run (superseded, and
  removed, once the whole shard packs)."""
  name = f"shard-{shard[0]}-of-{shard[1]}{'-partial' if partial else ''}.tar.gz"
  return os.path.join(sweep.out_dir, "shards", name)


def pack_shard(sweep: Sweep, shard: tuple[int, int], runs: list[str], partial: bool) -> str:
  """Packs `runs` as shard `shard` (partial: the ones that finished before it stopped) and
  returns the line that says so; over the size limit, a ValueError (pack)."""
  path = archive_path(sweep, shard, partial)
  members = pack(sweep, runs, path)
  if not partial and os.path.exists(archive_path(sweep, shard, partial=True)):
    os.remove(archive_path(sweep, shard, partial=True))
  state = f"stopped early, {len(runs)} finished runs" if partial else f"{len(runs)} runs"
  return (
    f"[sweep] shard {shard[0]}/{shard[1]} ({state}): packed {len(members)} result files into "
    f"{path} ({os.path.getsize(path) / 2**20:.2f} MiB); once every shard's archive is in "
    f"{os.path.dirname(path)}, `--merge_shards` writes the report"
  )


def pack(sweep: Sweep, runs: list[str], path: str) -> list[str]:
  """Every eval/*.json of `runs` (a run `on` another: that run's) into one gzipped tar at `path`,
  members `results/RUN/NAME.json` sorted, with no times or owners, so the same results give the
  same bytes. Written atomically; over MAX_ARCHIVE_BYTES it is a ValueError and nothing is
  written (the results stay in the runs' workdirs). Returns the member names."""
  members = []
  for run in sorted({sweep.runs[r].on or r for r in runs}):
    for source in sorted(glob.glob(os.path.join(sweep.workdir(run), "eval", "*.json"))):
      members.append((f"results/{run}/{os.path.basename(source)}", source))
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tmp = path + ".tmp"
  with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as zipped:
    with tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar:
      for name, source in members:
        info = tar.gettarinfo(source, arcname=name)
        info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
        with open(source, "rb") as f:
          tar.addfile(info, f)
  size = os.path.getsize(tmp)
  if size > MAX_ARCHIVE_BYTES:
    os.remove(tmp)
    raise ValueError(
      f"{path}: {len(members)} results pack to {size / 2**20:.1f} MiB, over the "
      f"{MAX_ARCHIVE_BYTES // 2**20} MiB one shard may bring back; split the sweep into more "
      "shards (--shard=i/n with a larger n); the results are still in the runs' eval/"
    )
  os.replace(tmp, path)
  return [name for name, _ in members]


def unpack(sweep: Sweep) -> list[str]:
  """Every shard archive under OUT/shards/ into OUT/results/ (members results/RUN/NAME.json
  of this sweep's runs only; anything else is refused naming it). Returns the files written."""
  archives = sorted(glob.glob(os.path.join(sweep.out_dir, "shards", "*.tar.gz")))
  if not archives:
    raise ValueError(
      f"--merge_shards: no shard archive (shard-i-of-n.tar.gz) in "
      f"{os.path.join(sweep.out_dir, 'shards')}; run the shards with --shard=i/n first"
    )
  splits = {m.group(2) for m in (ARCHIVE_NAME.match(os.path.basename(a)) for a in archives) if m}
  if len(splits) > 1:
    raise ValueError(
      f"--merge_shards: archives of {len(splits)} splits (of {', '.join(sorted(splits))}) in "
      f"{os.path.dirname(archives[0])}: remove the stale split's, whose results the other's "
      "would overwrite"
    )
  for path in archives:  # every member checked before any is written
    with tarfile.open(path, "r:gz") as tar:
      for info in tar.getmembers():
        match = RESULT_MEMBER.match(info.name)
        if not (info.isfile() and match and match.group(1) in sweep.runs):
          raise ValueError(
            f"{path}: member {info.name!r} is not results/RUN/NAME.json of a run of "
            f"{sweep.name}; runs: {', '.join(sweep.runs)}"
          )
  written = []
  for path in archives:
    with tarfile.open(path, "r:gz") as tar:
      for info in tar.getmembers():
        target = os.path.join(sweep.out_dir, info.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with tar.extractfile(info) as f, open(target + ".tmp", "wb") as out:
          shutil.copyfileobj(f, out)
        os.replace(target + ".tmp", target)
        written.append(target)
  return written


def coverage(sweep: Sweep) -> str:
  """Which shards the archives under OUT/shards/ hold, and which are partial or missing, so a
  report merged from some of the shards says so."""
  whole, partial, counts = set(), set(), set()
  for path in glob.glob(os.path.join(sweep.out_dir, "shards", "*.tar.gz")):
    match = ARCHIVE_NAME.match(os.path.basename(path))
    if match:
      (partial if match.group(3) else whole).add(int(match.group(1)))
      counts.add(int(match.group(2)))
  if not counts:
    return "[sweep] no archive named shard-i-of-n[-partial].tar.gz: which shards ran is unknown"
  if len(counts) > 1:  # unpack refuses them
    return f"[sweep] shard archives of {len(counts)} different splits: {sorted(counts)}"
  (n,) = counts
  partial -= whole
  missing = sorted(set(range(n)) - whole - partial)
  if not partial and not missing:
    return f"[sweep] all {n} shards merged"
  return (
    f"[sweep] {len(whole)} of {n} shards merged whole; partial: "
    f"{', '.join(map(str, sorted(partial))) or 'none'}; missing: "
    f"{', '.join(map(str, missing)) or 'none'}: the report covers their finished runs only"
  )


def write_report(sweep: Sweep) -> dict[str, str]:
  results_dir = os.path.join(sweep.out_dir, "results")
  results = report.load([results_dir], allow_empty=True) if os.path.isdir(results_dir) else []
  if not results:
    print(
      f"[sweep] no lcx result JSON (schema {report.SCHEMA}) under {results_dir} yet", flush=True
    )
  else:
    print(report.format_tables(results), flush=True)
  for warning in filter(None, (report.corpus_warning(results), report.checkpoint_warning(results))):
    print(f"[sweep] {warning}", file=sys.stderr, flush=True)
  title = f"{sweep.name}{':' + sweep.arg if sweep.arg else ''}"
  return report.write(results, sweep.out_dir, title=title)


def _stop(sweep, shard, chosen, interrupted: list[str], signum: int) -> None:
  """A signal stopped the sweep: a line for each run it stopped, the finished runs packed (a
  shard), exit 128 + the signal."""
  for run in interrupted:
    print(stopped_line(sweep, run, signum), file=sys.stderr, flush=True)
  if not interrupted:
    print(
      f"[sweep] {signal.Signals(signum).name}: stopped; run the same command to resume",
      file=sys.stderr,
      flush=True,
    )
  _pack_finished(sweep, shard, chosen)
  sys.exit(128 + signum)


def _run_with_jobs(sweep, chosen, shard, jobs, force_eval, signals) -> None:
  """`--jobs` above 1: run_side_by_side, then what a signal or a failure leaves: the finished
  runs packed (a shard), one line, and the sweep's exit status."""
  failed, interrupted = run_side_by_side(sweep, chosen, jobs, force_eval, signals)
  if signals.received is not None:
    _stop(sweep, shard, chosen, interrupted, signals.received)
  if failed:
    _pack_finished(sweep, shard, chosen)
    finished = sum(done(sweep, r) for r in chosen)
    cli.fail(
      "run "
      + ", ".join(f"{sweep.name}/{run} failed with exit status {code}" for run, code in failed)
      + f"; the sweep stopped once the runs beside it ended (its lines above start with "
      f"[{failed[0][0]}]; {finished} of {len(chosen)} runs done)",
      status=1,
    )


def main(argv):
  FLAGS = flags.FLAGS
  if len(argv) != 2:
    cli.fail(
      "give one experiment: python -m lcx.tools.sweep experiments/NAME[:ARG] [flags]; got "
      f"{len(argv) - 1} arguments"
    )
  try:
    shard = parse_shard(FLAGS.shard)
    if FLAGS.jobs < 1:
      raise ValueError(f"--jobs={FLAGS.jobs}: runs at once, at least 1")
    sweep = load(argv[1], FLAGS.runs_dir)
    if FLAGS.merge_shards:
      if shard != (0, 1) or FLAGS.only or FLAGS.dry_run or FLAGS.force_eval:
        raise ValueError(
          "--merge_shards runs nothing: give it without --shard, --only, --dry_run or --force_eval"
        )
      unpacked = unpack(sweep)
    chosen = select(sweep, FLAGS.only or [], shard)
  except ValueError as error:
    cli.fail(str(error))
  if FLAGS.merge_shards:
    print(
      f"[sweep] unpacked {len(unpacked)} result files from "
      f"{os.path.join(sweep.out_dir, 'shards')} to {os.path.join(sweep.out_dir, 'results')}",
      flush=True,
    )
    print(coverage(sweep), flush=True)
    written = write_report(sweep)
    print("\nwrote:\n" + "\n".join(f"  {p}" for p in written.values()), flush=True)
    return
  total, durations = len(chosen), []
  with _Signals() as signals:
    if FLAGS.jobs > 1 and not FLAGS.dry_run:
      _run_with_jobs(sweep, chosen, shard, FLAGS.jobs, FLAGS.force_eval, signals)
    else:
      for i, run in enumerate(chosen, 1):
        head = f"[sweep {sweep.name}/{run} {i}/{total}]"
        command = to_run(sweep, run, FLAGS.force_eval)
        if command is None:
          print(f"{head} {skipped_line(sweep, run)}", flush=True)
          continue
        if FLAGS.dry_run:
          why = changed_since_done(sweep, run)
          print(head + (f"\n{again_line(sweep, run, why, 'would run')}" if why else ""))
          print(f"$ python {shlex.join(command)}", flush=True)
          continue
        print(start_line(head, i - 1, total, durations), flush=True)
        started = time.perf_counter()
        status = run_one(sweep, run, command, signals)
        durations.append(time.perf_counter() - started)
        if signals.received is not None:
          _stop(sweep, shard, chosen, [run], signals.received)
        if status != 0:
          _pack_finished(sweep, shard, chosen)
          cli.fail(
            f"run {sweep.name}/{run} failed with exit status {status}; the sweep stopped "
            f"(its output is above; {i - 1} of {total} runs done in this call)",
            status=1,
          )
  if FLAGS.dry_run:
    return
  if shard[1] > 1:  # one archive to bring back; the report is written once, by --merge_shards
    try:
      print(pack_shard(sweep, shard, chosen, partial=False), flush=True)
    except ValueError as error:
      cli.fail(str(error), status=1)
    return
  copied = collect(sweep)
  print(
    f"[sweep] copied {len(copied)} result files to {os.path.join(sweep.out_dir, 'results')}",
    flush=True,
  )
  written = write_report(sweep)
  print("\nwrote:\n" + "\n".join(f"  {p}" for p in written.values()), flush=True)


if __name__ == "__main__":
  from absl import app

  from lcx.tools import (
    sweep,  # the module experiments' sweep.py files import Run from, not __main__
  )

  flags.DEFINE_bool("dry_run", False, "Print each run's command; run and write nothing.")
  flags.DEFINE_list("only", [], "Run only these runs (comma list); their needs must be done.")
  flags.DEFINE_string(
    "shard",
    "0/1",
    "i/n: this invocation's share of the runs, 0 <= i < n; "
    "runs connected by `needs` stay on one shard.",
  )
  flags.DEFINE_string("runs_dir", "runs", "Runs go to RUNS_DIR/NAME/RUN.")
  flags.DEFINE_integer(
    "jobs",
    1,
    "Up to this many runs at once, each once its needs are done (runs on the same "
    "workdir take turns); their output lines start with [RUN].",
  )
  flags.DEFINE_bool(
    "merge_shards",
    False,
    "Run nothing: unpack every OUT/shards/*.tar.gz into OUT/results/ and write the report.",
  )
  flags.DEFINE_bool(
    "force_eval",
    False,
    "Evaluate again (lcx.main --mode=eval --force) runs "
    "that are done; pass --force to the others' evaluation.",
  )
  app.run(sweep.main, flags_parser=cli.parse_flags)
