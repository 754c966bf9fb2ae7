"""Orbax checkpoints holding params, optimizer state, step and the data iterator's position.

Saving the iterator state with the weights is what makes resume exact: the restarted run sees
precisely the batches the uninterrupted one would have. Saves are asynchronous; a save killed
mid-way leaves only a `*.orbax-checkpoint-tmp*` folder that is never loaded.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from grain import checkpoint as grain_checkpoint


class _IteratorSnapshot:
  """The iterator state taken at save time, so the async writer never sees a later state."""

  def __init__(self, iterator):
    self._state = json.dumps(iterator.get_state(), indent=2).encode()

  def get_state(self) -> bytes:
    return self._state


class Checkpointer:
  """Keep-N interval checkpoints in `workdir/checkpoints`, plus forced saves (end, SIGTERM)."""

  def __init__(self, workdir: str, *, every: int, keep: int, async_save: bool = True):
    self.directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
    options = ocp.CheckpointManagerOptions(
      max_to_keep=keep,
      save_interval_steps=every,
      enable_async_checkpointing=async_save,
      create=True,
    )
    self.manager = ocp.CheckpointManager(self.directory, options=options)

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def should_save(self, step: int) -> bool:
    return self.manager.should_save(step)

  def reached_preemption(self, step: int) -> bool:
    return self.manager.reached_preemption(step)

  def save(self, step: int, state, iterator, meta: dict, *, force: bool = False) -> bool:
    args = ocp.args.Composite(
      state=ocp.args.StandardSave(state),
      data=grain_checkpoint.CheckpointSave(_IteratorSnapshot(iterator)),
      meta=ocp.args.JsonSave(meta),
    )
    return self.manager.save(step, args=args, force=force)

  def restore(self, step: int, abstract_state, iterator=None):
    """Restores `state` onto the shardings of `abstract_state`; rewinds `iterator` if given."""
    items = dict(state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore())
    if iterator is not None:
      items["data"] = grain_checkpoint.CheckpointRestore(iterator)
    restored = self.manager.restore(step, args=ocp.args.Composite(**items))
    return restored.state, restored.meta

  def restore_params(self, step: int, abstract_params):
    """The parameters alone, onto the shardings of `abstract_params` (no optimizer state read)."""
    target = {"params": abstract_params}
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
    return self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta

  def param_shapes(self, step: int) -> dict[str, tuple[int, ...]]:
    """{dotted parameter path: shape} from the checkpoint's metadata; no array is read."""
    path = epath.Path(self.directory) / str(step) / "state"
    tree = ocp.PyTreeCheckpointHandler().metadata(path).tree["params"]
    return {dotted(p): tuple(m.shape) for p, m in jax.tree_util.tree_leaves_with_path(tree)}

  def close(self):
    self.manager.wait_until_finished()
    self.manager.close()


def dotted(path) -> str:
  """A pytree key path as `blocks.0.attn.wq` (an nnx Variable's stored `value` key dropped)."""
  keys = [str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path]
  return ".".join(keys[:-1] if keys and keys[-1] == "value" else keys)


def latest_step(workdir: str) -> int | None:
  """The latest complete checkpoint step in `workdir`, None if none; creates nothing."""
  if not os.path.isdir(os.path.join(workdir, "checkpoints")):
    return None
  ckpt = Checkpointer(workdir, every=1, keep=1)
  try:
    return ckpt.latest_step()
  finally:
    ckpt.close()


def restore_params(workdir: str, step: int | None = None) -> tuple[dict, dict]:
  """For notebooks and `lcx.export`: (params as nested dicts of numpy arrays, checkpoint
  metadata + step).

  Works on any device layout (one CPU, another mesh size) because it restores to host numpy.
  """
  ckpt = Checkpointer(workdir, every=1, keep=1, async_save=False)
  step = ckpt.latest_step() if step is None else step
  if step is None:
    ckpt.close()
    raise FileNotFoundError(f"no complete checkpoint in {ckpt.directory}")
  meta = dict(ckpt.meta(step), step=step)
  ckpt.close()
  path = os.path.join(ckpt.directory, str(step), "state")
  reader = ocp.PyTreeCheckpointer()
  with _no_item_metadata_warning():
    tree = reader.metadata(path).item_metadata.tree["params"]
    as_numpy = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
    restored = reader.restore(
      path,
      args=ocp.args.PyTreeRestore(
        item={"params": tree}, restore_args={"params": as_numpy}, partial_restore=True
      ),
    )
  return _unwrap_variables(restored["params"]), meta


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
