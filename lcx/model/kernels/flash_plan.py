"""The flash kernels' plan (lcx/model/kernels/flash.py): what a kernel is specialised on
(`_Static`), its inputs by name (`_Refs`), and each program's block ranges from O(1) reads of its
row (`_key_ranges`, `_query_ranges`: document starts and ends, the diagonal, a sliding window's
reach), with the O(T) row tables they read (`doc_end`, `_padded_documents`)."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp

from lcx.model import patterns


@dataclasses.dataclass(frozen=True)
class _Static:
  """What the kernels are specialised on: Python values, no arrays."""

  uses: tuple  # each branch's `use` (None for the last)
  pattern: Any
  bias: Any  # the scheme's bias hook traced on one block (a jaxpr), or None
  num_leaves: int  # the scheme's parameters, then the bias's constants: inputs
  num_consts: int  # the per-head constants (`_head_constants`), then the captured ones
  num_head_consts: int
  head_axes: tuple  # each parameter's "heads" axis (`_head_axes`), None: passed whole
  has_sink: bool
  per: int  # query heads per kv head
  block_q: int
  block_k: int
  interpret: bool
  backend: str  # the platform it lowers for: picks the compiler (`_compiler_params`)
  table: Any = None  # a `_Table` (distance-table mode: `bias` is None), or None
  has_prefix: bool = False  # an input hook's prefix sums c (FoX): logit (i, j) gets c_i - c_j

  @property
  def branches(self) -> int:
    return len(self.uses)

  @property
  def num_params(self) -> int:
    """The parameter inputs of every kernel: the table, or the leaves (the table's Jacobian
    goes to the dq kernel alone: a forward pass never builds it)."""
    return 1 if self.table is not None else self.num_leaves


@dataclasses.dataclass
class _Refs:
  """The inputs every kernel reads, one (b, h) row each (see `_in_specs`)."""

  qs: list
  ks: list
  q_pos: list
  k_pos: list
  v: Any
  pos: Any
  seg: Any
  doc: Any
  end: Any
  params: list  # the leaves, or (table, Jacobian) rows of head h
  consts: list
  sink: Any
  prefix: Any


def _split(refs, st: _Static) -> tuple[_Refs, list]:
  """The common inputs, then the rest (a kernel's own inputs and its outputs)."""
  it = iter(refs)

  def take(k):
    return [next(it) for _ in range(k)]

  n = st.branches
  common = _Refs(
    take(n),
    take(n),
    take(n),
    take(n),
    *take(5),
    take(st.num_params),
    take(st.num_consts),
    next(it) if st.has_sink else None,
    next(it) if st.has_prefix else None,
  )
  return common, list(it)


def _div(a, b):
  """a // b on non-negative indices, truncating (lax.div): jnp's floor division adds a sign
  correction, whose Mosaic lowering asks the TPU's generation (none when lowering on CPU)."""
  return jax.lax.div(a, b)


def _cdiv(a, b):
  return _div(a + b - 1, b)


def _ranges(lo, interior_lo, interior_hi, hi):
  """[lo, hi) cut in three: edge blocks (masked), interior ones (no mask), edge blocks; the
  interior range clipped inside [lo, hi] (possibly empty)."""
  a = jnp.clip(interior_lo, lo, hi)
  b = jnp.clip(interior_hi, a, hi)
  return ((lo, a, True), (a, b, False), (b, hi, True))


def _window(pattern) -> int | None:
  """W where the pattern lets a query see no key W or more tokens back in its document (a
  sliding window, alone or intersected with another pattern: `patterns.intersect`), else None.
  Documents are contiguous runs, so that is W tokens back in the row too."""
  func = getattr(pattern, "func", None)
  if func is patterns.sliding_window:
    return pattern.keywords["window"]
  if func is patterns._all_of:
    windows = [w for w in map(_window, pattern.args[0]) if w is not None]
    return min(windows) if windows else None
  return None


def _key_ranges(st, r: _Refs, i):
  """Query block i's key blocks from O(1) reads of its row: from the block of its first
  query's document start (documents are contiguous runs) through the block of its last query
  (causality). Interior: every key at or before the first query and in the document of all
  its queries (a block inside one document; no pattern), needs no mask."""
  bq, bk = st.block_q, st.block_k
  first, last = i * bq, i * bq + bq - 1
  start_first, start_last = first - r.doc[first], last - r.doc[last]
  lo, hi = _div(start_first, bk), _div(last, bk) + 1
  if st.pattern is not None:  # every block masked: one loop, from the window's first key
    window = _window(st.pattern)
    if window is not None:
      lo = jnp.maximum(lo, _div(jnp.maximum(first - window + 1, 0), bk))
    return ((lo, hi, True),)
  interior_hi = jnp.where(start_first == start_last, _div(first + 1, bk), 0)
  return _ranges(lo, _cdiv(start_last, bk), interior_hi, hi)


def _query_ranges(st, r: _Refs, j):
  """Key block j's query blocks: from its first key's block (causality) through the block of
  its last key's document end (`_doc_end`). Interior: every query at or after the last key
  and in the keys' one document (no pattern)."""
  bq, bk = st.block_q, st.block_k
  first, last = j * bk, j * bk + bk - 1
  end_first, end_last = r.end[first], r.end[last]
  lo, hi = _div(first, bq), _div(end_last, bq) + 1
  if st.pattern is not None:  # every block masked: one loop, up to the window's last query
    window = _window(st.pattern)
    if window is not None:
      hi = jnp.minimum(hi, _div(last + window - 1, bq) + 1)
    return ((lo, hi, True),)
  interior_hi = jnp.where(end_first == end_last, _div(end_first + 1, bq), 0)
  return _ranges(lo, _cdiv(last, bq), interior_hi, hi)


def _loop(ranges, block, carry):
  """carry through `block(x, carry, masked)` over each range, edges masked."""
  for lo, hi, masked in ranges:
    carry = jax.lax.fori_loop(lo, hi, functools.partial(block, masked=masked), carry)
  return carry


def doc_end(seg_BxT) -> jax.Array:
  """Each token's document's last index, B x T int32 (documents: contiguous runs of a
  segment id): key block j's queries end at its last key's (`_query_ranges`). O(T)."""
  b, t = seg_BxT.shape
  idx_BxT = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
  ends = jnp.concatenate(
    [seg_BxT[:, 1:] != seg_BxT[:, :-1], jnp.ones_like(seg_BxT[:, :1], bool)], axis=1
  )
  return jax.lax.cummin(jnp.where(ends, idx_BxT, t - 1), axis=1, reverse=True)


def _padded_documents(doc_BxT, tp: int) -> jax.Array:
  """In-document indices padded to tp by continuing the last document (its segment id is
  edge-padded), so a padded query's range starts at that document's start, as its mask does:
  the backward kernels then see the logsumexp its own keys gave."""
  t = doc_BxT.shape[1]
  more = doc_BxT[:, -1:].astype(jnp.int32) + jnp.arange(1, tp - t + 1, dtype=jnp.int32)[None]
  return jnp.concatenate([doc_BxT.astype(jnp.int32), more], 1)
