"""Where each token sits in its packed document: its index there and its document's length,
from the segment ids. The kernels (lcx.model.attention) and randomized training positions
(lcx.model.positions.randomized) read them; a leaf, so that neither imports the other for them."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def document_index(seg_BxT: jax.Array) -> jax.Array:
  """Each token's index inside its packed document: 0 where the segment id changes."""
  t = seg_BxT.shape[1]
  idx_BxT = jnp.broadcast_to(jnp.arange(t), seg_BxT.shape)
  starts = jnp.concatenate(
    [jnp.ones_like(seg_BxT[:, :1], bool), seg_BxT[:, 1:] != seg_BxT[:, :-1]], axis=1
  )
  return idx_BxT - jax.lax.cummax(jnp.where(starts, idx_BxT, 0), axis=1)


def document_length(pos_BxT: jax.Array, seg_BxT: jax.Array) -> jax.Array:
  """Each token's sequence length: 1 + the position of the last token of its packed document.

  This is the "current length" that length-dependent RoPE scalings (dynamic, longrope) read,
  per document, as Hugging Face reads max(position_ids) + 1 of its one sequence: padding and
  the other documents of a packed row do not change it.
  """
  t = seg_BxT.shape[1]
  idx_BxT = jnp.broadcast_to(jnp.arange(t), seg_BxT.shape)
  ends = jnp.concatenate(
    [seg_BxT[:, 1:] != seg_BxT[:, :-1], jnp.ones_like(seg_BxT[:, :1], bool)], axis=1
  )
  last_BxT = jax.lax.cummin(jnp.where(ends, idx_BxT, t - 1), axis=1, reverse=True)
  return jnp.take_along_axis(pos_BxT, last_BxT, axis=1) + 1
