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

This module holds `flash_attention` and the custom_vjp around the kernels; the parts beside it:
`flash_plan` (`_Static`, the block ranges, `doc_end`), `flash_tables` (the traced hook, `_Table`),
`flash_kernels` (the kernel bodies), `flash_specs` (block specs, inputs, parameter gradients).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name
from jax.experimental import pallas as pl

from lcx.model import attention
from lcx.model.kernels.flash_kernels import _dkv_kernel, _dq_kernel, _fwd_kernel
from lcx.model.kernels.flash_plan import (
  _key_ranges as _key_ranges,
  _padded_documents,
  _query_ranges as _query_ranges,
  _Refs as _Refs,
  _Static,
  doc_end,
)
from lcx.model.kernels.flash_specs import (
  _args,
  _dleaves,
  _dparam_outputs,
  _head_row,
  _in_specs,
  _kernel_inputs,
)
from lcx.model.kernels.flash_tables import (
  _distance_table,
  _head_axes,
  _head_constants,
  _in_table,
  _int_positions,
  _traced_bias,
)
from lcx.model.positions import base as positions_base

F32 = jnp.float32
NEG_INF = attention.NEG_INF
BLOCK = 128  # default query and key block
GPUS = ("gpu", "cuda", "rocm")  # backends it lowers for through Triton
TRITON = {"num_warps": 4, "num_stages": 2}  # its Triton settings (the device check tunes them)


def _compiler_params(st: _Static):
  """Triton on GPU: this kernel reads whole-row refs with `pl.ds` slices, Triton's model (jax's
  default GPU lowering is Mosaic GPU, which wants explicit pipelines); the backend's default
  elsewhere (Mosaic on TPU, none in interpret mode)."""
  if st.interpret or st.backend not in GPUS:
    return None
  from jax.experimental.pallas import triton as pl_triton

  return pl_triton.CompilerParams(**TRITON)


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


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _flash(st: _Static, diff, nondiff):
  return _forward(st, _kernel_inputs(st, diff, nondiff))[0]


def _flash_fwd(st, diff, nondiff):
  """The forward kernel; its output and log-sum-exp are named (attention.OUT, LSE) for
  model.remat=matmuls, which keeps them (the backward never reruns this kernel) and recomputes
  the rest of the residuals, q and k rotated, scaled and padded, from the kept projections."""
  out, lse = _forward(st, _kernel_inputs(st, diff, nondiff))
  out, lse = checkpoint_name(out, attention.OUT), checkpoint_name(lse, attention.LSE)
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
  dsink = sink_grad(st, sink, lse_BxHxT, delta_BxHxT)
  return (dqs, dks, dv, dleaves, dsink, dprefix), None


def sink_grad(st, sink_H, lse_BxHxT, delta_BxHxT):
  """The sink's gradient (None without one): its weight exp(sink - lse), times -delta
  (attention._softmax_bwd)."""
  if not st.has_sink:
    return None
  weight_BxHxT = jnp.exp(sink_H[None, :, None] - lse_BxHxT)
  return -jnp.sum(weight_BxHxT * delta_BxHxT, (0, 2)).astype(sink_H.dtype)


_flash.defvjp(_flash_fwd, _flash_bwd)


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
  kernel=None,
  max_table: int | None = None,
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
  `interpret` says. `kernel`: the custom_vjp run on the prepared inputs (default this
  module's; the TPU's: mosaic.py). `max_table`: the largest table half N a kernel reads (None:
  any); past it the hook kernels run.
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
  tabled = bias is not None and _int_positions(branches) and half <= (max_table or half)
  found = _distance_table(scheme, half, h) if tabled else None
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
    return (_flash if kernel is None else kernel)(st, diff, nondiff)

  if table is None:
    out = run(None)
  else:
    out = jax.lax.cond(_in_table(branches, half), lambda: run(table), lambda: run(None))
  return out[:, :, :t, :e]
