"""Flash attention in Pallas: online softmax over key blocks, a Pallas backward that recomputes
the probabilities block by block from the saved logsumexp, never a T x T array.

The score of a (query block, key block) pair is built inside the kernel from the block's own
positions, with the same ingredients as lcx.model.attention's kernels:
  - one (q, k) pair per remap branch (rotated outside: rotation is O(T)), merged by each
    branch's `use` mask on the true positions (Self-Extend, ReRoPE),
  - the scheme's own `kernel_bias` hook (`bias`, unless the scheme restates it without a
    gather or a batched matmul: T5, Sandwich) called on the block's positions: the scheme's
    parameters go in as kernel inputs and the module is rebuilt inside (`nnx.merge`), so a new
    bias scheme gets the fused kernel with no kernel code, and its parameters' gradient is the
    hook's vjp on each block, summed over blocks. A parameter with a "heads" logical axis
    (KERPLE's r1, r2; T5's table) and a scheme's declared per-head tuples
    (`Scheme.head_constants`: ALiBi's slopes) go in as the program's head slice and the hook is
    traced on slices, so it returns one head's bias (Q x S per block, not H x Q x S); other
    parameters (FIRE's) and captured constants go in whole and the hook's H heads are cut to
    the program's,
  - causality, packed documents (segment ids) and the sparse pattern (on in-document indices),
    plus a block mask (`block_mask`) that skips every key block no query of the block sees,
  - the learned sink (running max = sink, sum = 1 at the start, as attend_chunked).
The temperature needs no kernel code: it is a per-query factor the model puts on q before
attention (lcx/model/temperature.py), and q goes into the kernel as it comes.

Layouts are the model's: q BxTxHxE and k BxTxGxE token-major (GQA: head h reads kv head
h // P), v BxGxTxE and the output BxHxTxE head-major. The grid is (B, H, query blocks) forward
and for dq, (B, H, key blocks) for dk and dv (written per query head, summed over P outside).
Block shapes are powers of two and refs are read with `pl.ds` slices, the constraints of the
GPU (Triton) lowering; on CPU everything runs in interpret mode (`interpret=None`: on CPU).
`reference.attention_reference` is the plain-jnp attention it must equal.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.extend
import jax.numpy as jnp
from flax import nnx
from jax.experimental import pallas as pl

from lcx.model import attention
from lcx.model.positions import base as positions_base

F32 = jnp.float32
NEG_INF = attention.NEG_INF
BLOCK = 128  # default query and key block
GPUS = ("gpu", "cuda", "rocm")  # backends it lowers for through Triton
TRITON = {"num_warps": 4, "num_stages": 2}  # its Triton settings (the device check tunes them)


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
  scale: float
  interpret: bool
  backend: str  # the platform it lowers for: picks the compiler (`_compiler_params`)

  @property
  def branches(self) -> int:
    return len(self.uses)


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
  bmask: Any
  leaves: list
  consts: list
  sink: Any


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
    next(it),
    next(it),
    next(it),
    next(it),
    next(it),
    take(st.num_leaves),
    take(st.num_consts),
    next(it) if st.has_sink else None,
  )
  return common, list(it)


def _of_head(x_H, h):
  """x[h] for a traced head index, as a one-hot sum (no dynamic indexing of a value)."""
  onehot_H = (jnp.arange(x_H.shape[0]) == h).astype(F32)
  return jnp.sum(x_H.astype(F32) * onehot_H.reshape(onehot_H.shape + (1,) * (x_H.ndim - 1)), 0)


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


def _head_bias(st, r: _Refs, leaves, q_pos_Q, k_pos_S, h, *, evaluate=_eval_primal):
  """Head h's bias on one block: the scheme's `kernel_bias` hook on the block's positions, QxS
  f32. `evaluate`: `jax.core.eval_jaxpr` where the hook is differentiated (its custom rules)."""
  consts = [c[...] for c in r.consts]
  head_consts, consts = consts[: st.num_head_consts], consts[st.num_head_consts :]
  (bias,) = evaluate(st.bias, consts, *leaves, *head_consts, q_pos_Q[None], k_pos_S[None])
  bias = bias[0]  # NxQxS, N = 1 (shared, or head h's from per-head parameters) or H
  return bias[0].astype(F32) if bias.shape[0] == 1 else _of_head(bias, h)


def _scores(st, r: _Refs, leaves, h, i, j, *, bias_vjps=None):
  """Query block i against key block j for head h: merged, masked f32 logits, each branch's
  selection (None with one branch), and the blocks of scaled q and of k per branch.
  `bias_vjps`: a list that receives each branch's vjp of the bias in the parameters, from the
  same evaluation that gives the logits (the dq kernel: the bias is evaluated once a block)."""
  qs, ks = pl.ds(i * st.block_q, st.block_q), pl.ds(j * st.block_k, st.block_k)
  q_blocks = [q[qs, :] * st.scale for q in r.qs]
  k_blocks = [k[ks, :] for k in r.ks]
  logits = []
  for b, (q, k) in enumerate(zip(q_blocks, k_blocks)):
    s_QxS = jnp.einsum("qe,se->qs", q, k, preferred_element_type=F32)
    if st.bias is not None:
      q_pos, k_pos = r.q_pos[b][qs], r.k_pos[b][ks]
      if bias_vjps is None:
        bias_QxS = _head_bias(st, r, leaves, q_pos, k_pos, h)
      else:
        bias_QxS, vjp = jax.vjp(
          lambda lv: _head_bias(st, r, lv, q_pos, k_pos, h, evaluate=jax.core.eval_jaxpr),
          leaves,
        )
        bias_vjps.append(vjp)
      s_QxS = s_QxS + bias_QxS
    logits.append(s_QxS)
  sels = [None] * st.branches
  s_QxS = logits[-1]
  if st.branches > 1:  # the first branch whose `use` holds wins (attention.scores)
    pos_q, pos_k = r.pos[qs], r.pos[ks]
    taken = jnp.zeros(s_QxS.shape, bool)
    for b, use in enumerate(st.uses[:-1]):
      sels[b] = use(pos_q[:, None], pos_k[None, :]) & ~taken
      taken = taken | sels[b]
    sels[-1] = ~taken
    for b in range(st.branches - 1):
      s_QxS = jnp.where(sels[b], logits[b], s_QxS)
  q_idx = i * st.block_q + jnp.arange(st.block_q)
  k_idx = j * st.block_k + jnp.arange(st.block_k)
  seg_q, seg_k, doc_q, doc_k = r.seg[qs], r.seg[ks], r.doc[qs], r.doc[ks]
  mask_QxS = attention.visible(
    q_idx, k_idx, seg_q[None], seg_k[None], doc_q[None], doc_k[None], st.pattern
  )[0]
  return jnp.where(mask_QxS, s_QxS, NEG_INF), sels, q_blocks, k_blocks


def _picked(ds_QxS, sel):
  return ds_QxS if sel is None else jnp.where(sel, ds_QxS, 0.0)


def _visit(r: _Refs, i, j, body, carry):
  """body(carry) where the block mask says query block i sees key block j, else carry."""
  return jax.lax.cond(r.bmask[i, j] != 0, body, lambda c: c, carry)


def _fwd_kernel(*refs, st: _Static):
  r, (o_ref, lse_ref) = _split(refs, st)
  h, i = pl.program_id(1), pl.program_id(2)
  bq, bk = st.block_q, st.block_k
  leaves = [x[...] for x in r.leaves]
  e = o_ref.shape[-1]
  if st.has_sink:
    m0, l0 = jnp.full((bq,), r.sink[0]), jnp.ones((bq,), F32)  # head h's entry
  else:
    m0, l0 = jnp.full((bq,), NEG_INF, F32), jnp.zeros((bq,), F32)

  def key_block(j, carry):
    def body(carry):
      m_prev, l_prev, acc = carry
      s_QxS, *_ = _scores(st, r, leaves, h, i, j)
      m_new = jnp.maximum(m_prev, s_QxS.max(-1))
      corr, p_QxS = jnp.exp(m_prev - m_new), jnp.exp(s_QxS - m_new[:, None])
      v_SxE = r.v[pl.ds(j * bk, bk), :]
      pv = jnp.einsum("qs,se->qe", p_QxS.astype(v_SxE.dtype), v_SxE, preferred_element_type=F32)
      return m_new, l_prev * corr + p_QxS.sum(-1), acc * corr[:, None] + pv

    return _visit(r, i, j, body, carry)

  last = ((i + 1) * bq + bk - 1) // bk  # causality: key blocks up to the block's last query
  m, denom, acc = jax.lax.fori_loop(0, last, key_block, (m0, l0, jnp.zeros((bq, e), F32)))
  o_ref[...] = (acc / denom[:, None]).astype(o_ref.dtype)
  lse_ref[...] = m + jnp.log(denom)


def _dq_kernel(*refs, st: _Static):
  r, rest = _split(refs, st)
  n = st.branches
  do_ref, lse_ref, delta_ref, dq_refs, dleaf_refs = (*rest[:3], rest[3 : 3 + n], rest[3 + n :])
  h, i = pl.program_id(1), pl.program_id(2)
  bq, bk = st.block_q, st.block_k
  leaves = [x[...] for x in r.leaves]
  qs = pl.ds(i * bq, bq)
  do_QxE, lse_Q, delta_Q = do_ref[qs, :], lse_ref[qs], delta_ref[qs]

  def key_block(j, carry):
    def body(carry):
      dqs, dleaves = carry
      vjps = [] if st.bias is not None and leaves else None
      s_QxS, sels, _, k_blocks = _scores(st, r, leaves, h, i, j, bias_vjps=vjps)
      ks = pl.ds(j * bk, bk)
      p_QxS = jnp.exp(s_QxS - lse_Q[:, None])
      dp_QxS = jnp.einsum("qe,se->qs", do_QxE, r.v[ks, :], preferred_element_type=F32)
      ds_QxS = p_QxS * (dp_QxS - delta_Q[:, None])
      dqs = [
        dq
        + jnp.einsum(
          "qs,se->qe", _picked(ds_QxS, sel).astype(k.dtype), k, preferred_element_type=F32
        )
        for dq, sel, k in zip(dqs, sels, k_blocks)
      ]
      for vjp, sel in zip(vjps or (), sels):  # the bias's vjp in its parameters, per branch
        (grads,) = vjp(_picked(ds_QxS, sel))
        dleaves = [a + g.astype(F32) for a, g in zip(dleaves, grads)]
      return dqs, dleaves

    return _visit(r, i, j, body, carry)

  init = (
    [jnp.zeros(do_QxE.shape, F32) for _ in range(n)],
    [jnp.zeros(x.shape, F32) for x in leaves],
  )
  last = ((i + 1) * bq + bk - 1) // bk
  dqs, dleaves = jax.lax.fori_loop(0, last, key_block, init)
  for ref, dq in zip(dq_refs, dqs):
    ref[...] = (dq * st.scale).astype(ref.dtype)
  for ref, dl in zip(dleaf_refs, dleaves):
    ref[...] = dl


def _dkv_kernel(*refs, st: _Static):
  r, rest = _split(refs, st)
  n = st.branches
  do_ref, lse_ref, delta_ref, dk_refs, dv_ref = (*rest[:3], rest[3 : 3 + n], rest[3 + n])
  h, j = pl.program_id(1), pl.program_id(2)
  bq, bk = st.block_q, st.block_k
  leaves = [x[...] for x in r.leaves]
  v_SxE = r.v[pl.ds(j * bk, bk), :]

  def query_block(i, carry):
    def body(carry):
      dks, dv = carry
      s_QxS, sels, q_blocks, _ = _scores(st, r, leaves, h, i, j)
      qs = pl.ds(i * bq, bq)
      do_QxE, lse_Q, delta_Q = do_ref[qs, :], lse_ref[qs], delta_ref[qs]
      p_QxS = jnp.exp(s_QxS - lse_Q[:, None])
      dv = dv + jnp.einsum(
        "qs,qe->se", p_QxS.astype(do_QxE.dtype), do_QxE, preferred_element_type=F32
      )
      dp_QxS = jnp.einsum("qe,se->qs", do_QxE, v_SxE, preferred_element_type=F32)
      ds_QxS = p_QxS * (dp_QxS - delta_Q[:, None])
      dks = [
        dk
        + jnp.einsum(
          "qs,qe->se", _picked(ds_QxS, sel).astype(q.dtype), q, preferred_element_type=F32
        )
        for dk, sel, q in zip(dks, sels, q_blocks)
      ]
      return dks, dv

    return _visit(r, i, j, body, carry)

  e = v_SxE.shape[-1]
  init = ([jnp.zeros((bk, e), F32) for _ in range(n)], jnp.zeros((bk, e), F32))
  first, num_q = (j * bk) // bq, r.bmask.shape[0]
  dks, dv = jax.lax.fori_loop(first, num_q, query_block, init)
  for ref, dk in zip(dk_refs, dks):
    ref[...] = dk.astype(ref.dtype)
  dv_ref[...] = dv.astype(dv_ref.dtype)


def _full(shape):
  """A whole-array block (parameters), the same for every program."""
  return pl.BlockSpec(shape, lambda *_: (0,) * len(shape))


def _head_slice(shape, axis):
  """The shape of one head's slice of a parameter: 1 on its heads `axis` (None: whole)."""
  return tuple(1 if a == axis else n for a, n in enumerate(shape))


def _leaf_spec(shape, axis, lead=0):
  """A parameter's block: program (b, h, x)'s head slice on its heads `axis`, else the whole
  array; `lead` leading axes of the output (the dq kernel's (b, x)) are squeezed in front."""
  if axis is None and not lead:
    return _full(shape)

  def index(b, h, x):
    return (b, x)[:lead] + tuple(h if a == axis else 0 for a in range(len(shape)))

  return pl.BlockSpec((None,) * lead + _head_slice(shape, axis), index)


def _in_specs(st: _Static, diff, nondiff) -> list:
  """One (b, h) row of every common input: whole sequences, sliced in the kernels."""
  qs, ks, v, leaves, sink = diff
  consts = nondiff[-1]
  tp, e = v.shape[2], v.shape[3]
  per = st.per
  q_spec = pl.BlockSpec((None, tp, None, e), lambda b, h, x: (b, 0, h, 0))
  k_spec = pl.BlockSpec((None, tp, None, e), lambda b, h, x: (b, 0, h // per, 0))
  row = pl.BlockSpec((None, tp), lambda b, h, x: (b, 0))
  bmask = nondiff[-2]
  specs = [q_spec] * len(qs) + [k_spec] * len(ks) + [row] * (2 * len(qs))
  specs += [pl.BlockSpec((None, None, tp, e), lambda b, h, x: (b, h // per, 0, 0))]  # v
  specs += [row] * 3  # pos, seg, doc
  specs += [pl.BlockSpec((None,) + bmask.shape[1:], lambda b, h, x: (b, 0, 0))]
  specs += [_leaf_spec(x.shape, a) for x, a in zip(leaves, st.head_axes)]
  specs += [_leaf_spec(x.shape, 0) for x in consts[: st.num_head_consts]]
  specs += [_full(x.shape) for x in consts[st.num_head_consts :]]
  # The sink: head h's entry alone (H need not be a power of two, Triton's sizes).
  return specs + ([_leaf_spec(sink.shape, 0)] if st.has_sink else [])


def _args(st, diff, nondiff) -> list:
  qs, ks, v, leaves, sink = diff
  q_pos, k_pos, pos, seg, doc, bmask, consts = nondiff
  return [*qs, *ks, *q_pos, *k_pos, v, pos, seg, doc, bmask, *leaves, *consts] + (
    [sink] if st.has_sink else []
  )


def _compiler_params(st: _Static):
  """Triton on GPU: this kernel reads whole-row refs with `pl.ds` slices, Triton's model (jax's
  default GPU lowering is Mosaic GPU, which wants explicit pipelines); the backend's default
  elsewhere (Mosaic on TPU, none in interpret mode)."""
  if st.interpret or st.backend not in GPUS:
    return None
  from jax.experimental.pallas import triton as pl_triton

  return pl_triton.CompilerParams(**TRITON)


def _call(kernel, st, grid, diff, nondiff, extra, out_specs, out_shape):
  extra_args, extra_specs = extra
  return pl.pallas_call(
    functools.partial(kernel, st=st),
    grid=grid,
    in_specs=_in_specs(st, diff, nondiff) + extra_specs,
    out_specs=out_specs,
    out_shape=out_shape,
    interpret=st.interpret,
    compiler_params=_compiler_params(st),
  )(*_args(st, diff, nondiff), *extra_args)


def _forward(st: _Static, diff, nondiff):
  qs, _, v, _, _ = diff
  b, tp, h, e = qs[0].shape
  grid = (b, h, tp // st.block_q)
  return _call(
    _fwd_kernel,
    st,
    grid,
    diff,
    nondiff,
    ([], []),
    [
      pl.BlockSpec((None, None, st.block_q, e), lambda b, h, x: (b, h, x, 0)),
      pl.BlockSpec((None, None, st.block_q), lambda b, h, x: (b, h, x)),
    ],
    [jax.ShapeDtypeStruct((b, h, tp, e), qs[0].dtype), jax.ShapeDtypeStruct((b, h, tp), F32)],
  )


def _dleaf_shape(grid, shape, axis):
  """The dq kernel's gradient of one parameter, one block per program, summed outside over
  the leading axes: (B, query blocks) + shape for a per-head parameter (program (b, h, i)
  writes head h's slice), (B, H, query blocks) + shape for a whole one."""
  b, h, nq = grid
  lead = (b, nq) if axis is not None else (b, h, nq)
  return jax.ShapeDtypeStruct(lead + shape, F32)


def _dleaf_spec(shape, axis):
  """Program (b, h, i)'s block of `_dleaf_shape`."""
  if axis is not None:
    return _leaf_spec(shape, axis, lead=2)
  n = len(shape)
  return pl.BlockSpec((None, None, None) + shape, lambda b, h, i: (b, h, i) + (0,) * n)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _flash(st: _Static, diff, nondiff):
  return _forward(st, diff, nondiff)[0]


def _flash_fwd(st, diff, nondiff):
  out, lse = _forward(st, diff, nondiff)
  return out, (diff, nondiff, out, lse)


def _flash_bwd(st, res, do_BxHxTxE):
  diff, nondiff, out_BxHxTxE, lse_BxHxT = res
  qs, ks, v, leaves, sink = diff
  b, tp, h, e = qs[0].shape
  g = v.shape[1]
  delta_BxHxT = jnp.sum(do_BxHxTxE.astype(F32) * out_BxHxTxE.astype(F32), -1)
  rows = pl.BlockSpec((None, None, tp), lambda b, h, x: (b, h, 0))
  extra = (
    [do_BxHxTxE, lse_BxHxT, delta_BxHxT],
    [pl.BlockSpec((None, None, tp, e), lambda b, h, x: (b, h, 0, 0)), rows, rows],
  )
  nq, nk = tp // st.block_q, tp // st.block_k
  token_major = jax.ShapeDtypeStruct((b, tp, h, e), qs[0].dtype)
  dq_out = _call(
    _dq_kernel,
    st,
    (b, h, nq),
    diff,
    nondiff,
    extra,
    [pl.BlockSpec((None, st.block_q, None, e), lambda b, h, x: (b, x, h, 0))] * len(qs)
    + [_dleaf_spec(x.shape, a) for x, a in zip(leaves, st.head_axes)],
    [token_major] * len(qs)
    + [_dleaf_shape((b, h, nq), x.shape, a) for x, a in zip(leaves, st.head_axes)],
  )
  dqs, dleaves = (
    list(dq_out[: len(qs)]),
    [
      d.sum(tuple(range(d.ndim - x.ndim))).astype(x.dtype)
      for d, x in zip(dq_out[len(qs) :], leaves)
    ],
  )
  dkv_out = _call(
    _dkv_kernel,
    st,
    (b, h, nk),
    diff,
    nondiff,
    extra,
    [pl.BlockSpec((None, st.block_k, None, e), lambda b, h, x: (b, x, h, 0))] * len(ks)
    + [pl.BlockSpec((None, None, st.block_k, e), lambda b, h, x: (b, h, x, 0))],
    [jax.ShapeDtypeStruct((b, tp, h, e), ks[0].dtype)] * len(ks)
    + [jax.ShapeDtypeStruct((b, h, tp, e), v.dtype)],
  )
  # Per query head, summed over the P heads of each kv head (GQA).
  dks = [dk.reshape(b, tp, g, st.per, e).sum(3) for dk in dkv_out[:-1]]
  dv = dkv_out[-1].reshape(b, g, st.per, tp, e).sum(2)
  dsink = None
  if st.has_sink:  # the sink's weight exp(sink - lse), times -delta (attention._softmax_bwd)
    weight_BxHxT = jnp.exp(sink[None, :, None] - lse_BxHxT)
    dsink = -jnp.sum(weight_BxHxT * delta_BxHxT, (0, 2)).astype(sink.dtype)
  return (dqs, dks, dv, dleaves, dsink), None


_flash.defvjp(_flash_fwd, _flash_bwd)


def block_mask(seg_BxT, doc_BxT, pattern, block_q: int, block_k: int) -> jax.Array:
  """B x (T / block_q) x (T / block_k) int32: 1 where some query of the query block may see some
  key of the key block (causal, same document, inside the pattern). Built one query block at a
  time (memory B x block_q x T); the kernels skip the zero blocks."""
  b, tp = seg_BxT.shape
  k_idx_T = jnp.arange(tp)

  def row(i):
    rows = functools.partial(
      jax.lax.dynamic_slice_in_dim, start_index=i * block_q, slice_size=block_q, axis=1
    )
    allowed_BxQxT = attention.visible(
      i * block_q + jnp.arange(block_q),
      k_idx_T,
      rows(seg_BxT),
      seg_BxT,
      rows(doc_BxT),
      doc_BxT,
      pattern,
    )
    return allowed_BxQxT.reshape(b, block_q, tp // block_k, block_k).any((1, 3))

  return jnp.moveaxis(jax.lax.map(row, jnp.arange(tp // block_q)), 0, 1).astype(jnp.int32)


HEADS = "heads"  # the logical axis of a per-head parameter (lcx/run/sharding.py's rules)


def _head_axes(state) -> tuple:
  """Each parameter's "heads" axis, from its Variable's `logical_axes` metadata, or None. The
  hook gets head h's slice alone, so it must build head h's bias from head h's entries only
  (every registered scheme does: tests/model/kernels/test_flash.py holds each to the dense path)."""
  variables = jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, nnx.Variable))
  axes = [tuple(v.get_metadata().get("logical_axes") or ()) for v in variables]
  return tuple(a.index(HEADS) if HEADS in a else None for a in axes)


def _head_constants(scheme) -> list:
  """The scheme's declared per-head tuples (`Scheme.head_constants`) as float32 H arrays."""
  return [jnp.asarray(getattr(scheme, n), F32) for n in getattr(scheme, "head_constants", ())]


def _traced_bias(scheme, block_q: int, block_k: int):
  """(the scheme's `kernel_bias` hook on one 1 x block_q x block_k block as a jaxpr of
  (parameters..., per-head constants..., q positions, k positions), the constants it captured),
  or (None, []) without a bias.

  Traced on one-head slices of each per-head parameter (`_head_axes`) and constant
  (`_head_constants`, set on the rebuilt module in place of its tuple), so a hook whose
  per-head inputs are all of these returns a one-head bias: a program evaluates only its own
  head. Captured constants become kernel inputs: a Pallas kernel may capture none.
  """
  module, rewrap = positions_base.unwrapped(scheme)  # a BiasWrapper's parameters: its inner's
  graphdef, state = nnx.split(module)
  leaves, treedef = jax.tree.flatten(state)
  leaves = [
    x if a is None else jax.lax.slice_in_dim(x, 0, 1, axis=a)
    for x, a in zip(leaves, _head_axes(state))
  ]
  names = getattr(module, "head_constants", ())

  def bias(*args):
    *params, q_pos_1xQ, k_pos_1xS = args
    module = nnx.merge(graphdef, jax.tree.unflatten(treedef, params[: len(leaves)]))
    for name, x_1 in zip(names, params[len(leaves) :]):
      setattr(module, name, nnx.data(x_1))
    return rewrap(module).kernel_bias(q_pos_1xQ, k_pos_1xS)

  blocks = (jnp.zeros((1, block_q), F32), jnp.zeros((1, block_k), F32))
  head_consts = [x[:1] for x in _head_constants(module)]
  closed = jax.make_jaxpr(bias)(*leaves, *head_consts, *blocks)
  if not closed.out_avals:
    return None, []
  return closed.jaxpr, list(closed.consts)


def flash_attention(
  qk_pairs,
  v_BxGxTxE,
  branches,
  pos_BxT,
  seg_BxT,
  doc_BxT,
  *,
  scheme,
  pattern=None,
  sink_H=None,
  block_q: int = BLOCK,
  block_k: int = BLOCK,
  interpret: bool | None = None,
  backend: str | None = None,
) -> jax.Array:
  """-> out_BxHxTxE; the inputs of `reference.attention_reference` (q, k already rotated).

  T is padded to a multiple of the blocks (each a power of two, at most T's next power of two);
  padded keys come after every real query, so causality hides them. E is padded with zeros to
  a power of two. Branch positions go in as
  float32, so a bias hook takes its elementwise path (FIRE: no gather, no cond). `backend`
  (default: jax's) is the platform lowered for: interpret mode on CPU unless `interpret` says.
  """
  b, t, h, e = qk_pairs[0][0].shape
  g = qk_pairs[0][1].shape[2]
  bq = min(pl.next_power_of_2(block_q), pl.next_power_of_2(t))
  bk = min(pl.next_power_of_2(block_k), pl.next_power_of_2(t))
  tp = pl.cdiv(t, max(bq, bk)) * max(bq, bk)

  def pad(x, axis=1):
    return jnp.pad(x, [(0, tp - t) if a == axis else (0, 0) for a in range(x.ndim)], mode="edge")

  # E padded with zeros to a power of two (Triton's block sizes): q.k and p.v are unchanged
  # and the output's padded features are cut; the scale stays E's.
  ep = pl.next_power_of_2(e)

  def pad_e(x):
    return jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, ep - e)])

  backend = jax.default_backend() if backend is None else backend
  module, _ = positions_base.unwrapped(scheme)
  state = nnx.state(module)
  bias, consts = _traced_bias(scheme, bq, bk)
  # Parameters are inputs only for a bias: a learned position table (embedded outside) is no
  # kernel's business, and on a GPU an input of another size than a power of two fails.
  leaves, head_axes = (jax.tree.leaves(state), _head_axes(state)) if bias is not None else ([], ())
  head_consts = _head_constants(module) if bias is not None else []
  st = _Static(
    uses=tuple(br.use for br in branches),
    pattern=pattern,
    bias=bias,
    num_leaves=len(leaves),
    num_consts=len(head_consts) + len(consts),
    num_head_consts=len(head_consts),
    head_axes=head_axes,
    has_sink=sink_H is not None,
    per=h // g,
    block_q=bq,
    block_k=bk,
    scale=e**-0.5,
    interpret=backend == "cpu" if interpret is None else interpret,
    backend=backend,
  )
  seg, doc = pad(seg_BxT.astype(jnp.int32)), pad(doc_BxT.astype(jnp.int32))
  diff = (
    [pad_e(pad(q)) for q, _ in qk_pairs],
    [pad_e(pad(k)) for _, k in qk_pairs],
    pad_e(pad(v_BxGxTxE, axis=2)),
    leaves,
    None if sink_H is None else sink_H.astype(F32),
  )
  nondiff = (
    [pad(jnp.asarray(br.q_pos, F32)) for br in branches],
    [pad(jnp.asarray(br.k_pos, F32)) for br in branches],
    pad(pos_BxT),
    seg,
    doc,
    block_mask(seg, doc, pattern, bq, bk),
    head_consts + [jnp.asarray(c) for c in consts],
  )
  return _flash(st, diff, nondiff)[:, :, :t, :e]
