"""Orbax checkpoints holding params, optimizer state, step and the data iterator's position.

Saving the iterator state with the weights is what makes resume exact: the restarted run sees
precisely the batches the uninterrupted one would have. Saves are asynchronous; a save killed
mid-way leaves only a `*.orbax-checkpoint-tmp*` folder that is never loaded.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import itertools
import json
import logging
import os
import shutil
import uuid

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from grain import checkpoint as grain_checkpoint

from lcx import errors
from lcx.run import metrics
from lcx.run.metrics import Drop as _Drop

SET_ASIDE = "checkpoints_set_aside"  # in the workdir: steps after train.resume_step


class _IteratorSnapshot:
  """The iterator state taken at save time, so the async writer never sees a later state."""

  def __init__(self, iterator):
    self._state = json.dumps(iterator.get_state(), indent=2).encode()

  def get_state(self) -> bytes:
    return self._state


class Checkpointer:
  """Keep-N interval checkpoints in `workdir/checkpoints`, plus forced saves (end, SIGTERM)."""

  # What an unreadable step's error offers to do with the readable one before it ({step}).
  retry = (
    "train from it with --config.train.resume_step={step}, or evaluate it with --eval_step={step}"
  )

  def __init__(
    self,
    workdir: str,
    *,
    every: int = 0,
    keep: int | None = None,
    async_save: bool = True,
    read_only: bool = False,
  ):
    """`read_only`: saves nothing and waits at no barrier across processes (Orbax's barriers
    skipped by counting this process alone as active). Each process opens a Reader when it sees
    checkpoints/, and one may see it before another has made it: a barrier that one process
    waits at and another never reaches hangs the run."""
    self.directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
    if read_only:
      options = ocp.CheckpointManagerOptions(
        read_only=True,
        create=False,
        save_interval_steps=0,
        save_root_metadata=False,
        enable_async_checkpointing=False,
        multiprocessing_options=ocp.options.MultiprocessingOptions(
          primary_host=jax.process_index(), active_processes={jax.process_index()}
        ),
      )
    else:
      options = ocp.CheckpointManagerOptions(
        max_to_keep=keep,
        save_interval_steps=every,
        enable_async_checkpointing=async_save,
        create=True,
      )
    quiet = _Drop("Given directory is read only")  # Orbax's warning on every Reader
    logging.getLogger("absl").addFilter(quiet)
    try:
      self.manager = ocp.CheckpointManager(self.directory, options=options)
    finally:
      logging.getLogger("absl").removeFilter(quiet)
    self._saving = None  # the step of the last save started: an async save fails later
    self.saved_meta = None  # the metadata written with it (its fingerprint included)

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  @contextlib.contextmanager
  def _reading(self, step: int):
    """Any failure to read checkpoint `step` (a truncated array file is a bare Exception from
    TensorStore, its message a multi-KB spec) becomes a RunFault naming the step and offering
    the one before it: never a silent fall back to another step."""
    metrics.drop_closed_loop_echoes()
    try:
      yield
    except Exception as error:
      steps = sorted(s for s in self.manager.all_steps() if s < step)
      reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
      offer = (
        f"the previous checkpoint is step {steps[-1]}: {self.retry.format(step=steps[-1])}"
        if steps
        else f"there is no earlier checkpoint; remove {self.directory} to train from scratch"
      )
      raise errors.RunFault(
        f"checkpoint step {step} in {self.directory} is unreadable ({reason}); {offer}"
      ) from error

  def set_aside_after(self, step: int) -> dict[int, str]:
    """Moves the steps after `step` to WORKDIR/checkpoints_set_aside/ (kept, never loaded),
    so training resumes from `step` and saves its later steps anew; returns {moved step: the
    name it is kept under}. A step set aside before keeps its folder: a later one of the same
    number is kept beside it (`_aside_name`), never over it. The manager must be made again
    afterwards (it lists the steps once)."""
    later = sorted(s for s in self.manager.all_steps() if s > step)
    aside = os.path.join(os.path.dirname(self.directory), SET_ASIDE)
    os.makedirs(aside, exist_ok=True)
    moved = {}
    for s in later:
      moved[s] = _aside_name(aside, s)
      os.rename(os.path.join(self.directory, str(s)), os.path.join(aside, moved[s]))
    return moved

  def should_save(self, step: int) -> bool:
    return self.manager.should_save(step)

  def reached_preemption(self, step: int) -> bool:
    return self.manager.reached_preemption(step)

  def save(self, step: int, state, iterator, meta: dict, *, force: bool = False) -> bool:
    """Saves `state` and the iterator; `meta` gets a fresh `fingerprint`, so a checkpoint
    retrained to the same step (another seed, lr) is told apart from the one it replaced."""
    meta = dict(meta, fingerprint=uuid.uuid4().hex)
    args = ocp.args.Composite(
      state=ocp.args.StandardSave(state),
      data=grain_checkpoint.CheckpointSave(_IteratorSnapshot(iterator)),
      meta=ocp.args.JsonSave(meta),
    )
    with self._writing():
      saved = self.manager.save(step, args=args, force=force)
    if saved:
      self._saving, self.saved_meta = step, meta
    return saved

  @contextlib.contextmanager
  def _writing(self):
    """A full disk, in whichever thread of the async save it is met, becomes one RunFault
    naming the directory, after the save's orphaned temporary folders are removed (the lock
    says no other process saves here); Orbax's own error logs of it are silenced."""
    quiet = _Drop("No space left on device")  # the RunFault says it once
    logging.getLogger("absl").addFilter(quiet)
    try:
      yield
    except Exception as error:
      if not _no_space(error):
        raise
      removed = [p for p in glob.glob(os.path.join(self.directory, "*.orbax-checkpoint-tmp*"))]
      for path in removed:
        shutil.rmtree(path, ignore_errors=True)
      latest = self.manager.latest_step()
      raise errors.RunFault(
        f"no space left on the device of {self.directory} while saving step {self._saving}; "
        f"removed its partial checkpoint ({', '.join(map(os.path.basename, removed)) or 'none'}). "
        "Free space, then run the same command to resume from "
        + (f"step {latest}" if latest is not None else "the start")
      ) from None
    finally:
      logging.getLogger("absl").removeFilter(quiet)

  def restore(self, step: int, abstract_state, iterator=None):
    """Restores `state` onto the shardings of `abstract_state`; rewinds `iterator` if given."""
    items = dict(state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore())
    if iterator is not None:
      items["data"] = grain_checkpoint.CheckpointRestore(iterator)
    with self._reading(step):
      restored = self.manager.restore(step, args=ocp.args.Composite(**items))
    return restored.state, restored.meta

  def restore_params(self, step: int, abstract_params):
    """The parameters alone, onto the shardings of `abstract_params` (no optimizer state read)."""
    target = {"params": abstract_params}
    with self._reading(step):
      restored = self.manager.restore(
        step,
        args=ocp.args.Composite(
          state=ocp.args.PyTreeRestore(
            item=target,
            restore_args=ocp.checkpoint_utils.construct_restore_args(target),
            partial_restore=True,
          )
        ),
      )
    return restored.state["params"]

  def meta(self, step: int) -> dict:
    """The JSON metadata (tokenizer, resolved config) saved with a checkpoint."""
    with self._reading(step):
      return self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta

  def param_shapes(self, step: int) -> dict[str, tuple[int, ...]]:
    """{dotted parameter path: shape} from the checkpoint's metadata; no array is read."""
    path = epath.Path(self.directory) / str(step) / "state"
    with self._reading(step):
      tree = ocp.PyTreeCheckpointHandler().metadata(path).tree["params"]
    return {dotted(p): tuple(m.shape) for p, m in jax.tree_util.tree_leaves_with_path(tree)}

  def close(self):
    with self._writing():
      self.manager.wait_until_finished()
    self.manager.close()


def _aside_name(aside: str, step: int) -> str:
  """The first free name for set-aside step `step`: `STEP`, else `STEP.1`, `STEP.2`, ... (one
  per earlier set-aside of that step, oldest first), so no set-aside replaces another."""
  names = (str(step) if n == 0 else f"{step}.{n}" for n in itertools.count())
  return next(name for name in names if not os.path.lexists(os.path.join(aside, name)))


def _no_space(error: BaseException) -> bool:
  """ENOSPC as an OSError, or as TensorStore words it inside Orbax's ValueError."""
  return getattr(error, "errno", None) == errno.ENOSPC or "No space left on device" in str(error)


def dotted(path) -> str:
  """A pytree key path as `blocks.0.attn.wq` (an nnx Variable's stored `value` key dropped)."""
  keys = [str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path]
  return ".".join(keys[:-1] if keys and keys[-1] == "value" else keys)


def fingerprint(workdir: str, step: int, meta: dict) -> str:
  """What tells this checkpoint from any other saved at the same step: the fingerprint written
  with it, or for a checkpoint saved before lcx wrote one, a hash of its files' names, sizes
  and modification times (a retrained checkpoint's files are new)."""
  if meta.get("fingerprint"):
    return meta["fingerprint"]
  digest = hashlib.sha256()
  top = os.path.join(workdir, "checkpoints", str(step))
  for root, dirs, files in os.walk(top):
    dirs.sort()
    for name in sorted(files):
      stat = os.stat(os.path.join(root, name))
      digest.update(f"{os.path.relpath(os.path.join(root, name), top)} {stat.st_size} ".encode())
      digest.update(f"{stat.st_mtime_ns}\n".encode())
  return "files:" + digest.hexdigest()[:16]


class Reader:
  """A workdir's checkpoints, read only: one Orbax manager, the complete steps listed once, and
  the one place a wanted step (None: the latest) is resolved. Creates nothing: a workdir without
  checkpoints/ reads as no steps. Use as a context manager (`with Reader(workdir) as r`)."""

  def __init__(self, workdir: str, retry: str | None = None):
    """`retry`: what an unreadable step's error offers to do with the one before it."""
    self.directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
    exists = os.path.isdir(self.directory)
    self._ckpt = Checkpointer(workdir, read_only=True) if exists else None
    if exists and retry:
      self._ckpt.retry = retry
    self.steps = sorted(self._ckpt.manager.all_steps()) if exists else []

  @property
  def latest(self) -> int | None:
    return self.steps[-1] if self.steps else None

  def step(self, wanted: int | None, where: str) -> int:
    """`wanted`, or the latest step if None. FileNotFoundError when there is none;
    ValueError naming `where` (the flag or field that asked) and the steps there."""
    if not self.steps:
      raise FileNotFoundError(f"no checkpoint in {self.directory}; train first (--mode=train)")
    if wanted is None:
      return self.steps[-1]
    if wanted not in self.steps:
      raise ValueError(
        f"{where}: no checkpoint at step {wanted} in {self.directory}; steps there: {self.steps}"
      )
    return wanted

  def meta(self, step: int) -> dict:
    return self._ckpt.meta(step)

  def param_shapes(self, step: int) -> dict[str, tuple[int, ...]]:
    return self._ckpt.param_shapes(step)

  def restore_params(self, step: int, abstract_params):
    return self._ckpt.restore_params(step, abstract_params)

  def close(self):
    if self._ckpt is not None:
      self._ckpt.close()

  def __enter__(self) -> "Reader":
    return self

  def __exit__(self, *exc):
    self.close()


def latest_step(workdir: str) -> int | None:
  """The latest complete checkpoint step in `workdir`, None if none; creates nothing."""
  with Reader(workdir) as reader:
    return reader.latest


def restore_params(
  workdir: str, step: int | None = None, retry: str = "restore it with step={step}"
) -> tuple[dict, dict]:
  """For notebooks and `lcx.tools.export`: (params as nested dicts of numpy arrays, checkpoint
  metadata + step). An unreadable step is a RunFault offering the one before it (`retry`).

  Works on any device layout (one CPU, another mesh size) because it restores to host numpy.
  """
  with Reader(workdir, retry) as ckpt:
    if not ckpt.steps:
      raise FileNotFoundError(f"no complete checkpoint in {ckpt.directory}")
    step = ckpt.step(step, "step")
    meta = dict(ckpt.meta(step), step=step)
    with ckpt._ckpt._reading(step):
      params = _numpy_params(os.path.join(ckpt.directory, str(step), "state"))
  return params, meta


def _numpy_params(path: str) -> dict:
  """The `params` of the state item at `path` as host numpy arrays. Its tree is read by the
  handler itself: the checkpointer's `metadata` logs a damaged item's error as a warning and
  returns None in its place."""
  tree = ocp.PyTreeCheckpointHandler().metadata(epath.Path(path)).tree["params"]
  reader = ocp.PyTreeCheckpointer()
  with _no_item_metadata_warning():
    as_numpy = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
    restored = reader.restore(
      path,
      args=ocp.args.PyTreeRestore(
        item={"params": tree}, restore_args={"params": as_numpy}, partial_restore=True
      ),
    )
  return _unwrap_variables(restored["params"])


@contextlib.contextmanager
def _no_item_metadata_warning():
  """Drops Orbax's "Metadata file does not exist: STEP/state/_CHECKPOINT_METADATA" warning.
  Harmless: the CheckpointManager writes that file (save time, custom metadata) once per step,
  at STEP/_CHECKPOINT_METADATA; a checkpointer opened on the `state` item looks for its own,
  finds none and goes on with the item's array metadata (STEP/state/_METADATA), all it needs."""

  def keep(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Metadata file does not exist")

  logger = logging.getLogger("absl")
  logger.addFilter(keep)
  try:
    yield
  finally:
    logger.removeFilter(keep)


def _unwrap_variables(tree):
  """nnx Variables are stored as {"value": array}; notebooks want the arrays."""
  if isinstance(tree, dict):
    if set(tree) == {"value"}:
      return tree["value"]
    return {k: _unwrap_variables(v) for k, v in tree.items()}
  return tree
