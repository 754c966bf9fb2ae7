"""A sweep as experiments/NAME/sweep.py defines it: its runs (`Run`), checked and in dependency
order (`Sweep`, `load`), split into shards, and the command each run is (`Sweep.command`)."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import sys
import types

from lcx import cli, errors

ROOT = pathlib.Path(__file__).resolve().parents[3]  # config paths are relative to it
MODES = ("train", "eval", "train_and_eval", "longrope")
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
