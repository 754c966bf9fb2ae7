"""CoPE (Golovneva 2024, "Contextual Position Encoding: Learning to Count What's Important").

Positions are counted by the attention itself: per head, query i gates every key j with
g_ij = sigmoid(z_ij) (z: the scaled logits q_i.k_j / sqrt(E); 0 on masked keys), and key j sits
at p_ij = sum_{k=j..i} g_ik, the gates from the query back to j. So with every gate 1, p_ij =
i - j + 1: relative positions; gates near 0 make tokens that do not count. p is clamped to
npos_max - 1 and read from learned embeddings e[0..npos_max-1] by linear interpolation between
floor(p) and ceil(p) of the logits q_i.e[n] / sqrt(E), added to z_ij before the softmax.

As the paper's code (facebookresearch/RAM, projects/cope/src/cope/context_position.py):
`npos_max` defaults to the training length + 1 (its block size + 1: p lies in [0, L]), the
embeddings start at zero (CoPE starts as NoPE) and are shared by the heads, and both the gates'
logits and the position logits are divided by sqrt(E) (its default, not `--cope-nodiv`). Unlike
its default, one table serves every layer (lcx: one scheme instance per model; its
`--cope-shared`). No position ids are read, so remaps are refused (remaps.check_scheme).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from lcx import errors
from lcx.positions.base import PREFIX, Scheme, register
from lcx.positions.registry import Unset


def gates(logits_BxGxPxQxS, mask_BxQxS):
  """sigmoid of the logits, 0 on masked keys: how much each key counts for each query."""
  return jnp.where(mask_BxQxS[:, None, None], jax.nn.sigmoid(logits_BxGxPxQxS), 0.0)


def contextual_positions(gates_BxGxPxQxS, nearer_BxGxPxQ=None):
  """p_ij = sum of the gates from key j up to the last key of the block, plus `nearer`: the
  summed gates of the keys after the block (None: none, the block ends at the query)."""
  pos = jax.lax.cumsum(gates_BxGxPxQxS, axis=gates_BxGxPxQxS.ndim - 1, reverse=True)
  return pos if nearer_BxGxPxQ is None else pos + nearer_BxGxPxQ[..., None]


def interpolate(table_BxGxPxQxN, pos_BxGxPxQxS):
  """Each query's table row read at fractional positions (clamped to N - 1): linear between
  the floor and the ceiling, differentiable in the position (not through the indices). The
  reads index the flattened table: XLA:CPU's 1-D gather and its scatter-add backward are 1.4x
  faster than the batched gather of take_along_axis (16 x 4 x 256 x 256 reads)."""
  n = table_BxGxPxQxN.shape[-1]
  pos = jnp.minimum(pos_BxGxPxQxS, n - 1)
  low, high = jnp.floor(pos), jnp.ceil(pos)
  weight = pos - jax.lax.stop_gradient(low)
  rows = table_BxGxPxQxN.shape[:-1]
  count = math.prod(rows)
  if count * n >= 2**31:  # int32 flat indices would overflow

    def at(index):
      return jnp.take_along_axis(table_BxGxPxQxN, index.astype(jnp.int32), axis=-1)

  else:
    row_start = (jnp.arange(count, dtype=jnp.int32) * n).reshape(rows)[..., None]
    flat = table_BxGxPxQxN.reshape(-1)

    def at(index):
      return flat.at[row_start + index.astype(jnp.int32)].get(mode="promise_in_bounds")

  return at(high) * weight + at(low) * (1 - weight)


def _check(cfg, dims):
  del dims
  if cfg.npos_max is not None and not cfg.npos_max >= 2:
    raise errors.not_allowed(
      f"{PREFIX}.npos_max", cfg.npos_max, ">= 2 (None: the training length model.max_len + 1)"
    )


@register("cope", {"npos_max": Unset(int)}, check=_check)
class CoPE(Scheme):
  """Position logits from gate counts; `embedding_NxE`: e[0..npos_max-1], zero at init."""

  def __init__(self, *, dims, rngs, npos_max):
    del rngs
    n = dims.max_len + 1 if npos_max is None else npos_max
    self.embedding_NxE = nnx.Param(
      jnp.zeros((n, dims.head_dim), jnp.float32), logical_axes=(None, "head_dim")
    )

  def contextual(self, q_BxGxPxQxE, logits_BxGxPxQxS, mask_BxQxS, carry):
    """carry: (the summed gates of the keys already visited, nearer than this block; q.e for
    every integer position, computed once per query block)."""
    if carry is None:
      table_BxGxPxQxN = jnp.einsum(
        "bgpqe,ne->bgpqn",
        q_BxGxPxQxE,
        self.embedding_NxE[...].astype(q_BxGxPxQxE.dtype),
        preferred_element_type=jnp.float32,
      )
      nearer_BxGxPxQ = None
    else:
      nearer_BxGxPxQ, table_BxGxPxQxN = carry
    pos_BxGxPxQxS = contextual_positions(gates(logits_BxGxPxQxS, mask_BxQxS), nearer_BxGxPxQ)
    # The block's first key is the farthest: its position sums every gate visited so far.
    return interpolate(table_BxGxPxQxN, pos_BxGxPxQxS), (pos_BxGxPxQxS[..., 0], table_BxGxPxQxN)
