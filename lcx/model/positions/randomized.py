"""Randomized training positions (Ruoss 2023, arXiv 2305.16843), and PoSE's skipped ones
(Zhu 2024, `pose_positions` below).

At training time each document of n tokens gets n distinct sorted positions sampled uniformly
from [0, max_position) instead of 0..n-1, so every scheme sees positions as large as it will
at test time. Evaluation uses plain positions, or, with eval.random_positions, such samples too
(the reference implementation samples at test time as well; lcx/tools/evaluate/runner.py).

Rows are packed, so a row holds several documents; each gets its own sample, distributed as a
standalone document's (a short document is not squeezed into the low positions). The row draws
L distinct values in random order (a uniform permutation's prefix); each document takes the
values at its own tokens' indices and sorts them. Any fixed set of n indices of a uniform random
permutation is a uniform n-subset, so each document's sample is the paper's sample of sorted
positions; documents of one row get disjoint samples (not independent, which training does not
need).

That is the paper's sample for the absolute schemes (sinusoidal, learned) and RoPE, whose
noisy variants in its code sample sorted positions as here. For biases its noisy ALiBi and
noisy relative (Transformer-XL) encodings sample one sorted set of L - 1 *distances* from
[1, max_position) per step and give offset k the k-th smallest, so the bias depends on the
offset alone (`compute_noisy_alibi_encodings_biases` in google-deepmind/
randomized_positional_encodings). lcx does the same (`random_distances`, `RandomDistances`)
for every scheme whose bias is a function of i - j alone (`Scheme.bias_of_distance`: ALiBi,
T5, KERPLE, Sandwich) unless `train.random_bias=positions`, which samples positions for them
too: two tokens k apart are then a sum of k random gaps apart, which changes with the query.
FIRE, whose bias also reads the query's position, always samples positions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from lcx.model.positions import base, biases
from lcx.model.positions.documents import document_index, document_length


def document_ids(pos_BxL: jax.Array, seg_BxL: jax.Array | None = None) -> jax.Array:
  """Index of each token's document within its row: a new one where the position restarts at 0
  or (given segment ids) the segment changes."""
  start_BxL = pos_BxL == 0
  if seg_BxL is not None:
    start_BxL |= jnp.concatenate(
      [jnp.zeros_like(seg_BxL[:, :1], bool), seg_BxL[:, 1:] != seg_BxL[:, :-1]], axis=1
    )
  return jnp.cumsum(start_BxL, axis=1)


def randomized_positions(
  key: jax.Array, pos_BxL: jax.Array, max_position: int, seg_BxL: jax.Array | None = None
) -> jax.Array:
  """Per document (runs where pos_BxL restarts at 0, split further where seg_BxL changes): its n
  tokens get n distinct sorted samples of [0, max_position), in token order."""
  b, length = pos_BxL.shape
  if max_position < length:
    raise ValueError(
      f"train.random_positions={max_position} must be >= the row length {length}: "
      "each row needs that many distinct positions"
    )

  def draw(k):
    return jax.random.choice(k, max_position, (length,), replace=False)

  def by_document(values_L, docs_L):
    return jnp.lexsort((values_L, docs_L))

  values_BxL = jax.vmap(draw)(jax.random.split(key, b))
  # Sort by (document, value): documents are contiguous, so each stays on its own tokens.
  order_BxL = jax.vmap(by_document)(values_BxL, document_ids(pos_BxL, seg_BxL))
  return jnp.take_along_axis(values_BxL, order_BxL, axis=1).astype(pos_BxL.dtype)


def pose_positions(
  key: jax.Array, pos_BxL: jax.Array, target: int, seg_BxL: jax.Array | None = None
) -> jax.Array:
  """PoSE (Zhu 2024, arXiv 2309.10400): positional skip-wise training toward `target` positions.

  Each document (as in `randomized_positions`) of n tokens in the row is cut in two chunks, as
  the paper's code does: the first l ~ U{1..ceil(n/2)} tokens keep positions 0..l-1, the rest
  are shifted by a skip u ~ U{0..target-n}, so positions increase, stay contiguous inside each
  chunk and end below `target` (at n-1+u), while the window keeps its n tokens. Each document
  draws its own l and u. The text is not skipped: chunks are contiguous tokens of the row.
  """
  b, length = pos_BxL.shape
  if target < length:
    raise ValueError(
      f"train.pose_target={target} must be >= the row length {length}: a document may fill the row"
    )
  docs_BxL = document_ids(pos_BxL, seg_BxL)
  index_BxL = document_index(docs_BxL)  # each token's index inside its document
  n_BxL = document_length(index_BxL, docs_BxL)  # its document's tokens in the row
  first_BxL = jnp.arange(length)[None, :] - index_BxL  # its document's first token

  def per_document(k, low, high_BxL):
    """One draw in [low, high] per document, read by each of its tokens."""
    draw_BxL = jax.random.randint(k, (b, length), low, high_BxL + 1)
    return jnp.take_along_axis(draw_BxL, first_BxL, axis=1)

  split_key, skip_key = jax.random.split(key)
  first_chunk_BxL = per_document(split_key, 1, (n_BxL + 1) // 2)
  skip_BxL = per_document(skip_key, 0, target - n_BxL)
  out_BxL = index_BxL + jnp.where(index_BxL >= first_chunk_BxL, skip_BxL, 0)
  return out_BxL.astype(pos_BxL.dtype)


def random_distances(key: jax.Array, length: int, max_position: int) -> jax.Array:
  """D_L: D[0] = 0 and D[1..L-1] a sorted sample of L - 1 distinct distances in
  [1, max_position): offset k reads as distance D[k] (int32)."""
  if max_position < length:
    raise ValueError(
      f"train.random_positions={max_position} must be >= the row length {length}: "
      "each row needs that many distinct distances"
    )
  sample = jax.random.choice(key, jnp.arange(1, max_position), (length - 1,), replace=False)
  return jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.sort(sample).astype(jnp.int32)])


class RandomDistances(base.BiasWrapper):
  """A distance-only bias scheme whose offset k = i - j reads as distance D[k]: the scheme's
  bias evaluated once per distance of D (at query position D[k], key 0), then gathered by
  offset. Offsets come from the (plain, per-document) positions; future keys, masked, read
  D[0]. Every other hook is the scheme's; built per train step (lcx.model.decoder.Decoder).
  A function of the offset alone, so the flash kernel reads it from a distance table too."""

  bias_of_distance = True

  def __init__(self, inner, distances_L):
    super().__init__(inner)
    # Repeated up to a power of two (Triton's arrays: the flash kernel's input): offsets past
    # L - 1 occur only between masked tokens, and both hooks read them as D[L - 1] anyway.
    n = distances_L.shape[0]
    self.distances_L = jnp.pad(distances_L, (0, (1 << (n - 1).bit_length()) - n), mode="edge")

  def bias(self, q_pos_BxQ, k_pos_BxS):
    n = self.distances_L.shape[0]
    table_1xHxNx1 = self.inner.bias(self.distances_L[None, :], jnp.zeros((1, 1), jnp.int32))
    table_HxN = table_1xHxNx1[0, :, :, 0]
    offset_BxQxS = jnp.asarray(q_pos_BxQ)[:, :, None] - jnp.asarray(k_pos_BxS)[:, None, :]
    offset_BxQxS = jnp.clip(offset_BxQxS.astype(jnp.int32), 0, n - 1)
    return jnp.moveaxis(jnp.take(table_HxN, offset_BxQxS, axis=1), 0, 1)  # BxHxQxS

  def kernel_bias(self, q_pos_1xQ, k_pos_1xS):
    """`bias` as the GPU flash kernel lowers it: the table from the inner scheme's own
    `kernel_bias`, read by offset with compares and selects (`biases.table_lookup`, a loop
    over the offsets the block holds), no gather."""
    n = self.distances_L.shape[0]
    d_1xN = self.distances_L[None, :].astype(jnp.float32)
    table_1xHxNx1 = self.inner.kernel_bias(d_1xN, jnp.zeros((1, 1), jnp.float32))
    offset_1xQxS = jnp.asarray(q_pos_1xQ)[:, :, None] - jnp.asarray(k_pos_1xS)[:, None, :]
    offset_1xQxS = jnp.clip(offset_1xQxS.astype(jnp.int32), 0, n - 1)
    return biases.table_lookup(table_1xHxNx1[0, :, :, 0].T, offset_1xQxS)
