"""A restored model under one evaluation config: compiled programs and fixed-shape batching.

Every evaluator (length sweep, task sweep, the LongRoPE search, training-time evaluation) scores
rows of tokens through `Runner.map_rows`: rows are batched to `eval.batch_tokens`, padded to a
fixed row count (one compiled program per length and kernel) and sharded over the batch axes.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from lcx.model import positions
from lcx.run import sharding
from lcx.run.metrics import say
from lcx.run.progress import progress_text


class Runner:
  """`params` merged with a variant's graphdef; `programs` cached per (what, kernel)."""

  def __init__(self, prepared, params):
    self.prepared, self.config, self.params = prepared, prepared.config, params
    self._programs = {}

  def dims(self) -> positions.Dims:
    return positions.Dims.of(self.config.model)

  def check_length(self, length: int) -> None:
    """ValueError if the scheme cannot score windows of `length` (a learned table too short,
    fewer eval.random_positions than tokens)."""
    sampled = self.config.eval.random_positions
    if 0 < sampled < length:
      raise ValueError(
        f"eval.random_positions={sampled} is not allowed for windows of {length} "
        f"tokens; allowed: 0 (off) or >= {length}"
      )
    positions.check_eval_length(self.config.model.position, self.dims(), max(length, sampled))

  def model_positions(self, pos_NxT: np.ndarray, seg_NxT: np.ndarray) -> np.ndarray:
    """The positions the model sees: `pos_NxT`, or with eval.random_positions=M each document's
    sorted sample of [0, M) (`randomized_positions` keyed by eval.sample_seed), drawn for all
    rows at once before batching, so they do not depend on eval.batch_tokens."""
    sampled = self.config.eval.random_positions
    if not sampled:
      return pos_NxT
    key = jax.random.key(self.config.eval.sample_seed)
    return np.asarray(_randomized(key, jnp.asarray(pos_NxT), sampled, jnp.asarray(seg_NxT)))

  def kernel(self, length: int) -> str:
    return "chunked" if length >= self.config.eval.chunked_from else "dense"

  def _program(self, what: str, kernel: str):
    if (what, kernel) not in self._programs:
      graphdef = self.prepared.graphdef

      def nll(params, inputs_BxT, targets_BxT, pos_BxT, seg_BxT):
        logits = nnx.merge(graphdef, params)(inputs_BxT, pos_BxT, seg_BxT, kernel=kernel)
        return optax.softmax_cross_entropy_with_integer_labels(logits, targets_BxT)

      def predict(params, inputs_BxT, pos_BxT, seg_BxT):
        logits = nnx.merge(graphdef, params)(inputs_BxT, pos_BxT, seg_BxT, kernel=kernel)
        return jnp.argmax(logits, -1)

      self._programs[what, kernel] = jax.jit({"nll": nll, "predict": predict}[what])
    return self._programs[what, kernel]

  def nll(self, inputs_NxT, targets_NxT, pos_NxT, seg_NxT, progress: str = "") -> np.ndarray:
    """Per-token next-token loss (nats), NxT."""
    program = self._program("nll", self.kernel(inputs_NxT.shape[1]))
    positions_NxT = self.model_positions(pos_NxT, seg_NxT)
    return self.map_rows(
      program, inputs_NxT, targets_NxT, positions_NxT, seg_NxT, progress=progress
    )

  def predict(self, inputs_NxT, pos_NxT, seg_NxT) -> np.ndarray:
    """Greedy next-token prediction at every position, NxT."""
    program = self._program("predict", self.kernel(inputs_NxT.shape[1]))
    return self.map_rows(program, inputs_NxT, self.model_positions(pos_NxT, seg_NxT), seg_NxT)

  def map_rows(self, program, *arrays_NxT: np.ndarray, progress: str = "") -> np.ndarray:
    """`program(params, *rows)` over fixed-size batches of rows, per-row outputs concatenated.

    With a `progress` label and more than two batches, a log line `LABEL: windows done/total,
    tok/s, ETA` at each tenth of the windows: a long length shows it is moving. The pace is
    timed from the second batch on, so the first batch's compilation does not inflate the ETA.
    """
    mesh = self.prepared.mesh
    length = arrays_NxT[0].shape[1]
    shards = mesh.shape["data"] * mesh.shape["fsdp"]
    rows = max(1, self.config.eval.batch_tokens // length)
    rows = -(-rows // shards) * shards
    out, total = [], len(arrays_NxT[0])
    shown, every = 0, max(rows, -(-total // 10))
    for start in range(0, total, rows):
      chunk = [a[start : start + rows] for a in arrays_NxT]
      pad = rows - len(chunk[0])  # fixed shapes: one compiled program per length
      padded = {str(i): np.pad(a, [(0, pad), (0, 0)]) for i, a in enumerate(chunk)}
      batch = sharding.global_batch(_process_slice(padded), mesh, self.prepared.rules)
      result = np.asarray(jax.device_get(program(self.params, *batch.values())))
      out.append(result[: rows - pad])
      done = start + len(chunk[0])
      if start == 0:
        timed_from = time.perf_counter()
      elif progress and done < total and done - shown >= every and total > 2 * rows:
        shown, each = done, (time.perf_counter() - timed_from) / (done - rows)
        say(f"{progress}: windows {progress_text(done, total, each, length / each)}")
    return np.concatenate(out)


_randomized = jax.jit(positions.randomized_positions, static_argnums=2)


def _process_slice(batch: dict) -> dict:
  """This process's contiguous share of the rows (every process holds the whole batch)."""
  n, i = jax.process_count(), jax.process_index()
  return {k: v[i * len(v) // n : (i + 1) * len(v) // n] for k, v in batch.items()}
