"""Additive absolute schemes, added to the token embeddings once: sinusoidal and learned.

A learned table has no row for positions past its length. `max_len_policy` says what happens:
  error  check_eval_length(cfg, dims, seq_len) raises before an evaluation is compiled; eager
         calls raise too; inside jit (positions are traced) such rows come out NaN, which is
         loud (the train loop stops on NaN), never a silently wrapped index.
  clamp  positions past the table reuse its last row.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from lcx import errors
from lcx.model.positions.base import PREFIX, Scheme, register
from lcx.model.positions.scaling import theta


def sinusoidal(pos_BxL: jax.Array, d_model: int, base: float = 10000.0) -> jax.Array:
  """Vaswani 2017: PE[p, 2i] = sin(p * theta_i), PE[p, 2i+1] = cos(p * theta_i), float32 BxLxD."""
  theta_R = jnp.asarray(theta(d_model, base), jnp.float32)  # RoPE's frequencies, over d_model
  angle_BxLxR = jnp.asarray(pos_BxL, jnp.float32)[..., None] * theta_R[None, None, :]
  pe_BxLxRx2 = jnp.stack([jnp.sin(angle_BxLxR), jnp.cos(angle_BxLxR)], axis=-1)
  return pe_BxLxRx2.reshape(*pos_BxL.shape, d_model)


def _check_sinusoidal(cfg, dims):
  if dims.d_model % 2:
    raise errors.not_allowed(
      "model.d_model", dims.d_model, f"even numbers for {PREFIX}.name='sinusoidal'"
    )


@register("sinusoidal", check=_check_sinusoidal)
class Sinusoidal(Scheme):
  def __init__(self, *, dims, rngs, base):
    del rngs
    self.d_model = dims.d_model
    self.base = float(base)

  def embed(self, x_BxLxD, pos_BxL):
    return x_BxLxD + sinusoidal(pos_BxL, self.d_model, self.base).astype(x_BxLxD.dtype)


def _lookup_error(table_NxD, pos_BxL):
  """Rows for in-range positions; eager calls raise past the table, traced ones give NaN."""
  n = table_NxD.shape[0]
  if not isinstance(pos_BxL, jax.core.Tracer):
    longest = int(jnp.max(pos_BxL)) + 1
    if longest > n:
      raise ValueError(_too_long(n, longest))
  pos_BxL = jnp.where(pos_BxL < 0, n, pos_BxL)  # negative indices would wrap, make them miss
  return jnp.take(table_NxD, pos_BxL, axis=0, mode="fill", fill_value=jnp.nan)


def _lookup_clamp(table_NxD, pos_BxL):
  return jnp.take(table_NxD, jnp.clip(pos_BxL, 0, table_NxD.shape[0] - 1), axis=0)


MAX_LEN_POLICIES = {"error": _lookup_error, "clamp": _lookup_clamp}


def _too_long(n, seq_len):
  return (
    f"{PREFIX}.max_len_policy='error': the learned table has {n} positions "
    f"({PREFIX}.num_positions, None: model.max_len) but {seq_len} are needed; evaluate at "
    f"<= {n} tokens or choose a policy from {sorted(MAX_LEN_POLICIES)}"
  )


def _num_positions(cfg, dims):
  return dims.max_len if cfg.num_positions is None else cfg.num_positions


def _check_learned_length(cfg, dims, seq_len):
  n = _num_positions(cfg, dims)
  if cfg.max_len_policy == "error" and seq_len > n:
    raise ValueError(_too_long(n, seq_len))


@register("learned", check_length=_check_learned_length)  # fields: lcx/model/positions/fields.py
class Learned(Scheme):
  """A learned (num_positions, d_model) table, normal(0, 0.02) at init as in GPT-2.

  Set num_positions above the training length when training with randomized positions.
  Fractional positions (from a remap) are floored.
  """

  def __init__(self, *, dims, rngs, num_positions, max_len_policy):
    n = dims.max_len if num_positions is None else num_positions
    init_NxD = 0.02 * jax.random.normal(rngs.params(), (n, dims.d_model), jnp.float32)
    self.table = nnx.Param(init_NxD, logical_axes=(None, "embed"))
    self.lookup = MAX_LEN_POLICIES[max_len_policy]

  def embed(self, x_BxLxD, pos_BxL):
    pos_BxL = jnp.floor(pos_BxL).astype(jnp.int32)
    return x_BxLxD + self.lookup(self.table[...], pos_BxL).astype(x_BxLxD.dtype)
