"""The flash kernels' Pallas block specs and arguments (lcx/model/kernels/flash.py): one
(b, h) row of every common input, the parameters' head slices, and the dq kernel's
parameter-gradient outputs, summed outside into the parameters' gradients (`_dleaves`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from lcx.model.kernels.flash_plan import _Static
from lcx.model.kernels.flash_tables import _head_slice

F32 = jnp.float32


def _full(shape):
  """A whole-array block (parameters), the same for every program."""
  return pl.BlockSpec(shape, lambda *_: (0,) * len(shape))


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


def _kernel_inputs(st: _Static, diff, nondiff) -> tuple[list, dict]:
  """(the parameter inputs: the distance table, or the leaves; every input by name), from
  `_flash`'s differentiable and fixed arguments."""
  qs, ks, v, leaves, sink, prefix = diff
  q_pos, k_pos, pos, seg, doc, end, consts, table_params = nondiff
  params = leaves if st.table is None else table_params[:1]
  names = dict(qs=qs, ks=ks, v=v, sink=sink, prefix=prefix, q_pos=q_pos, k_pos=k_pos)
  return params, names | dict(pos=pos, seg=seg, doc=doc, end=end, consts=consts)


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
