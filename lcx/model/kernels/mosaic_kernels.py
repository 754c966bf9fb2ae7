"""The TPU kernels' bodies (lcx/model/kernels/mosaic.py): one program per (query block, key
block) pair, the running state in VMEM scratch across the pairs of the grid's last
("arbitrary") axis. Each pair's scores are the GPU kernel's own (`flash_kernels._block_scores`),
read from this kernel's blocks (`_Blocks`); which pairs run, and which are masked, are the GPU
kernel's block ranges (`flash_plan._key_ranges`, `_query_ranges`) on the scalar-prefetched
in-document indices and document ends."""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
from jax.experimental import pallas as pl

from lcx.model import attention
from lcx.model.kernels.flash_kernels import _block_scores, _jac_sums, _picked
from lcx.model.kernels.flash_plan import _key_ranges, _query_ranges

F32 = jnp.float32
NEG_INF = attention.NEG_INF


class _RowOf:
  """Row b of a B x T scalar-prefetch (SMEM) ref, read an entry at a time: the `doc` and `end`
  rows `flash_plan`'s block ranges read."""

  def __init__(self, ref, b):
    self.ref, self.b = ref, b

  def __getitem__(self, t):
    return self.ref[self.b, t]


class _Plan:
  """What `_key_ranges` and `_query_ranges` read: row b's in-document indices and ends."""

  def __init__(self, doc_ref, end_ref, b):
    self.doc, self.end = _RowOf(doc_ref, b), _RowOf(end_ref, b)


def key_ranges(st, doc_ref, end_ref, b, i):
  return _key_ranges(st, _Plan(doc_ref, end_ref, b), i)


def query_ranges(st, doc_ref, end_ref, b, j):
  return _query_ranges(st, _Plan(doc_ref, end_ref, b), j)


def clamp(ranges, y):
  """The block of the grid's last axis to fetch at step y: y inside the ranges, else the
  nearest end, so a skipped step fetches nothing new (the same block index as its neighbour)."""
  return jnp.clip(y, ranges[0][0], ranges[-1][1] - 1)


def _visit(ranges, y, step):
  """step(masked) when block y lies in one of the ranges (edge ranges masked)."""
  for lo, hi, masked in ranges:
    pl.when((y >= lo) & (y < hi))(functools.partial(step, masked))


def _take(row_1xN, idx_QxS):
  """row[idx] as a take_along_axis over the row broadcast to Q rows: the gather form Mosaic
  lowers (tpu.dynamic_gather along the lanes)."""
  rows_QxN = jnp.broadcast_to(row_1xN, (idx_QxS.shape[0], row_1xN.shape[1]))
  return jnp.take_along_axis(rows_QxN, idx_QxS, axis=1, mode="promise_in_bounds")


def unflat(x_1xN, shape, axis):
  """A flattened parameter block (`mosaic._flat`) back in the shape the hook was traced on:
  head h's slice (1 on the heads `axis`) or the whole parameter (axis None)."""
  if axis is None:
    return x_1xN.reshape(shape)
  moved = (1,) + tuple(n for a, n in enumerate(shape) if a != axis)
  return jnp.moveaxis(x_1xN.reshape(moved), 0, axis)


def flat(x, axis):
  """`unflat`'s inverse: 1 x size."""
  return (x if axis is None else jnp.moveaxis(x, axis, 0)).reshape(1, -1)


class _Blocks:
  """A (query block, key block) pair's rows, as `flash_kernels._block_scores` reads them
  (`_Slices` on the GPU): the blocks of the "q:" and "k:" inputs, 1 x block each."""

  def __init__(self, st, g, i, j, consts):
    self.g, self.consts = g, consts
    self.q_idx = i * st.block_q + jnp.arange(st.block_q)
    self.k_idx = j * st.block_k + jnp.arange(st.block_k)

  def q(self, name, b=None):
    return self.g["q:" + name][b or 0][0]

  def k(self, name, b=None):
    return self.g["k:" + name][b or 0][0]

  def lookup(self, idx):
    return _take(self.g["params"][0][...], idx)


def _groups(refs, layout):
  """The kernel's refs by group name (`layout`: (name, count) pairs, in order)."""
  out, at = {}, 0
  for name, n in layout:
    out[name], at = list(refs[at : at + n]), at + n
  return out


def _hook_inputs(st, g, shapes):
  """(leaves, consts) as the traced hook takes them (hook mode), else ([], [])."""
  if st.bias is None:
    return [], []
  leaves = [unflat(r[...], s, a) for r, (s, a) in zip(g["params"], shapes["params"])]
  consts = [unflat(r[...], s, a) for r, (s, a) in zip(g["consts"], shapes["consts"])]
  return leaves, consts


def _scores(st, g, shapes, h, i, j, masked, want_vjps=False):
  leaves, consts = _hook_inputs(st, g, shapes)
  q_blocks = [r[...] for r in g["qs"]]
  k_blocks = [r[...] for r in g["ks"]]
  rows = _Blocks(st, g, i, j, consts)
  blk = _block_scores(st, rows, leaves, h, q_blocks, k_blocks, masked=masked, want_vjps=want_vjps)
  return blk, q_blocks, k_blocks


def fwd_kernel(doc_ref, end_ref, *refs, st, layout, shapes):
  g = _groups(refs, layout)
  b, h, i, j = (pl.program_id(a) for a in range(4))
  (o_ref,), (lse_ref,), (m_ref, l_ref, acc_ref) = g["o"], g["lse"], g["scratch"]

  @pl.when(j == 0)
  def _init():
    if st.has_sink:  # running max = sink, sum = 1 (attend_chunked)
      m_ref[...] = jnp.full(m_ref.shape, g["sink"][0][h], F32)
      l_ref[...] = jnp.ones(l_ref.shape, F32)
    else:
      m_ref[...] = jnp.full(m_ref.shape, NEG_INF, F32)
      l_ref[...] = jnp.zeros(l_ref.shape, F32)
    acc_ref[...] = jnp.zeros(acc_ref.shape, F32)

  def step(masked):
    s_QxS = _scores(st, g, shapes, h, i, j, masked)[0].s_QxS
    m_prev = m_ref[0]
    m_new = jnp.maximum(m_prev, s_QxS.max(-1))
    corr, p_QxS = jnp.exp(m_prev - m_new), jnp.exp(s_QxS - m_new[:, None])
    v_SxE = g["v"][0][...]
    pv = jnp.einsum("qs,se->qe", p_QxS.astype(v_SxE.dtype), v_SxE, preferred_element_type=F32)
    m_ref[0] = m_new
    l_ref[0] = l_ref[0] * corr + p_QxS.sum(-1)
    acc_ref[...] = acc_ref[...] * corr[:, None] + pv

  _visit(key_ranges(st, doc_ref, end_ref, b, i), j, step)

  @pl.when(j == pl.num_programs(3) - 1)
  def _out():
    denom = l_ref[0]
    o_ref[...] = (acc_ref[...] / denom[:, None]).astype(o_ref.dtype)
    lse_ref[0] = m_ref[0] + jnp.log(denom)


def _probs_and_ds(blk, g):
  """p = exp(s - lse) and dS = p (dO.v - delta), from the query block's saved rows."""
  do_QxE, lse_Q, delta_Q = g["do"][0][...], g["lse"][0][0], g["delta"][0][0]
  p_QxS = jnp.exp(blk.s_QxS - lse_Q[:, None])
  dp_QxS = jnp.einsum("qe,se->qs", do_QxE, g["v"][0][...], preferred_element_type=F32)
  return p_QxS, p_QxS * (dp_QxS - delta_Q[:, None])


def dq_kernel(doc_ref, end_ref, *refs, st, layout, shapes):
  """dq per branch, the bias parameters' gradient (hook vjps, or the table's Jacobian sums)
  and the prefix rows' (FoX) for query block i, over the key blocks of the last axis."""
  g = _groups(refs, layout)
  b, h, i, j = (pl.program_id(a) for a in range(4))
  n = st.branches
  scratch = g["scratch"]
  dq_acc, dparam_acc = scratch[:n], scratch[n : len(scratch) - 1]
  dprefix_acc = scratch[-1]
  table_grad = st.table is not None and st.table.num_jac

  @pl.when(j == 0)
  def _init():
    for ref in scratch:
      ref[...] = jnp.zeros(ref.shape, F32)

  def step(masked):
    want = st.bias is not None and bool(shapes["params"])
    blk, _, k_blocks = _scores(st, g, shapes, h, i, j, masked, want_vjps=want)
    _, ds_QxS = _probs_and_ds(blk, g)
    for acc, sel, k in zip(dq_acc, blk.sels, k_blocks):
      ds = _picked(ds_QxS, sel).astype(k.dtype)
      acc[...] += jnp.einsum("qs,se->qe", ds, k, preferred_element_type=F32)
    for vjp, sel in zip(blk.vjps, blk.sels):  # the bias's vjp in its parameters, per branch
      (grads,) = vjp(_picked(ds_QxS, sel))
      for acc, grad, (_, axis) in zip(dparam_acc, grads, shapes["params"]):
        acc[...] += flat(grad.astype(F32), axis)
    if table_grad:
      jac = functools.partial(_take, g["jac"][0][...])
      (acc,) = dparam_acc
      acc[0] = _jac_sums(st, jac, blk, ds_QxS, acc[0])
    dprefix_acc[0] = dprefix_acc[0] + ds_QxS.sum(-1)

  _visit(key_ranges(st, doc_ref, end_ref, b, i), j, step)

  @pl.when(j == pl.num_programs(3) - 1)
  def _out():
    for ref, acc in zip(g["dqs"], dq_acc):
      ref[...] = acc[...].astype(ref.dtype)
    for ref, acc in zip(g["dparams"], dparam_acc):
      ref[...] = acc[...]
    for ref in g["dprefix"]:
      ref[...] = dprefix_acc[...]


def dkv_kernel(doc_ref, end_ref, *refs, st, layout, shapes):
  """dk per branch, dv and the prefix rows' gradient (FoX) for key block j and query head h,
  over the query blocks of the last axis."""
  g = _groups(refs, layout)
  b, h, j, i = (pl.program_id(a) for a in range(4))
  n = st.branches
  scratch = g["scratch"]
  dk_acc, dv_acc, dprefix_acc = scratch[:n], scratch[n], scratch[n + 1]

  @pl.when(i == 0)
  def _init():
    for ref in scratch:
      ref[...] = jnp.zeros(ref.shape, F32)

  def step(masked):
    blk, q_blocks, _ = _scores(st, g, shapes, h, i, j, masked)
    p_QxS, ds_QxS = _probs_and_ds(blk, g)
    do_QxE = g["do"][0][...]
    dv_acc[...] += jnp.einsum(
      "qs,qe->se", p_QxS.astype(do_QxE.dtype), do_QxE, preferred_element_type=F32
    )
    for acc, sel, q in zip(dk_acc, blk.sels, q_blocks):
      ds = _picked(ds_QxS, sel).astype(q.dtype)
      acc[...] += jnp.einsum("qs,qe->se", ds, q, preferred_element_type=F32)
    dprefix_acc[0] = dprefix_acc[0] - ds_QxS.sum(0)

  _visit(query_ranges(st, doc_ref, end_ref, b, j), i, step)

  @pl.when(i == pl.num_programs(3) - 1)
  def _out():
    for ref, acc in zip(g["dks"] + g["dv"], dk_acc + [dv_acc]):
      ref[...] = acc[...].astype(ref.dtype)
    for ref in g["dprefix"]:
      ref[...] = dprefix_acc[...]


def size(shape, axis) -> int:
  """A flattened parameter block's length (`flat`)."""
  return math.prod(shape) // (1 if axis is None else shape[axis])
