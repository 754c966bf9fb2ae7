"""The flash kernels' bodies (lcx/model/kernels/flash.py): one (query block, key block) pair's
scores (`_scores`), the forward kernel (online softmax), the dq kernel (with the bias
parameters' gradient) and the dk/dv kernel, each looping over its program's block ranges."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.extend
import jax.numpy as jnp
from jax.experimental import pallas as pl

from lcx.model import attention
from lcx.model.kernels.flash_plan import _key_ranges, _loop, _query_ranges, _Refs, _split, _Static
from lcx.model.kernels.flash_tables import _of_head

F32 = jnp.float32
NEG_INF = attention.NEG_INF


def _eval_primal(jaxpr, consts, *args):
  """`jax.core.eval_jaxpr` with each custom_vjp call replaced by its primal function: Triton
  lowers no custom_vjp_call (T5's gather-free lookup has one), and a kernel that does not
  differentiate the hook needs only the primal."""
  env = dict(zip(jaxpr.constvars, consts)) | dict(zip(jaxpr.invars, args))

  def read(v):
    return v.val if isinstance(v, jax.extend.core.Literal) else env[v]

  for eqn in jaxpr.eqns:
    ins = [read(v) for v in eqn.invars]
    if eqn.primitive.name == "custom_vjp_call":
      call = eqn.params["call_jaxpr"]
      outs = _eval_primal(call.jaxpr, call.consts, *ins)
    else:
      outs = eqn.primitive.bind(*ins, **eqn.primitive.get_bind_params(eqn.params))
      outs = outs if eqn.primitive.multiple_results else [outs]
    env.update(zip(eqn.outvars, outs))
  return [read(v) for v in jaxpr.outvars]


def _head_bias(st, consts, leaves, q_pos_Q, k_pos_S, h, *, evaluate=_eval_primal):
  """Head h's bias on one block: the scheme's `kernel_bias` hook on the block's positions, QxS
  f32 (`consts`: the per-head constants, then the captured ones, as values). `evaluate`:
  `jax.core.eval_jaxpr` where the hook is differentiated (its custom rules)."""
  head_consts, consts = consts[: st.num_head_consts], consts[st.num_head_consts :]
  (bias,) = evaluate(st.bias, consts, *leaves, *head_consts, q_pos_Q[None], k_pos_S[None])
  bias = bias[0]  # NxQxS, N = 1 (shared, or head h's from per-head parameters) or H
  return bias[0].astype(F32) if bias.shape[0] == 1 else _of_head(bias, h)


@dataclasses.dataclass
class _Block:
  """One (query block, key block) pair's merged, masked f32 logits and what the backward
  kernels reuse: each branch's selection (None with one branch), its table indices (table
  mode) and its vjp of the hook in the parameters (hook mode, when asked)."""

  s_QxS: Any
  sels: list
  idxs: list
  vjps: list


class _Slices:
  """A block pair's rows as slices of whole-row refs (this kernel's layout): `q(name)` the
  query block's, `k(name)` the key block's (`b`: a branch's position row); `lookup` reads the
  distance table at indices. The TPU kernel (mosaic_kernels.py) reads its blocks instead."""

  def __init__(self, st, r: _Refs, i, j):
    self.r, self.qs = r, pl.ds(i * st.block_q, st.block_q)
    self.ks = pl.ds(j * st.block_k, st.block_k)
    self.q_idx = i * st.block_q + jnp.arange(st.block_q)
    self.k_idx = j * st.block_k + jnp.arange(st.block_k)
    self.consts = [c[...] for c in r.consts] if st.bias is not None else []

  def _row(self, name, b):
    ref = getattr(self.r, name)
    return ref if b is None else ref[b]

  def q(self, name, b=None):
    return self._row(name, b)[self.qs]

  def k(self, name, b=None):
    return self._row(name, b)[self.ks]

  def lookup(self, idx):
    return self.r.params[0][idx]


def _scores(st, r: _Refs, leaves, h, i, j, q_blocks, *, masked=True, want_vjps=False):
  """Query block i (its q blocks per branch, scaled) against key block j for head h, read
  from whole-row refs (`_Slices`)."""
  ks = pl.ds(j * st.block_k, st.block_k)
  k_blocks = [k[ks, :] for k in r.ks]
  rows = _Slices(st, r, i, j)
  return _block_scores(st, rows, leaves, h, q_blocks, k_blocks, masked=masked, want_vjps=want_vjps)


def _block_scores(st, rows, leaves, h, q_blocks, k_blocks, *, masked=True, want_vjps=False):
  """A query block's q blocks (per branch, scaled) against a key block's k blocks for head h,
  their rows read through `rows` (`_Slices`, or the TPU kernel's blocks). `masked`: apply
  causality, documents and the pattern (an edge block); an interior block (`_ranges`) is all
  visible."""
  logits, idxs, vjps = [], [], []
  for b, (q, k) in enumerate(zip(q_blocks, k_blocks)):
    s_QxS = jnp.einsum("qe,se->qs", q, k, preferred_element_type=F32)
    idx = None
    if st.table is not None:  # the head's row of the distance table at q - k
      idx = rows.q("q_pos", b)[:, None] - rows.k("k_pos", b)[None, :] + st.table.half
      s_QxS = s_QxS + rows.lookup(idx)
    elif st.bias is not None:
      q_pos, k_pos = rows.q("q_pos", b), rows.k("k_pos", b)
      if not want_vjps:
        bias_QxS = _head_bias(st, rows.consts, leaves, q_pos, k_pos, h)
      else:
        bias_QxS, vjp = jax.vjp(
          lambda lv: _head_bias(st, rows.consts, lv, q_pos, k_pos, h, evaluate=jax.core.eval_jaxpr),
          leaves,
        )
        vjps.append(vjp)
      s_QxS = s_QxS + bias_QxS
    logits.append(s_QxS)
    idxs.append(idx)
  sels = [None] * st.branches
  s_QxS = logits[-1]
  if st.branches > 1:  # the first branch whose `use` holds wins (attention.scores)
    pos_q, pos_k = rows.q("pos"), rows.k("pos")
    taken = jnp.zeros(s_QxS.shape, bool)
    for b, use in enumerate(st.uses[:-1]):
      sels[b] = use(pos_q[:, None], pos_k[None, :]) & ~taken
      taken = taken | sels[b]
    sels[-1] = ~taken
    for b in range(st.branches - 1):
      s_QxS = jnp.where(sels[b], logits[b], s_QxS)
  if st.has_prefix:  # c_i - c_j (FoX), on the merged logits as attention.logits
    s_QxS = s_QxS + (rows.q("prefix")[:, None] - rows.k("prefix")[None, :])
  if masked:
    mask_QxS = attention.visible(
      rows.q_idx,
      rows.k_idx,
      rows.q("seg")[None],
      rows.k("seg")[None],
      rows.q("doc")[None],
      rows.k("doc")[None],
      st.pattern,
    )[0]
    s_QxS = jnp.where(mask_QxS, s_QxS, NEG_INF)
  return _Block(s_QxS, sels, idxs, vjps)


def _picked(ds_QxS, sel):
  return ds_QxS if sel is None else jnp.where(sel, ds_QxS, 0.0)


def _params(st, r: _Refs):
  """The hook's parameters as values (hook mode), else none: a table is read per block."""
  return [x[...] for x in r.params] if st.table is None else []


def _fwd_kernel(*refs, st: _Static):
  r, (o_ref, lse_ref) = _split(refs, st)
  h, i = pl.program_id(1), pl.program_id(2)
  bq, bk = st.block_q, st.block_k
  leaves = _params(st, r)
  q_blocks = [q[pl.ds(i * bq, bq), :] for q in r.qs]  # read once, scaled outside
  e = o_ref.shape[-1]
  if st.has_sink:
    m0, l0 = jnp.full((bq,), r.sink[0]), jnp.ones((bq,), F32)  # head h's entry
  else:
    m0, l0 = jnp.full((bq,), NEG_INF, F32), jnp.zeros((bq,), F32)

  def key_block(j, carry, masked):
    m_prev, l_prev, acc = carry
    s_QxS = _scores(st, r, leaves, h, i, j, q_blocks, masked=masked).s_QxS
    m_new = jnp.maximum(m_prev, s_QxS.max(-1))
    corr, p_QxS = jnp.exp(m_prev - m_new), jnp.exp(s_QxS - m_new[:, None])
    v_SxE = r.v[pl.ds(j * bk, bk), :]
    pv = jnp.einsum("qs,se->qe", p_QxS.astype(v_SxE.dtype), v_SxE, preferred_element_type=F32)
    return m_new, l_prev * corr + p_QxS.sum(-1), acc * corr[:, None] + pv

  init = (m0, l0, jnp.zeros((bq, e), F32))
  m, denom, acc = _loop(_key_ranges(st, r, i), key_block, init)
  o_ref[...] = (acc / denom[:, None]).astype(o_ref.dtype)
  lse_ref[...] = m + jnp.log(denom)


def _jac_sums(st, jac, blk: _Block, ds_QxS, dtheta_P):
  """dtheta + each parameter's sum of ds times the table's derivative in it at q - k (`jac`:
  indices -> head h's row of the Jacobian, num_jac x 2 half flat, at them)."""
  n = 2 * st.table.half
  p_P = jnp.arange(st.table.num_jac)
  for idx, sel in zip(blk.idxs, blk.sels):
    ds = _picked(ds_QxS, sel)
    for p in range(st.table.num_jac):
      dtheta_P = dtheta_P + jnp.where(p_P == p, jnp.sum(ds * jac(idx + p * n)), 0.0)
  return dtheta_P


def _dq_kernel(*refs, st: _Static):
  r, rest = _split(refs, st)
  n = st.branches
  table_grad = st.table is not None and st.table.num_jac
  jac_ref = rest.pop(3) if table_grad else None
  do_ref, lse_ref, delta_ref, dq_refs, rest = (*rest[:3], rest[3 : 3 + n], rest[3 + n :])
  dprefix_ref = rest.pop() if st.has_prefix else None
  dleaf_refs = rest
  h, i = pl.program_id(1), pl.program_id(2)
  bq, bk = st.block_q, st.block_k
  leaves = _params(st, r)
  qs = pl.ds(i * bq, bq)
  q_blocks = [q[qs, :] for q in r.qs]
  do_QxE, lse_Q, delta_Q = do_ref[qs, :], lse_ref[qs], delta_ref[qs]

  def key_block(j, carry, masked):
    dqs, dleaves, dprefix_Q = carry
    want = st.bias is not None and bool(leaves)
    blk = _scores(st, r, leaves, h, i, j, q_blocks, masked=masked, want_vjps=want)
    ks = pl.ds(j * bk, bk)
    p_QxS = jnp.exp(blk.s_QxS - lse_Q[:, None])
    dp_QxS = jnp.einsum("qe,se->qs", do_QxE, r.v[ks, :], preferred_element_type=F32)
    ds_QxS = p_QxS * (dp_QxS - delta_Q[:, None])
    dqs = [
      dq
      + jnp.einsum(
        "qs,se->qe", _picked(ds_QxS, sel).astype(k.dtype), k[ks, :], preferred_element_type=F32
      )
      for dq, sel, k in zip(dqs, blk.sels, r.ks)
    ]
    for vjp, sel in zip(blk.vjps, blk.sels):  # the bias's vjp in its parameters, per branch
      (grads,) = vjp(_picked(ds_QxS, sel))
      dleaves = [a + g.astype(F32) for a, g in zip(dleaves, grads)]
    if table_grad:
      dleaves = [_jac_sums(st, jac_ref.__getitem__, blk, ds_QxS, dleaves[0])]
    return dqs, dleaves, dprefix_Q + ds_QxS.sum(-1)

  dleaf_init = [jnp.zeros(x.shape, F32) for x in leaves]
  if table_grad:
    dleaf_init = [jnp.zeros((st.table.num_jac,), F32)]
  init = ([jnp.zeros(do_QxE.shape, F32) for _ in range(n)], dleaf_init, jnp.zeros((bq,), F32))
  dqs, dleaves, dprefix_Q = _loop(_key_ranges(st, r, i), key_block, init)
  for ref, dq in zip(dq_refs, dqs):
    ref[...] = dq.astype(ref.dtype)
  for ref, dl in zip(dleaf_refs, dleaves):
    ref[...] = dl
  if st.has_prefix:
    dprefix_ref[...] = dprefix_Q


def _dkv_kernel(*refs, st: _Static):
  r, rest = _split(refs, st)
  n = st.branches
  do_ref, lse_ref, delta_ref, dk_refs, dv_ref = (*rest[:3], rest[3 : 3 + n], rest[3 + n])
  dprefix_ref = rest[4 + n] if st.has_prefix else None
  h, j = pl.program_id(1), pl.program_id(2)
  bq, bk = st.block_q, st.block_k
  leaves = _params(st, r)
  v_SxE = r.v[pl.ds(j * bk, bk), :]

  def query_block(i, carry, masked):
    dks, dv, dprefix_S = carry
    qs = pl.ds(i * bq, bq)
    q_blocks = [q[qs, :] for q in r.qs]
    blk = _scores(st, r, leaves, h, i, j, q_blocks, masked=masked)
    do_QxE, lse_Q, delta_Q = do_ref[qs, :], lse_ref[qs], delta_ref[qs]
    p_QxS = jnp.exp(blk.s_QxS - lse_Q[:, None])
    dv = dv + jnp.einsum(
      "qs,qe->se", p_QxS.astype(do_QxE.dtype), do_QxE, preferred_element_type=F32
    )
    dp_QxS = jnp.einsum("qe,se->qs", do_QxE, v_SxE, preferred_element_type=F32)
    ds_QxS = p_QxS * (dp_QxS - delta_Q[:, None])
    dks = [
      dk
      + jnp.einsum("qs,qe->se", _picked(ds_QxS, sel).astype(q.dtype), q, preferred_element_type=F32)
      for dk, sel, q in zip(dks, blk.sels, q_blocks)
    ]
    return dks, dv, dprefix_S - ds_QxS.sum(0)

  e = v_SxE.shape[-1]
  init = (
    [jnp.zeros((bk, e), F32) for _ in range(n)],
    jnp.zeros((bk, e), F32),
    jnp.zeros((bk,), F32),
  )
  dks, dv, dprefix_S = _loop(_query_ranges(st, r, j), query_block, init)
  for ref, dk in zip(dk_refs, dks):
    ref[...] = dk.astype(ref.dtype)
  dv_ref[...] = dv.astype(dv_ref.dtype)
  if st.has_prefix:
    dprefix_ref[...] = dprefix_S
