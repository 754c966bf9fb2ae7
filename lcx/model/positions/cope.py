"""CoPE (Golovneva 2024, "Contextual Position Encoding: Learning to Count What's Important").

Positions are counted by the attention itself: per head, query i gates every key j with
g_ij = sigmoid(z_ij) (z: the scaled logits q_i.k_j / sqrt(E); 0 on masked keys), and key j sits
at p_ij = sum_{k=j..i} g_ik, the gates from the query back to j. So with every gate 1, p_ij =
i - j + 1: relative positions; gates near 0 make tokens that do not count. p is clamped to
npos_max - 1 and read from learned embeddings e[0..npos_max-1] by linear interpolation between
floor(p) and ceil(p) of the logits q_i.e[n] / sqrt(E), added to z_ij before the softmax.

As the paper's code (facebookresearch/RAM, projects/cope/src/cope/context_position.py):
`npos_max` defaults to the training length + 1 (its block size + 1: p lies in [0, L]), the
embeddings start at zero (CoPE starts as NoPE) and are shared by the heads, both the gates'
logits and the position logits are divided by sqrt(E) (its default, not `--cope-nodiv`), and
each layer has its own table (its default; `shared=True` is its `--cope-shared`: one table for
every layer). A block of the per-layer schedule without positions (`model.nope_every`) leaves
its table unused. No position ids are read, so remaps are refused (remaps.check_scheme).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from flax import nnx

from lcx.model import cpu_tuned
from lcx.model.positions.base import Scheme, register


def gates(logits_BxGxPxQxS, mask_BxQxS):
  """sigmoid of the logits, 0 on masked keys: how much each key counts for each query. The
  head axes may be G x P or one, H."""
  heads = (1,) * (logits_BxGxPxQxS.ndim - 3)
  return _gates(
    logits_BxGxPxQxS, mask_BxQxS.reshape(mask_BxQxS.shape[:1] + heads + mask_BxQxS.shape[1:])
  )


def _gates_plain(logits, mask):
  return jnp.where(mask, jax.nn.sigmoid(logits), 0.0)


@jax.custom_vjp
def _gates_tuned(logits, mask):
  return _gates_plain(logits, mask)


def _gates_fwd(logits, mask):
  g = _gates_plain(logits, mask)
  return g, g


def _gates_bwd(g, grad):
  """sigmoid' = g (1 - g), 0 on masked keys (g = 0) with no select, and from the gates alone:
  autodiff kept the sigmoid before the mask as well, and a constant 1 that XLA:CPU broadcast."""
  return grad * (g - g * g), None


_gates_tuned.defvjp(_gates_fwd, _gates_bwd)
_gates = cpu_tuned.choose(_gates_tuned, _gates_plain)  # the seam (lcx/model/cpu_tuned.py)


def contextual_positions(gates_BxGxPxQxS, nearer_BxGxPxQ=None):
  """p_ij = sum of the gates from key j up to the last key of the block, plus `nearer`: the
  summed gates of the keys after the block (None: none, the block ends at the query)."""
  pos = reverse_cumsum(gates_BxGxPxQxS)
  return pos if nearer_BxGxPxQ is None else pos + nearer_BxGxPxQ[..., None]


def reverse_cumsum(x_AxS, block: int = 32):
  """Sums over the last axis from each entry to the end: within blocks of `block` entries a
  triangular matmul, across blocks a cumulative sum of the block totals. Forward + backward
  2.6x faster than lax.cumsum's on XLA:CPU at 16 x 4 x 256 x 256 (its reduce-window)."""
  *lead, s = x_AxS.shape
  x_AxS = jnp.pad(x_AxS, [(0, 0)] * len(lead) + [(0, -s % block)])
  x_AxNxK = x_AxS.reshape(*lead, -1, block)
  tri_KxK = jnp.tril(jnp.ones((block, block), x_AxS.dtype))  # 1 where the k-th entry >= the j-th
  within_AxNxK = jnp.einsum(
    "...nk,kj->...nj", x_AxNxK, tri_KxK, precision=jax.lax.Precision.HIGHEST
  )
  totals_AxN = within_AxNxK[..., 0]
  after_AxN = jax.lax.cumsum(totals_AxN, axis=totals_AxN.ndim - 1, reverse=True) - totals_AxN
  return (within_AxNxK + after_AxN[..., None]).reshape(*lead, -1)[..., :s]


def position_table(q_BxGxPxQxE, embedding_NxE):
  """q . e[n] for every integer position n < N, then a zero column: the padded table
  `interpolate` reads, where the entry after the floor never leaves its row. One 2-D matmul
  (the einsum over B, G, P, Q made XLA:CPU copy its gradient into a transposed layout)."""
  *lead, e = q_BxGxPxQxE.shape
  padded_MxE = jnp.pad(embedding_NxE, ((0, 1), (0, 0))).astype(q_BxGxPxQxE.dtype)
  table = jnp.dot(q_BxGxPxQxE.reshape(-1, e), padded_MxE.T, preferred_element_type=jnp.float32)
  return table.reshape(*lead, padded_MxE.shape[0])


def interpolate(table_BxGxPxQxM, pos_BxGxPxQxS):
  """Each query's table row read at fractional positions, clamped to the last position
  N - 1 = M - 2 (the last column is `position_table`'s padding): linear between the floor and
  the ceiling, differentiable in the position (not through the indices)."""
  if table_BxGxPxQxM.size >= 2**31:  # int32 flat indices would overflow
    return interpolate_batched(table_BxGxPxQxM, pos_BxGxPxQxS)
  return _interpolate(table_BxGxPxQxM.shape[-1], table_BxGxPxQxM, pos_BxGxPxQxS)


def interpolate_batched(table_BxGxPxQxM, pos_BxGxPxQxS):
  """`interpolate` by take_along_axis's batched gathers and autodiff (its reference, and its
  path for tables of 2^31 entries or more)."""
  pos = jnp.minimum(pos_BxGxPxQxS, table_BxGxPxQxM.shape[-1] - 2)
  low, high = jnp.floor(pos), jnp.ceil(pos)
  weight = pos - jax.lax.stop_gradient(low)

  def at(index):
    return jnp.take_along_axis(table_BxGxPxQxM, index.astype(jnp.int32), axis=-1)

  return at(high) * weight + at(low) * (1 - weight)


def _gather_window(rank: int):
  """The floor and the entry after it as one 2-wide window of the flattened table, for
  `rank`-D indices: one gather forward, and backward one scatter-add per range of rows
  (`_SCATTER_WINDOW`), where autodiff of two reads makes two of each. XLA:CPU's scatter is
  serial: this one is 2.6x faster than autodiff's pair at 16 x 4 x 256 x 256."""
  return jax.lax.GatherDimensionNumbers(
    offset_dims=(rank,), collapsed_slice_dims=(), start_index_map=(0,)
  )


# The backward's 2-wide windows, their shares as 2 x rows x S: stacking two arrays end to end,
# where a trailing window axis interleaved them (with the per-range slices, CoPE's backward
# 0.81x alone).
_SCATTER_WINDOW = jax.lax.ScatterDimensionNumbers(
  update_window_dims=(0,), inserted_window_dims=(), scatter_dims_to_operand_dims=(0,)
)


def _reads(m, table_BxGxPxQxM, pos_BxGxPxQxS):
  """-> (the interpolated reads, what the backward needs); `m`: the table's row length."""
  rows = table_BxGxPxQxM.shape[:-1]
  pos = jnp.minimum(pos_BxGxPxQxS, m - 2)
  low = jnp.floor(pos)
  weight = pos - low
  row_start = (jnp.arange(math.prod(rows), dtype=jnp.int32) * m).reshape(rows)[..., None]
  low_index = row_start + low.astype(jnp.int32)
  pair = jax.lax.gather(
    table_BxGxPxQxM.reshape(-1),
    low_index[..., None],
    _gather_window(low_index.ndim),
    (2,),
    mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS,
  )
  read_low, read_next = pair[..., 0], pair[..., 1]
  # The slope of autodiff's floor/ceiling reads: 0 at an integer and past the clamp, where
  # floor = ceiling (and the weight is 0).
  slope = jnp.where(weight > 0, read_next - read_low, 0.0)
  # read_low + weight * slope: no constant 1 for XLA:CPU to broadcast (as in the backward).
  return read_low + weight * slope, (low_index, weight, slope)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _interpolate_flat(m, table_BxGxPxQxM, pos_BxGxPxQxS):
  return _reads(m, table_BxGxPxQxM, pos_BxGxPxQxS)[0]


SCATTER_PARTS = 2  # independent scatter-adds over row ranges: XLA:CPU runs them side by side


def _interpolate_flat_bwd(m, res, grad_BxGxPxQxS):
  """The table's gradient as scatter-adds of 2-wide windows, one per range of table rows: one
  scatter runs serially on XLA:CPU, independent ones on separate cores (CoPE's step 0.97-0.99x
  with two on 2 cores, three interleaved A/Bs). Each range's shares are computed from its own
  rows of the inputs (slices of the shares of all rows were copies)."""
  low_index, weight, slope = res
  rows = low_index.shape[:-1]
  n = math.prod(rows)
  grad_NxS, weight_NxS = grad_BxGxPxQxS.reshape(n, -1), weight.reshape(n, -1)
  index_NxS = low_index.reshape(n, -1)
  parts = min(SCATTER_PARTS, n)
  bounds = [n * i // parts for i in range(parts + 1)]
  flat = []
  for lo, hi in zip(bounds[:-1], bounds[1:]):
    grad, to_next = grad_NxS[lo:hi], grad_NxS[lo:hi] * weight_NxS[lo:hi]
    flat.append(
      jax.lax.scatter_add(
        jnp.zeros((hi - lo) * m, grad.dtype),
        (index_NxS[lo:hi] - lo * m)[..., None],  # flat indices local to the rows lo..hi-1
        jnp.stack([grad - to_next, to_next]),  # 2 x rows x S: the window's axis first
        _SCATTER_WINDOW,
        mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS,
      )
    )
  dtable = jnp.concatenate(flat).reshape(*rows, m).astype(slope.dtype)
  return dtable, (grad_BxGxPxQxS * slope).astype(weight.dtype)


_interpolate_flat.defvjp(_reads, _interpolate_flat_bwd)
# The seam (lcx/model/cpu_tuned.py): the flat gather with its scatter-add backward on CPU, the
# batched gathers and autodiff (forward mode too) as the reference.
_interpolate = cpu_tuned.choose(
  _interpolate_flat, lambda m, table, pos: interpolate_batched(table, pos)
)


@register("cope")  # fields and their checks: lcx/model/positions/fields.py
class CoPE(Scheme):
  """Position logits from gate counts; `embedding_NxE`: e[0..npos_max-1], zero at init.

  This instance is block 0's (or every block's, `shared`); `others` holds blocks 1.. 's."""

  def __init__(self, *, dims, rngs, npos_max, shared):
    n = dims.max_len + 1 if npos_max is None else npos_max
    self.embedding_NxE = nnx.Param(
      jnp.zeros((n, dims.head_dim), jnp.float32), logical_axes=(None, "head_dim")
    )
    self.shared = bool(shared)
    others = 0 if shared else dims.num_layers - 1
    self.others = nnx.List(
      [CoPE(dims=dims, rngs=rngs, npos_max=npos_max, shared=True) for _ in range(others)]
    )

  def for_layer(self, layer):
    return self if self.shared or layer == 0 else self.others[layer - 1]

  def contextual(self, q_BxGxPxQxE, logits_BxGxPxQxS, mask_BxQxS, carry):
    """carry: (the summed gates of the keys already visited, nearer than this block; q.e for
    every integer position, computed once per query block).

    Computed over one head axis, H = G x P: with a unit P axis (no GQA) XLA:CPU copied the
    B x H x Q x S intermediates into another layout (1.5% of CoPE's step)."""
    b, g, p, nq, s = logits_BxGxPxQxS.shape
    logits_BxHxQxS = logits_BxGxPxQxS.reshape(b, g * p, nq, s)
    if carry is None:
      q_BxHxQxE = q_BxGxPxQxE.reshape(b, g * p, nq, -1)
      table_BxHxQxM = position_table(q_BxHxQxE, self.embedding_NxE[...])
      nearer_BxHxQ = None
    else:
      nearer_BxHxQ, table_BxHxQxM = carry
    pos_BxHxQxS = contextual_positions(gates(logits_BxHxQxS, mask_BxQxS), nearer_BxHxQ)
    extra_BxGxPxQxS = interpolate(table_BxHxQxM, pos_BxHxQxS).reshape(b, g, p, nq, s)
    # The block's first key is the farthest: its position sums every gate visited so far.
    return extra_BxGxPxQxS, (pos_BxHxQxS[..., 0], table_BxHxQxM)
