"""Flash attention for a TPU (Mosaic): the GPU kernel's scores in blocks Mosaic accepts.

The GPU kernel (flash.py) cuts one head out of token-major B x T x H x E arrays and reads whole
rows with `pl.ds` slices; Mosaic's block rule (the last two block dims multiples of (8, 128) or
the array's) refuses that. This one takes the same inputs (`flash.flash_attention` prepares
them: padding, the distance table or the traced hook, the scheme's parameters) and lays them out
in XLA around the call:
  - q, k, v and the output head-major B x H x T x E, blocks of (block, E) rows; GQA: query
    head h reads kv head h // P in the index map,
  - each row (positions per branch, true positions, segments, in-document indices) B x 1 x T
    and an input hook's prefix sums (FoX) B x H x 1 x T, blocks of 1 x block, read on the
    query side and on the key side (the same array, two block specs),
  - the distance table (and its Jacobian) H x 1 x 2N, head h's row; a hook's parameters and
    per-head constants flattened to (H or 1) x 1 x size (`mosaic_kernels.flat`), head h's row
    or the whole; the sink in SMEM, read per head.
The grid is (B, H, query blocks, key blocks) forward and for dq, (B, H, key blocks, query
blocks) for dk and dv, the last axis "arbitrary": the online softmax state (m, l, acc) and
the gradients' sums live in VMEM scratch across it. The in-document indices and document ends
are scalar-prefetched (SMEM), so each program's block ranges are the GPU kernel's
(`flash_plan._key_ranges`, `_query_ranges`): a step outside them runs nothing and its index
map clamps to the range's end (no new copy); only edge blocks are masked. Key and query
blocks are at least 128 tokens on a TPU (or the padded T, when shorter): a row's block is a
lane dimension. The backward kernels follow the GPU's (p recomputed from the saved
logsumexp); the distance table's parameter gradient is summed against its Jacobian in the dq
kernel and routed to the parameters in XLA (`flash_specs._dleaves`), as there. A distance
table longer than `TABLE_HALF` (a whole head row is a block) gives way to the hook.
`mosaic_attention` is `flash.flash_attention` running these kernels; interpret mode on CPU.
Checked by interpret mode against the dense path and by jax's Mosaic lowering on CPU
(tests/model/kernels/test_mosaic.py); Mosaic's own compiler (its layouts of the 1-D rows,
the lane gather) runs only on a TPU, where no run has been made yet.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from lcx.model.kernels import flash, mosaic_kernels as mk
from lcx.model.kernels.flash_plan import _div
from lcx.model.kernels.flash_specs import _dleaves, _kernel_inputs

F32 = jnp.float32
LANES = 128  # a row block's minimum on a TPU (the lane dimension)
SEMANTICS = ("parallel", "parallel", "parallel", "arbitrary")
# The largest distance table (half N) these kernels read: head h's 2N row sits in VMEM and the
# gather broadcasts it to a block's query rows (128 x 8192 f32: 4 MiB). Longer rows (long
# evaluations) take the hook kernels, which read the scheme's parameters alone.
TABLE_HALF = 4096


def _flat(x, axis):
  """A parameter as (H or 1) x 1 x size: head h's row (per-head `axis`) or the whole one."""
  x = jnp.asarray(x)
  n = mk.size(x.shape, axis)
  return x.reshape(1, 1, n) if axis is None else jnp.moveaxis(x, axis, 0).reshape(-1, 1, n)


class _Specs:
  """Block specs of the grid (b, h, x, y) with the scalar-prefetched doc and end rows: x is the
  program's own block (a query block forward and for dq, a key block for dk and dv), y the
  last axis's, clamped to the program's block range (`mosaic_kernels.clamp`)."""

  def __init__(self, st, keys_last: bool):
    self.st, self.keys_last = st, keys_last

  def _ij(self, b, x, y, doc, end):
    """(query block, key block) of step (x, y)."""
    st = self.st
    if self.keys_last:
      return x, mk.clamp(mk.key_ranges(st, doc, end, b, x), y)
    return mk.clamp(mk.query_ranges(st, doc, end, b, x), y), x

  def tokens(self, side, e, kv=False):
    """A B x (H or G) x T x E array's (block, E) rows; `kv`: kv head h // P."""
    blk, per = self._block(side), self.st.per if kv else 1

    def index(b, h, x, y, doc, end):
      return (b, _div(h, per), self._ij(b, x, y, doc, end)[side == "k"], 0)

    return pl.BlockSpec((None, None, blk, e), index)

  def row(self, side):
    """A B x 1 x T row's 1 x block."""

    def index(b, h, x, y, doc, end):
      return (b, 0, self._ij(b, x, y, doc, end)[side == "k"])

    return pl.BlockSpec((None, 1, self._block(side)), index)

  def head_row(self, side):
    """A B x H x 1 x T row's 1 x block (per query head)."""

    def index(b, h, x, y, doc, end):
      return (b, h, 0, self._ij(b, x, y, doc, end)[side == "k"])

    return pl.BlockSpec((None, None, 1, self._block(side)), index)

  def _block(self, side):
    return self.st.block_q if side == "q" else self.st.block_k


def _param_spec(x, axis):
  """A `_flat` parameter's row: head h's, or the whole one."""
  return pl.BlockSpec((None, 1, x.shape[-1]), lambda b, h, *_: (0 if axis is None else h, 0, 0))


def _group(name, xs, spec):
  """(name, arrays, one spec each): a group of the kernel's inputs or outputs."""
  return name, list(xs), [spec] * len(xs)


def _flat_group(name, xs, axes):
  """Parameters or constants as `_flat` rows, each with its spec."""
  flat = [_flat(x, a) for x, a in zip(xs, axes)]
  return name, flat, [_param_spec(x, a) for x, a in zip(flat, axes)]


def _common(st, specs: _Specs, diff, nondiff):
  """(the inputs every kernel reads as `_group`s, the hook's parameter and constant shapes
  with their heads axes (`mosaic_kernels.unflat`), the scalar-prefetched doc and end rows)."""
  params, n = _kernel_inputs(st, diff, nondiff)
  e = n["v"].shape[-1]
  shapes = {"params": [], "consts": []}
  param_axes = [0] if st.table is not None else list(st.head_axes)  # the table: H x 2N
  const_axes = [0 if c < st.num_head_consts else None for c in range(len(n["consts"]))]
  if st.table is None:  # the hook takes head h's constant as a 1-vector, other ones whole
    shapes["params"] = [(x.shape, a) for x, a in zip(params, param_axes)]
    shapes["consts"] = [
      ((1,), 0) if a == 0 else (jnp.shape(c), None) for c, a in zip(n["consts"], const_axes)
    ]
  groups = [
    _group("qs", [jnp.swapaxes(q, 1, 2) for q in n["qs"]], specs.tokens("q", e)),
    _group("ks", [jnp.swapaxes(k, 1, 2) for k in n["ks"]], specs.tokens("k", e, kv=True)),
    _group("v", [n["v"]], specs.tokens("k", e, kv=True)),
    _flat_group("params", params, param_axes),
    _flat_group("consts", n["consts"], const_axes),
    _group("sink", [] if n["sink"] is None else [n["sink"]], pl.BlockSpec(memory_space=pltpu.SMEM)),
  ]
  prefix = [] if n["prefix"] is None else [n["prefix"][:, :, None, :]]  # B x H x 1 x T
  for side, pos in (("q", n["q_pos"]), ("k", n["k_pos"])):
    groups.append(_group(f"{side}:{side}_pos", [x[:, None] for x in pos], specs.row(side)))
    for name in ("pos", "seg", "doc"):
      groups.append(_group(f"{side}:{name}", [n[name][:, None]], specs.row(side)))
    groups.append(_group(f"{side}:prefix", prefix, specs.head_row(side)))
  return groups, shapes, (n["doc"], n["end"])


def _call(kernel, st, grid, inputs, outputs, scratch):
  """pallas_call of `kernel` over `grid` with the prefetched rows; `inputs`, `outputs`:
  `_group`s, `scratch` VMEM shapes (f32). The kernel gets its refs by group name."""
  groups, shapes, prefetch = inputs
  layout = tuple((name, len(xs)) for name, xs, _ in groups + outputs) + (("scratch", len(scratch)),)
  grid_spec = pltpu.PrefetchScalarGridSpec(
    num_scalar_prefetch=2,
    grid=grid,
    in_specs=[spec for _, _, specs in groups for spec in specs],
    out_specs=[spec for _, _, specs in outputs for spec in specs],
    scratch_shapes=[pltpu.VMEM(s, F32) for s in scratch],
  )
  params = None if st.interpret else pltpu.CompilerParams(dimension_semantics=SEMANTICS)
  return pl.pallas_call(
    functools.partial(kernel, st=st, layout=layout, shapes=shapes),
    grid_spec=grid_spec,
    out_shape=[x for _, xs, _ in outputs for x in xs],
    interpret=st.interpret,
    compiler_params=params,
  )(*prefetch, *[x for _, xs, _ in groups for x in xs])


def _forward(st, diff, nondiff):
  """-> (out B x H x T x E, lse B x H x 1 x T)."""
  qs = diff[0]
  b, tp, h, e = qs[0].shape
  nq, nk = tp // st.block_q, tp // st.block_k
  specs = _Specs(st, keys_last=True)
  outputs = [
    _group("o", [jax.ShapeDtypeStruct((b, h, tp, e), qs[0].dtype)], specs.tokens("q", e)),
    _group("lse", [jax.ShapeDtypeStruct((b, h, 1, tp), F32)], specs.head_row("q")),
  ]
  scratch = [(1, st.block_q), (1, st.block_q), (st.block_q, e)]
  inputs = _common(st, specs, diff, nondiff)
  return _call(mk.fwd_kernel, st, (b, h, nq, nk), inputs, outputs, scratch)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _mosaic(st, diff, nondiff):
  return _forward(st, diff, nondiff)[0]


def _mosaic_fwd(st, diff, nondiff):
  out, lse = _forward(st, diff, nondiff)
  return out, (diff, nondiff, out, lse)


def _backward_inputs(st, specs, diff, nondiff, saved):
  """`_common`'s, then dO, the logsumexp and delta = rowsum(dO * O) of the query block."""
  groups, shapes, prefetch = _common(st, specs, diff, nondiff)
  do, lse, delta = saved
  groups += [
    _group("do", [do], specs.tokens("q", do.shape[-1])),
    _group("lse", [lse], specs.head_row("q")),
    _group("delta", [delta], specs.head_row("q")),
  ]
  return groups, shapes, prefetch


def _head_rows(st, b, h, tp):
  """An input hook's prefix rows' gradient (FoX), B x H x 1 x T, or none."""
  return [jax.ShapeDtypeStruct((b, h, 1, tp), F32)] if st.has_prefix else []


def _dq(st, diff, nondiff, saved):
  """dq per branch (token-major), the parameters' gradients, the prefix rows' (or None)."""
  qs, leaves = diff[0], diff[3]
  b, tp, h, e = qs[0].shape
  nq, nk = tp // st.block_q, tp // st.block_k
  specs = _Specs(st, keys_last=True)
  groups, shapes, prefetch = _backward_inputs(st, specs, diff, nondiff, saved)
  sizes = [mk.size(s, a) for s, a in shapes["params"]]  # hook mode: each flattened leaf
  if st.table is not None and st.table.num_jac:  # table mode: head h's parameter vector
    groups.append(_flat_group("jac", [nondiff[-1][1]], [0]))
    sizes = [st.table.num_jac]
  dparams = [jax.ShapeDtypeStruct((b, h, nq, 1, n), F32) for n in sizes]
  outputs = [
    _group("dqs", [jax.ShapeDtypeStruct((b, h, tp, e), q.dtype) for q in qs], specs.tokens("q", e)),
    ("dparams", dparams, [_dparam_spec(n) for n in sizes]),
    _group("dprefix", _head_rows(st, b, h, tp), specs.head_row("q")),
  ]
  scratch = [(st.block_q, e)] * len(qs) + [(1, n) for n in sizes] + [(1, st.block_q)]
  out = _call(mk.dq_kernel, st, (b, h, nq, nk), (groups, shapes, prefetch), outputs, scratch)
  n = len(qs)
  dqs = [jnp.swapaxes(dq, 1, 2) for dq in out[:n]]
  douts = out[n : n + len(sizes)]
  if st.table is not None:
    dleaves = _dleaves(st, leaves, [d[:, :, :, 0] for d in douts])
  else:
    dleaves = [_param_grad(d, x, a) for d, x, (_, a) in zip(douts, leaves, shapes["params"])]
  return dqs, dleaves, (out[-1][:, :, 0] if st.has_prefix else None)


def _dparam_spec(n):
  """Program (b, h, i)'s block of a parameter's gradient (flattened, 1 x n)."""
  return pl.BlockSpec((None, None, None, 1, n), lambda b, h, x, *_: (b, h, x, 0, 0))


def _param_grad(d_BxHxNx1xS, x, axis):
  """A parameter's gradient from the dq programs' flattened blocks, summed over them."""
  if axis is None:
    return d_BxHxNx1xS.sum((0, 1, 2, 3)).reshape(x.shape).astype(x.dtype)
  moved = (x.shape[axis],) + tuple(n for a, n in enumerate(x.shape) if a != axis)
  return jnp.moveaxis(d_BxHxNx1xS.sum((0, 2, 3)).reshape(moved), 0, axis).astype(x.dtype)


def _dkv(st, diff, nondiff, saved):
  """dk per branch (token-major, summed over each kv head's P query heads), dv, the prefix
  rows' gradient (or None)."""
  qs, ks, v = diff[0], diff[1], diff[2]
  b, tp, h, e = qs[0].shape
  g = v.shape[1]
  nq, nk = tp // st.block_q, tp // st.block_k
  specs = _Specs(st, keys_last=False)
  inputs = _backward_inputs(st, specs, diff, nondiff, saved)
  per_head = specs.tokens("k", e)  # query head h's dk, dv of key block j
  outputs = [
    _group("dks", [jax.ShapeDtypeStruct((b, h, tp, e), k.dtype) for k in ks], per_head),
    _group("dv", [jax.ShapeDtypeStruct((b, h, tp, e), v.dtype)], per_head),
    _group("dprefix", _head_rows(st, b, h, tp), specs.head_row("k")),
  ]
  scratch = [(st.block_k, e)] * len(ks) + [(st.block_k, e), (1, st.block_k)]
  out = _call(mk.dkv_kernel, st, (b, h, nk, nq), inputs, outputs, scratch)
  n = len(ks)

  def grouped(x_BxHxTxE):  # summed over each kv head's P query heads (GQA)
    return x_BxHxTxE.reshape(b, g, st.per, tp, e).sum(2)

  dks = [jnp.swapaxes(grouped(dk), 1, 2) for dk in out[:n]]
  return dks, grouped(out[n]), (out[-1][:, :, 0] if st.has_prefix else None)


def _mosaic_bwd(st, res, do_BxHxTxE):
  diff, nondiff, out_BxHxTxE, lse_BxHx1xT = res
  sink = diff[4]
  delta_BxHxT = jnp.sum(do_BxHxTxE.astype(F32) * out_BxHxTxE.astype(F32), -1)
  saved = (do_BxHxTxE, lse_BxHx1xT, delta_BxHxT[:, :, None, :])
  dqs, dleaves, dprefix_q = _dq(st, diff, nondiff, saved)
  dks, dv, dprefix_k = _dkv(st, diff, nondiff, saved)
  dprefix = dprefix_q + dprefix_k if st.has_prefix else None
  dsink = flash.sink_grad(st, sink, lse_BxHx1xT[:, :, 0], delta_BxHxT)
  return (dqs, dks, dv, dleaves, dsink, dprefix), None


_mosaic.defvjp(_mosaic_fwd, _mosaic_bwd)


def mosaic_attention(*args, block_q: int = flash.BLOCK, block_k: int = flash.BLOCK, **kw):
  """`flash.flash_attention`'s inputs and output, these kernels running. Outside interpret
  mode (a TPU) blocks are at least `LANES` tokens: flash_attention caps them at T's next power
  of two, so a shorter T is one block, the whole padded row."""
  backend = kw.get("backend") or jax.default_backend()
  interpret = kw.get("interpret")
  if not (backend == "cpu" if interpret is None else interpret):
    block_q, block_k = max(block_q, LANES), max(block_k, LANES)
  return flash.flash_attention(
    *args, block_q=block_q, block_k=block_k, kernel=_mosaic, max_table=TABLE_HALF, **kw
  )
