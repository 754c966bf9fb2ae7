"""Flash attention in Pallas: online softmax over key blocks, a Pallas backward that recomputes
the probabilities block by block from the saved logsumexp, never a T x T array.

The score of a (query block, key block) pair is built inside the kernel from the block's own
positions, with the same ingredients as lcx.model.attention's kernels:
  - one (q, k) pair per remap branch (rotated outside: rotation is O(T); q scaled by 1/sqrt(E)
    there too, once), merged by each branch's `use` mask on the true positions (Self-Extend,
    ReRoPE),
  - a bias of the distance alone (`Scheme.bias_of_distance`: ALiBi, KERPLE, Sandwich, T5,
    randomized distances) on integer positions: a distance table (`_Table`), head h's bias at
    every distance -N .. N - 1 (N = T's next power of two), computed once per call in XLA
    from the scheme's own `bias` hook, where it is differentiable; each block reads
    table[q - k] (a gather from the head's row) and the dq kernel sums dS against the table's
    Jacobian in each per-head parameter, whose gradient XLA then routes to the parameters.
    No transcendental, division or floor of the scheme's runs in a kernel. Positions past the
    table (randomized training positions) take the hook kernels instead (`lax.cond`),
  - any other bias: the scheme's own `kernel_bias` hook (`bias`, unless the scheme restates it
    without a gather or a batched matmul: T5, Sandwich) called on the block's positions: the
    scheme's parameters go in as kernel inputs and the module is rebuilt inside
    (`nnx.merge`), so a new bias scheme gets the fused kernel with no kernel code, and its
    parameters' gradient is the hook's vjp on each block, summed over blocks. A parameter with
    a "heads" logical axis (KERPLE's r1, r2; T5's table) and a scheme's declared per-head
    tuples (`Scheme.head_constants`: ALiBi's slopes) go in as the program's head slice and the
    hook is traced on slices, so it returns one head's bias (Q x S per block, not H x Q x S);
    other parameters (FIRE's) and captured constants go in whole and the hook's H heads are
    cut to the program's,
  - an input hook's prefix sums c (FoX's log forget gates): c_i - c_j from the query and key
    blocks' rows of c; its gradient is the dq kernel's row sums of dS minus the dk/dv kernel's
    column sums,
  - causality, packed documents (segment ids) and the sparse pattern (on in-document indices).
    Each program's loop bounds come from O(1) reads of its row (`_key_ranges`,
    `_query_ranges`): a query block visits the key blocks from its first query's document
    start through its diagonal, a key block the query blocks from its diagonal through its
    last key's document end (`doc_end`), both inside a sliding window's reach (`_window`);
    no T x T or blocks x blocks array at any length.
    Only the edge blocks of these ranges are masked; the interior ones (inside one document,
    below the diagonal, no pattern) run in a loop of their own without a mask,
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

from lcx.model import attention, patterns
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


@dataclasses.dataclass
class _Block:
  """One (query block, key block) pair's merged, masked f32 logits and what the backward
  kernels reuse: each branch's selection (None with one branch), its table indices (table
  mode) and its vjp of the hook in the parameters (hook mode, when asked)."""

  s_QxS: Any
  sels: list
  idxs: list
  vjps: list


def _scores(st, r: _Refs, leaves, h, i, j, q_blocks, *, masked=True, want_vjps=False):
  """Query block i (its q blocks per branch, scaled) against key block j for head h.
  `masked`: apply causality, documents and the pattern (an edge block); an interior block
  (`_ranges`) is all visible."""
  qs, ks = pl.ds(i * st.block_q, st.block_q), pl.ds(j * st.block_k, st.block_k)
  logits, idxs, vjps = [], [], []
  for b, q in enumerate(q_blocks):
    s_QxS = jnp.einsum("qe,se->qs", q, r.ks[b][ks, :], preferred_element_type=F32)
    idx = None
    if st.table is not None:  # the head's row of the distance table at q - k
      idx = r.q_pos[b][qs][:, None] - r.k_pos[b][ks][None, :] + st.table.half
      s_QxS = s_QxS + r.params[0][idx]
    elif st.bias is not None:
      q_pos, k_pos = r.q_pos[b][qs], r.k_pos[b][ks]
      if not want_vjps:
        bias_QxS = _head_bias(st, r, leaves, q_pos, k_pos, h)
      else:
        bias_QxS, vjp = jax.vjp(
          lambda lv: _head_bias(st, r, lv, q_pos, k_pos, h, evaluate=jax.core.eval_jaxpr),
          leaves,
        )
        vjps.append(vjp)
      s_QxS = s_QxS + bias_QxS
    logits.append(s_QxS)
    idxs.append(idx)
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
  if st.has_prefix:  # c_i - c_j (FoX), on the merged logits as attention.logits
    s_QxS = s_QxS + (r.prefix[qs][:, None] - r.prefix[ks][None, :])
  if masked:
    q_idx = i * st.block_q + jnp.arange(st.block_q)
    k_idx = j * st.block_k + jnp.arange(st.block_k)
    seg_q, seg_k, doc_q, doc_k = r.seg[qs], r.seg[ks], r.doc[qs], r.doc[ks]
    mask_QxS = attention.visible(
      q_idx, k_idx, seg_q[None], seg_k[None], doc_q[None], doc_k[None], st.pattern
    )[0]
    s_QxS = jnp.where(mask_QxS, s_QxS, NEG_INF)
  return _Block(s_QxS, sels, idxs, vjps)


def _picked(ds_QxS, sel):
  return ds_QxS if sel is None else jnp.where(sel, ds_QxS, 0.0)


def _cdiv(a, b):
  return (a + b - 1) // b


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
  lo, hi = start_first // bk, last // bk + 1
  if st.pattern is not None:  # every block masked: one loop, from the window's first key
    window = _window(st.pattern)
    if window is not None:
      lo = jnp.maximum(lo, jnp.maximum(first - window + 1, 0) // bk)
    return ((lo, hi, True),)
  interior_hi = jnp.where(start_first == start_last, (first + 1) // bk, 0)
  return _ranges(lo, _cdiv(start_last, bk), interior_hi, hi)


def _query_ranges(st, r: _Refs, j):
  """Key block j's query blocks: from its first key's block (causality) through the block of
  its last key's document end (`_doc_end`). Interior: every query at or after the last key
  and in the keys' one document (no pattern)."""
  bq, bk = st.block_q, st.block_k
  first, last = j * bk, j * bk + bk - 1
  end_first, end_last = r.end[first], r.end[last]
  lo, hi = first // bq, end_last // bq + 1
  if st.pattern is not None:  # every block masked: one loop, up to the window's last query
    window = _window(st.pattern)
    if window is not None:
      hi = jnp.minimum(hi, (last + window - 1) // bq + 1)
    return ((lo, hi, True),)
  interior_hi = jnp.where(end_first == end_last, (end_first + 1) // bq, 0)
  return _ranges(lo, _cdiv(last, bq), interior_hi, hi)


def _loop(ranges, block, carry):
  """carry through `block(x, carry, masked)` over each range, edges masked."""
  for lo, hi, masked in ranges:
    carry = jax.lax.fori_loop(lo, hi, functools.partial(block, masked=masked), carry)
  return carry


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
  head h's row of the Jacobian, num_jac x 2 half flat)."""
  n = 2 * st.table.half
  p_P = jnp.arange(st.table.num_jac)
  for idx, sel in zip(blk.idxs, blk.sels):
    ds = _picked(ds_QxS, sel)
    for p in range(st.table.num_jac):
      dtheta_P = dtheta_P + jnp.where(p_P == p, jnp.sum(ds * jac[idx + p * n]), 0.0)
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
      dleaves = [_jac_sums(st, jac_ref, blk, ds_QxS, dleaves[0])]
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


def _head_row(n):
  """Head h's row of an H x n array, squeezed to n (a table the kernels index)."""
  return pl.BlockSpec((None, n), lambda b, h, x: (h, 0))


def _in_specs(st: _Static, params, named) -> list:
  """One (b, h) row of every common input (`_kernel_inputs`): whole sequences, sliced in the
  kernels."""
  qs, ks, v, sink, consts = (named[n] for n in ("qs", "ks", "v", "sink", "consts"))
  tp, e = v.shape[2], v.shape[3]
  per = st.per
  q_spec = pl.BlockSpec((None, tp, None, e), lambda b, h, x: (b, 0, h, 0))
  k_spec = pl.BlockSpec((None, tp, None, e), lambda b, h, x: (b, 0, h // per, 0))
  row = pl.BlockSpec((None, tp), lambda b, h, x: (b, 0))
  specs = [q_spec] * len(qs) + [k_spec] * len(ks) + [row] * (2 * len(qs))
  specs += [pl.BlockSpec((None, None, tp, e), lambda b, h, x: (b, h // per, 0, 0))]  # v
  specs += [row] * 4  # pos, seg, doc, end
  if st.table is not None:
    specs += [_head_row(x.shape[1]) for x in params]
  else:
    specs += [_leaf_spec(x.shape, a) for x, a in zip(params, st.head_axes)]
  specs += [_leaf_spec(x.shape, 0) for x in consts[: st.num_head_consts]]
  specs += [_full(x.shape) for x in consts[st.num_head_consts :]]
  # The sink: head h's entry alone (H need not be a power of two, Triton's sizes).
  specs += [_leaf_spec(sink.shape, 0)] if st.has_sink else []
  return specs + (
    [pl.BlockSpec((None, None, tp), lambda b, h, x: (b, h, 0))] if st.has_prefix else []
  )


def _args(st, params, named) -> list:
  """The common inputs in `_in_specs`'s order."""
  n = named
  return (
    [
      *n["qs"],
      *n["ks"],
      *n["q_pos"],
      *n["k_pos"],
      n["v"],
      n["pos"],
      n["seg"],
      n["doc"],
      n["end"],
      *params,
      *n["consts"],
    ]
    + ([n["sink"]] if st.has_sink else [])
    + ([n["prefix"]] if st.has_prefix else [])
  )


def _compiler_params(st: _Static):
  """Triton on GPU: this kernel reads whole-row refs with `pl.ds` slices, Triton's model (jax's
  default GPU lowering is Mosaic GPU, which wants explicit pipelines); the backend's default
  elsewhere (Mosaic on TPU, none in interpret mode)."""
  if st.interpret or st.backend not in GPUS:
    return None
  from jax.experimental.pallas import triton as pl_triton

  return pl_triton.CompilerParams(**TRITON)


def _kernel_inputs(st: _Static, diff, nondiff) -> tuple[list, dict]:
  """(the parameter inputs: the distance table, or the leaves; every input by name), from
  `_flash`'s differentiable and fixed arguments."""
  qs, ks, v, leaves, sink, prefix = diff
  q_pos, k_pos, pos, seg, doc, end, consts, table_params = nondiff
  params = leaves if st.table is None else table_params[:1]
  names = dict(qs=qs, ks=ks, v=v, sink=sink, prefix=prefix, q_pos=q_pos, k_pos=k_pos)
  return params, names | dict(pos=pos, seg=seg, doc=doc, end=end, consts=consts)


def _call(kernel, st, grid, inputs, extra, out_specs, out_shape):
  params, named = inputs
  extra_args, extra_specs = extra
  return pl.pallas_call(
    functools.partial(kernel, st=st),
    grid=grid,
    in_specs=_in_specs(st, params, named) + extra_specs,
    out_specs=out_specs,
    out_shape=out_shape,
    interpret=st.interpret,
    compiler_params=_compiler_params(st),
  )(*_args(st, params, named), *extra_args)


def _forward(st: _Static, inputs):
  qs = inputs[1]["qs"]
  b, tp, h, e = qs[0].shape
  grid = (b, h, tp // st.block_q)
  return _call(
    _fwd_kernel,
    st,
    grid,
    inputs,
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


def _dparam_outputs(st, grid, leaves):
  """The dq kernel's parameter-gradient outputs (specs, shapes): per leaf (hook mode), or one
  B x H x (query blocks) x P block of table-parameter sums (table mode, summed outside)."""
  if st.table is None:
    return (
      [_dleaf_spec(x.shape, a) for x, a in zip(leaves, st.head_axes)],
      [_dleaf_shape(grid, x.shape, a) for x, a in zip(leaves, st.head_axes)],
    )
  if not st.table.num_jac:
    return [], []
  p = st.table.num_jac
  spec = pl.BlockSpec((None, None, None, p), lambda b, h, i: (b, h, i, 0))
  return [spec], [jax.ShapeDtypeStruct(grid + (p,), F32)]


def _dleaves(st, leaves, douts):
  """The parameters' gradients from the dq kernel's outputs, summed over its programs; in
  table mode through the per-head parameter vector (`_Table.theta`)."""
  if st.table is None:
    return [d.sum(tuple(range(d.ndim - x.ndim))).astype(x.dtype) for d, x in zip(douts, leaves)]
  if not leaves:
    return []
  (d_BxHxNxP,) = douts
  dtheta_HxP = d_BxHxNxP.sum((0, 2))
  _, vjp = jax.vjp(st.table.theta, leaves)
  (dleaves,) = vjp(dtheta_HxP)
  return [d.astype(x.dtype) for d, x in zip(dleaves, leaves)]


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _flash(st: _Static, diff, nondiff):
  return _forward(st, _kernel_inputs(st, diff, nondiff))[0]


def _flash_fwd(st, diff, nondiff):
  out, lse = _forward(st, _kernel_inputs(st, diff, nondiff))
  return out, (diff, nondiff, out, lse)


def _flash_bwd(st, res, do_BxHxTxE):
  diff, nondiff, out_BxHxTxE, lse_BxHxT = res
  qs, ks, v, leaves, sink, prefix = diff
  inputs = _kernel_inputs(st, diff, nondiff)
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
  prefix_rows = jax.ShapeDtypeStruct((b, h, tp), F32)
  dparam_specs, dparam_shapes = _dparam_outputs(st, (b, h, nq), leaves)
  block_row = [pl.BlockSpec((None, None, st.block_q), lambda b, h, x: (b, h, x))]
  dq_extra = extra
  if st.table is not None and st.table.num_jac:  # the table's Jacobian: the dq kernel's alone
    jac_HxPN = nondiff[-1][1]
    dq_extra = (extra[0] + [jac_HxPN], extra[1] + [_head_row(jac_HxPN.shape[1])])
  dq_out = _call(
    _dq_kernel,
    st,
    (b, h, nq),
    inputs,
    dq_extra,
    [pl.BlockSpec((None, st.block_q, None, e), lambda b, h, x: (b, x, h, 0))] * len(qs)
    + dparam_specs
    + (block_row if st.has_prefix else []),
    [token_major] * len(qs) + dparam_shapes + ([prefix_rows] if st.has_prefix else []),
  )
  dqs = list(dq_out[: len(qs)])
  dleaves = _dleaves(st, leaves, dq_out[len(qs) : len(qs) + len(dparam_shapes)])
  key_row = [pl.BlockSpec((None, None, st.block_k), lambda b, h, x: (b, h, x))]
  dkv_out = _call(
    _dkv_kernel,
    st,
    (b, h, nk),
    inputs,
    extra,
    [pl.BlockSpec((None, st.block_k, None, e), lambda b, h, x: (b, x, h, 0))] * len(ks)
    + [pl.BlockSpec((None, None, st.block_k, e), lambda b, h, x: (b, h, x, 0))]
    + (key_row if st.has_prefix else []),
    [jax.ShapeDtypeStruct((b, tp, h, e), ks[0].dtype)] * len(ks)
    + [jax.ShapeDtypeStruct((b, h, tp, e), v.dtype)]
    + ([prefix_rows] if st.has_prefix else []),
  )
  n = len(ks)
  # Per query head, summed over the P heads of each kv head (GQA).
  dks = [dk.reshape(b, tp, g, st.per, e).sum(3) for dk in dkv_out[:n]]
  dv = dkv_out[n].reshape(b, g, st.per, tp, e).sum(2)
  dprefix = dq_out[-1] + dkv_out[-1] if st.has_prefix else None
  dsink = None
  if st.has_sink:  # the sink's weight exp(sink - lse), times -delta (attention._softmax_bwd)
    weight_BxHxT = jnp.exp(sink[None, :, None] - lse_BxHxT)
    dsink = -jnp.sum(weight_BxHxT * delta_BxHxT, (0, 2)).astype(sink.dtype)
  return (dqs, dks, dv, dleaves, dsink, dprefix), None


_flash.defvjp(_flash_fwd, _flash_bwd)


def doc_end(seg_BxT) -> jax.Array:
  """Each token's document's last index, B x T int32 (documents: contiguous runs of a
  segment id): key block j's queries end at its last key's (`_query_ranges`). O(T)."""
  b, t = seg_BxT.shape
  idx_BxT = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
  ends = jnp.concatenate(
    [seg_BxT[:, 1:] != seg_BxT[:, :-1], jnp.ones_like(seg_BxT[:, :1], bool)], axis=1
  )
  return jax.lax.cummin(jnp.where(ends, idx_BxT, t - 1), axis=1, reverse=True)


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


def _sliced_hook(scheme, hook: str):
  """(fn(parameters..., per-head constants..., q positions, k positions) -> the scheme's
  `hook` on a module rebuilt from them, its parameters, their heads axes, its per-head
  constants). Called with one head's slices, the rebuilt module is one head's."""
  module, rewrap = positions_base.unwrapped(scheme)  # a BiasWrapper's parameters: its inner's
  graphdef, state = nnx.split(module)
  leaves, treedef = jax.tree.flatten(state)
  names = getattr(module, "head_constants", ())

  def call(*args):
    *params, q_pos, k_pos = args
    module = nnx.merge(graphdef, jax.tree.unflatten(treedef, params[: len(leaves)]))
    for name, x_1 in zip(names, params[len(leaves) :]):
      setattr(module, name, nnx.data(x_1))
    return getattr(rewrap(module), hook)(q_pos, k_pos)

  return call, leaves, _head_axes(state), _head_constants(module)


def _traced_bias(scheme, block_q: int, block_k: int):
  """(the scheme's `kernel_bias` hook on one 1 x block_q x block_k block as a jaxpr of
  (parameters..., per-head constants..., q positions, k positions), the constants it captured),
  or (None, []) without a bias.

  Traced on one-head slices of each per-head parameter (`_head_axes`) and constant
  (`_head_constants`, set on the rebuilt module in place of its tuple), so a hook whose
  per-head inputs are all of these returns a one-head bias: a program evaluates only its own
  head. Captured constants become kernel inputs: a Pallas kernel may capture none.
  """
  call, leaves, axes, head_consts = _sliced_hook(scheme, "kernel_bias")
  leaves = [x if a is None else jax.lax.slice_in_dim(x, 0, 1, axis=a) for x, a in zip(leaves, axes)]
  blocks = (jnp.zeros((1, block_q), F32), jnp.zeros((1, block_k), F32))
  closed = jax.make_jaxpr(call)(*leaves, *[x[:1] for x in head_consts], *blocks)
  if not closed.out_avals:
    return None, []
  return closed.jaxpr, list(closed.consts)


@dataclasses.dataclass(frozen=True, eq=False)
class _Table:
  """Distance-table mode: the bias of head h at distance d = q - k (remapped integer
  positions, |d| < half) is table[h, d + half], computed once per call in XLA (`fn`), where it
  is differentiable. The kernels read it per block (a gather from a whole row) and, for the
  parameters' gradient, the table's derivative in each of head h's `num_jac` parameters
  (`theta`: one vector per head), summed against dS in the dq kernel."""

  half: int
  num_jac: int
  theta: Any  # leaves -> H x num_jac: each head's parameters, flattened (zero-padded)


def _distance_table(scheme, half: int, heads: int) -> tuple[_Table, Any] | None:
  """(the scheme's `_Table` over distances -half .. half - 1, fn(leaves) -> (table H x 2 half,
  its Jacobian H x (num_jac * 2 half) or None)), or None: a scheme that does not declare its
  bias a function of the distance alone (`Scheme.bias_of_distance`), or one with a parameter
  shared by heads. `fn` runs outside the kernels' custom_vjp: it closes over arrays."""
  if not getattr(scheme, "bias_of_distance", False):
    return None
  call, leaves, axes, head_consts = _sliced_hook(scheme, "bias")
  if any(a is None for a in axes):
    return None
  d_1xN = jnp.arange(-half, half, dtype=jnp.int32)[None]
  sizes = [x.size // x.shape[a] for x, a in zip(leaves, axes)]
  num = sum(sizes)
  num_jac = pl.next_power_of_2(num) if num else 0  # Triton's sizes

  def theta(leaves):  # H x num_jac
    flat = [jnp.moveaxis(x, a, 0).reshape(x.shape[a], -1) for x, a in zip(leaves, axes)]
    flat_HxP = jnp.concatenate(flat, 1) if flat else jnp.zeros((heads, 0), F32)
    return jnp.pad(flat_HxP, ((0, 0), (0, num_jac - num)))

  def one_head(theta_P, consts_1, h):
    """Head h's row from its own parameters and constants (a hook that still returns every
    head, from constants of its own, gives its row h)."""
    params, at = [], 0
    for x, a, size in zip(leaves, axes, sizes):
      params.append(theta_P[at : at + size].reshape(_head_slice(x.shape, a)).astype(x.dtype))
      at += size
    bias = call(*params, *[c[None] for c in consts_1], d_1xN, jnp.zeros((1, 1), jnp.int32))
    bias_NxS = jnp.broadcast_to(bias, (1, bias.shape[1], 2 * half, 1))[0, :, :, 0]
    return (bias_NxS[0] if bias_NxS.shape[0] == 1 else _of_head(bias_NxS, h)).astype(F32)

  def fn(leaves):
    theta_HxP = theta([x.astype(F32) for x in leaves])
    args = (theta_HxP, head_consts, jnp.arange(heads))
    table_HxN = jax.vmap(one_head)(*args)
    if not num_jac:
      return table_HxN, None
    jac_HxNxP = jax.vmap(jax.jacfwd(one_head))(*args)
    return table_HxN, jnp.swapaxes(jac_HxNxP, 1, 2).reshape(heads, -1)

  return _Table(half, num_jac, theta), fn


def _int_positions(branches) -> bool:
  return all(
    jnp.issubdtype(jnp.asarray(x).dtype, jnp.integer)
    for br in branches
    for x in (br.q_pos, br.k_pos)
  )


def _in_table(branches, half: int) -> jax.Array:
  """Whether every branch position lies in [0, half): then every distance indexes the table.
  Randomized training positions may reach past it: the hook kernels then run instead."""
  ok = jnp.asarray(True)
  for br in branches:
    for x in (br.q_pos, br.k_pos):
      ok = ok & (jnp.min(x) >= 0) & (jnp.max(x) < half)
  return ok


def _padded_documents(doc_BxT, tp: int) -> jax.Array:
  """In-document indices padded to tp by continuing the last document (its segment id is
  edge-padded), so a padded query's range starts at that document's start, as its mask does:
  the backward kernels then see the logsumexp its own keys gave."""
  t = doc_BxT.shape[1]
  more = doc_BxT[:, -1:].astype(jnp.int32) + jnp.arange(1, tp - t + 1, dtype=jnp.int32)[None]
  return jnp.concatenate([doc_BxT.astype(jnp.int32), more], 1)


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
  prefix_BxSxH=None,
  block_q: int = BLOCK,
  block_k: int = BLOCK,
  interpret: bool | None = None,
  backend: str | None = None,
) -> jax.Array:
  """-> out_BxHxTxE; the inputs of `reference.attention_reference` (q, k already rotated).

  T is padded to a multiple of the blocks (each a power of two, at most T's next power of two);
  padded tokens continue the last document, after every real query, so causality hides them.
  E is padded with zeros to a power of two. q is scaled by 1/sqrt(E) here, once.

  A scheme whose bias is a function of the distance alone (`Scheme.bias_of_distance`: ALiBi,
  KERPLE, Sandwich, T5, randomized distances) on integer positions goes in as a distance
  table (`_Table`), evaluated once here: the kernels read it and call no hook. Positions past
  the table (randomized training positions) take the hook kernels (`lax.cond`). Other
  biases (FIRE, fractional remaps) call the scheme's `kernel_bias` hook per block on float32
  positions. `prefix_BxSxH`: an input hook's prefix sums c (FoX), or None.
  `backend` (default: jax's) is the platform lowered for: interpret mode on CPU unless
  `interpret` says.
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
  half = pl.next_power_of_2(tp)
  found = (
    _distance_table(scheme, half, h) if bias is not None and _int_positions(branches) else None
  )
  table, table_params = None, []
  if found is not None:  # evaluated once here; its gradient comes back through `leaves`
    table, table_fn = found
    table_params = list(table_fn(jax.lax.stop_gradient(leaves)))
  seg, doc = pad(seg_BxT.astype(jnp.int32)), _padded_documents(doc_BxT, tp)
  scale = e**-0.5
  prefix = None if prefix_BxSxH is None else jnp.swapaxes(pad(prefix_BxSxH.astype(F32)), 1, 2)
  diff = (
    [pad_e(pad(q)) * jnp.asarray(scale, q.dtype) for q, _ in qk_pairs],
    [pad_e(pad(k)) for _, k in qk_pairs],
    pad_e(pad(v_BxGxTxE, axis=2)),
    leaves,
    None if sink_H is None else sink_H.astype(F32),
    prefix,
  )

  def run(table):
    """The kernels in table mode (`table`) or calling the hook (None)."""
    head_consts = _head_constants(module) if bias is not None and table is None else []
    hook_consts = [jnp.asarray(c) for c in consts] if table is None else []
    st = _Static(
      uses=tuple(br.use for br in branches),
      pattern=pattern,
      bias=bias if table is None else None,
      num_leaves=len(leaves),
      num_consts=len(head_consts) + len(hook_consts),
      num_head_consts=len(head_consts),
      head_axes=head_axes,
      has_sink=sink_H is not None,
      per=h // g,
      block_q=bq,
      block_k=bk,
      interpret=backend == "cpu" if interpret is None else interpret,
      backend=backend,
      table=table,
      has_prefix=prefix is not None,
    )
    dtype = jnp.int32 if table is not None else F32
    nondiff = (
      [pad(jnp.asarray(br.q_pos, dtype)) for br in branches],
      [pad(jnp.asarray(br.k_pos, dtype)) for br in branches],
      pad(pos_BxT),
      seg,
      doc,
      doc_end(seg),
      head_consts + hook_consts,
      table_params if table is not None else [],  # the table, its Jacobian or None
    )
    return _flash(st, diff, nondiff)

  if table is None:
    out = run(None)
  else:
    out = jax.lax.cond(_in_table(branches, half), lambda: run(table), lambda: run(None))
  return out[:, :, :t, :e]
