"""The scheme's bias for the flash kernels (lcx/model/kernels/flash.py), built in XLA: the hook
traced on one block for the kernels to evaluate (`_traced_bias`), or the per-head distance table
and its Jacobian (`_distance_table`, `_Table`), with the per-head slicing both rely on."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.experimental import pallas as pl

from lcx.model.positions import base as positions_base

F32 = jnp.float32


def _of_head(x_H, h):
  """x[h] for a traced head index, as a one-hot sum (no dynamic indexing of a value)."""
  onehot_H = (jnp.arange(x_H.shape[0]) == h).astype(F32)
  return jnp.sum(x_H.astype(F32) * onehot_H.reshape(onehot_H.shape + (1,) * (x_H.ndim - 1)), 0)


def _head_slice(shape, axis):
  """The shape of one head's slice of a parameter: 1 on its heads `axis` (None: whole)."""
  return tuple(1 if a == axis else n for a, n in enumerate(shape))


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
