"""Training metrics to a JSON-lines file, the trackers train.trackers names (TensorBoard event
files, Weights & Biases) and a progress display.

A tqdm bar in a terminal; plain log lines when stdout is not a TTY (CI, SLURM, nohup).
"""

from __future__ import annotations

import errno
import importlib
import importlib.util
import json
import logging as pylogging
import math
import os
import secrets
import sys
import threading
import time

from absl import flags, logging
from tqdm import tqdm

from lcx import errors, files
from lcx.config import fields
from lcx.run.progress import progress_text


def summary_writer(logdir: str):
  """tensorboardX's SummaryWriter, imported on first use and without torch.

  tensorboardX imports torch whenever it is installed (the test and bench extras, most
  researchers' environments) for tensor types lcx never passes: 2-3 s added to every entry
  point, error paths included. Blocking torch for that one import leaves the writer on numpy;
  torch itself still imports normally afterwards.
  """
  blocked = "torch" not in sys.modules and "tensorboardX" not in sys.modules
  if blocked:
    sys.modules["torch"] = None  # an ImportError for tensorboardX's optional `import torch`
  try:
    from tensorboardX import SummaryWriter
  finally:
    if blocked:
      del sys.modules["torch"]
  return SummaryWriter(logdir)


class TensorBoard:
  """WORKDIR/tensorboard event files (`./launch.sh tensorboard DIR` serves them)."""

  def __init__(self, workdir: str, config: dict):
    del config
    self.writer = summary_writer(os.path.join(workdir, "tensorboard"))

  def scalars(self, step: int, values: dict) -> None:
    for name, value in values.items():
      self.writer.add_scalar(name, value, step)

  def close(self) -> None:
    self.writer.close()


class WandB:
  """One Weights & Biases run per workdir: training, its resumptions and the final evaluation
  log to it (its id is kept in WORKDIR/wandb/lcx_run_id), against the training step (the x-axis
  `step`). Under WANDB_MODE=offline it writes WORKDIR/wandb/ only (`wandb sync` uploads it
  later); otherwise W&B's own settings (`wandb login`, WANDB_PROJECT, ...) apply."""

  def __init__(self, workdir: str, config: dict):
    wandb = importlib.import_module("wandb")
    directory = os.path.join(workdir, "wandb")
    os.makedirs(directory, exist_ok=True)
    try:
      self.run = wandb.init(
        project=config.get("train", {}).get("wandb_project") or None,
        name=os.path.basename(os.path.abspath(workdir)),
        id=_run_id(os.path.join(directory, "lcx_run_id")),
        resume="allow",
        dir=workdir,
        config=config,
      )
      self.run.define_metric("*", step_metric="step")
    except Exception as error:  # no login, no network: a fault of the surroundings
      raise errors.RunFault(
        f"train.trackers: W&B did not start ({type(error).__name__}: {error}); log in "
        "(`wandb login`), or set WANDB_MODE=offline to write WORKDIR/wandb/ for `wandb sync`"
      ) from error

  def scalars(self, step: int, values: dict) -> None:
    self.run.log({"step": step, **values})

  def close(self) -> None:
    self.run.finish()


def _run_id(path: str) -> str:
  """The W&B run id kept at `path`, made (random, written whole) on first use."""
  if os.path.exists(path):
    with open(path) as f:
      return f.read().strip()
  run_id = secrets.token_hex(8)
  files.write_atomic(path, run_id + "\n")
  return run_id


# train.trackers' writers, each `open(workdir, config as a dict)` with scalars(step, values) and
# close(); the names and the packages they need are the config's (lcx.config.fields.TRACKERS).
WRITERS = {"tensorboard": TensorBoard, "wandb": WandB}


def open_trackers(workdir: str, text: str, config: dict) -> list:
  """The writers train.trackers names, opened on `workdir` (`config`: the run's, as a dict)."""
  return [WRITERS[name](workdir, config) for name in fields.items(text)]


NO_SPACE = "No space left on device"  # how the OS, and TensorStore inside Orbax, say ENOSPC


class Drop(pylogging.Filter):
  """Drops log records that say `words` (in the message or its exception)."""

  def __init__(self, words: str):
    super().__init__()
    self.words = words

  def filter(self, record: pylogging.LogRecord) -> bool:
    text = record.getMessage() + (str(record.exc_info[1]) if record.exc_info else "")
    return self.words not in text


def quiet_libraries() -> None:
  """Orbax and TFDS log every save and load at INFO: show warnings only, unless --verbosity.
  A full disk is one error line, the RunFault of the write that met it: Orbax's threads log it
  too, and asyncio once per write task whose exception nobody retrieved, at any time after
  (at exit too), so those records are dropped for the whole process. And a failed checkpoint
  read or write prints no "Event loop is closed" tracebacks (`_closed_loop_dropped`)."""
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  for name in ("absl", "asyncio"):
    logger = pylogging.getLogger(name)
    if not any(isinstance(f, Drop) and f.words == NO_SPACE for f in logger.filters):
      logger.addFilter(Drop(NO_SPACE))
  drop_closed_loop_echoes()
  if not getattr(threading.excepthook, "lcx", False):
    threading.excepthook = _thread_full_disk_dropped(threading.excepthook)


def _thread_full_disk_dropped(hook):
  """`hook` (threading.excepthook) but for a library thread that died of a full disk
  (tensorboardX's event writer): the write of lcx's that met it is the one line."""

  def quiet(args):
    if NO_SPACE not in str(args.exc_value):
      hook(args)

  quiet.lcx = True
  return quiet


def drop_closed_loop_echoes() -> None:
  """Installs `_closed_loop_dropped` once, for the rest of the process: the entry points call
  it through `quiet_libraries`, a checkpoint read (lcx.run.checkpoint) itself, so a notebook's
  failed read is one exception too."""
  if not getattr(sys.unraisablehook, "lcx", False):
    sys.unraisablehook = _closed_loop_dropped(sys.unraisablehook)


def _closed_loop_dropped(hook):
  """`hook` (sys.unraisablehook) but for RuntimeError('Event loop is closed') with no object:
  tensorstore finishing the reads or writes still in flight after a failed orbax restore or
  save closed its asyncio loop (3-13 tracebacks, varying run to run); and for a full disk met
  again at exit (tensorboardX's atexit flush). No code can catch them, and the failure itself
  was raised where it happened."""

  def quiet(unraisable):
    error = unraisable.exc_value
    closed = isinstance(error, RuntimeError) and str(error) == "Event loop is closed"
    if not (closed and unraisable.object is None) and NO_SPACE not in str(error):
      hook(unraisable)

  quiet.lcx = True
  return quiet


def _process_index() -> int:
  """jax.process_index(), imported on first use: lcx.config reads TRACKERS before jax loads."""
  import jax

  return jax.process_index()


def say(message: str, *, every_process: bool = False) -> None:
  """A user-facing status line on stderr (process 0 only unless asked), kept apart from the
  libraries' INFO logs, which the entry points silence by default."""
  if every_process or _process_index() == 0:
    print(f"[lcx] {message}", file=sys.stderr, flush=True)


def _keep_through(path: str, step: int) -> None:
  """Drops the records after `step` from metrics.jsonl: a run resumed from its checkpoint at
  `step` logs the later steps again, and each step is kept once (a torn last line too goes)."""
  if not os.path.exists(path):
    return
  kept = []
  with open(path) as f:
    for line in f:
      try:
        if json.loads(line)["step"] <= step:
          kept.append(line)
      except (ValueError, KeyError, TypeError):
        continue
  files.write_atomic(path, "".join(kept))


class MetricWriter:
  """Writes on process 0 only; every process keeps time so throughput is per step."""

  def __init__(
    self,
    workdir: str,
    *,
    total: int,
    initial: int = 0,
    tokens_per_step: int = 0,
    trackers: str = "tensorboard",
    config: dict | None = None,
  ):
    self.main = _process_index() == 0
    self.tokens_per_step, self.total = tokens_per_step, total
    self._last_time, self._steps_since, self._sums = time.perf_counter(), 0, {}
    self._timed = -1  # steps in the timing window; the first step (compilation) is not timed
    self.jsonl = self.bar = None
    self.trackers = []
    if not self.main:
      return
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "metrics.jsonl")
    _keep_through(path, initial)
    self.jsonl = open(path, "a")
    self.trackers = open_trackers(workdir, trackers, config or {})
    if sys.stdout.isatty():
      self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True)

  def step_done(self, step: int, values: dict, *, log: bool, extra: dict | None = None) -> dict:
    """Counts a finished step; when `log`, writes the means over the steps since the last log
    (one batch's loss is noisy) with throughput, and returns them. `extra` (evaluation during
    training) is written with them, or on its own at a step that is not logged."""
    now = time.perf_counter()
    self._steps_since += 1
    self._timed += 1
    if self._timed == 0:  # a window of the first step alone reports it, compilation included
      self._first_seconds = now - self._last_time
      say(f"first step, compilation included: {self._first_seconds:.1f} s")
      self._last_time = now
    for k, v in values.items():
      self._sums[k] = self._sums.get(k, 0.0) + v
    if self.bar is not None:
      self.bar.update(1)
    if not log:
      if extra:
        self.write(step, extra)
      return {}
    step_time = (now - self._last_time) / self._timed if self._timed else self._first_seconds
    means = {k: v / self._steps_since for k, v in self._sums.items()}
    self._last_time, self._steps_since, self._timed, self._sums = now, 0, 0, {}
    values = dict(
      means,
      lr=values["lr"],
      perplexity=math.exp(min(means["loss"], 50.0)),
      step_time=step_time,
      tokens_per_sec=self.tokens_per_step / step_time,
      **(extra or {}),
    )
    self.write(step, values)
    return values

  def exclude_time(self, seconds: float) -> None:
    """Leaves `seconds` (evaluation during training) out of the step time and throughput."""
    self._last_time += seconds

  def write(self, step: int, values: dict) -> None:
    if not self.main:
      return
    try:
      self.jsonl.write(json.dumps({"step": step, **values}) + "\n")
      self.jsonl.flush()
    except OSError as error:  # a torn last line is dropped when the run resumes (_keep_through)
      if getattr(error, "errno", None) != errno.ENOSPC:
        raise
      raise errors.RunFault(
        f"no space left on the device while appending step {step} to {self.jsonl.name}; free "
        "space, then run the same command to resume from the last checkpoint"
      ) from None
    for tracker in self.trackers:
      tracker.scalars(step, values)
    parts = []
    if "loss" in values:
      parts.append(
        f"loss {values['loss']:.4f} ppl {values['perplexity']:.2f} "
        f"grad_norm {values['grad_norm']:.3f} lr {values['lr']:.2e} "
        f"{values['step_time'] * 1e3:.0f} ms/step"
      )
    evals = [f"{k.split('/', 1)[1]} {v:.3f}" for k, v in values.items() if k.startswith("eval/ppl")]
    if evals:
      parts.append("eval " + " ".join(evals))
    if self.bar is not None:  # the bar shows step/total and the ETA itself
      rate = f"{values['tokens_per_sec']:.0f} tok/s; " if "loss" in values else ""
      self.bar.set_postfix_str(rate + "; ".join(parts))
      return
    head = f"{step}/{self.total}"
    if "loss" in values:  # a log has no bar: step/total, throughput and ETA lead the line
      head = progress_text(step, self.total, values["step_time"], values["tokens_per_sec"])
    print(f"step {head}: " + "; ".join(parts), flush=True)

  def close(self) -> None:
    """Closes every handle. A full disk met here is a RunFault, unless closing because of an
    error already (a checkpoint's full disk): that one is the line the user reads, and a
    tracker's flush failing after it would have replaced it with a traceback."""
    failing = sys.exc_info()[1]
    for handle in (self.bar, *self.trackers, self.jsonl):
      if handle is None:
        continue
      try:
        handle.close()
      except OSError as error:
        if getattr(error, "errno", None) != errno.ENOSPC:
          raise
        if failing is None:
          raise errors.RunFault(
            f"no space left on the device while closing {type(handle).__name__}'s files of "
            "the run (its last records are lost); free space, then run the same command to "
            "resume from the last checkpoint"
          ) from None
