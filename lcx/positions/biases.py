"""Attention-logit biases: ALiBi (Press 2021), T5 buckets (Raffel 2020), FIRE (Li 2023).

Each `bias(q_pos_BxQ, k_pos_BxS)` is a function of positions only (query i, key j), so the
chunked kernel evaluates it block by block at any length; it is added to the logits after the
1/sqrt(head_dim) scaling. Positions may be fractional (remaps): ALiBi and FIRE use them as they
are, T5 floors the distance to pick a bucket.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lcx import errors
from lcx.positions.base import PREFIX, Scheme, register
from lcx.positions.registry import Unset


def _distance_BxQxS(q_pos_BxQ, k_pos_BxS):
  """i - j as float32 (positive for past keys)."""
  q = jnp.asarray(q_pos_BxQ, jnp.float32)
  k = jnp.asarray(k_pos_BxS, jnp.float32)
  return q[:, :, None] - k[:, None, :]


def alibi_slopes(num_heads: int) -> np.ndarray:
  """The ALiBi paper's `get_slopes`: geometric from 2^(-8/n) for n a power of two; otherwise the
  slopes of the power of two p below n, then every other slope of 2p, up to n heads."""

  def power_of_2(n):
    start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
    return [start * start ** i for i in range(n)]

  if math.log2(num_heads).is_integer():
    return np.asarray(power_of_2(num_heads), np.float64)
  p = 2 ** math.floor(math.log2(num_heads))
  return np.concatenate([power_of_2(p), alibi_slopes(2 * p)[0::2][:num_heads - p]])


def _check_heads(cfg, dims):
  if dims.num_heads < 1:
    raise errors.not_allowed("model.num_heads", dims.num_heads,
                             f">= 1 for {PREFIX}.name={cfg.name!r}")


@register("alibi", {}, check=_check_heads)
class ALiBi(Scheme):
  """bias = -m_h * (i - j): a fixed linear penalty on distance, one slope per head."""

  def __init__(self, *, dims, rngs):
    del rngs
    # A tuple, not an array: constants stay static; modules hold only nnx.Param state.
    self.slopes_H = tuple(float(m) for m in alibi_slopes(dims.num_heads))

  def bias(self, q_pos_BxQ, k_pos_BxS):
    slopes_1xHx1x1 = jnp.asarray(self.slopes_H, jnp.float32)[None, :, None, None]
    return -slopes_1xHx1x1 * _distance_BxQxS(q_pos_BxQ, k_pos_BxS)[:, None]


def t5_bucket(relative_position, num_buckets=32, max_distance=128, bidirectional=False):
  """HF `_relative_position_bucket`; relative_position = key_pos - query_pos (negative: past).

  Causal: n = max(-relative_position, 0); exact buckets for n < num_buckets/2, then
  logarithmic up to max_distance, capped at the last bucket. Fractional distances are floored.
  """
  rel = jnp.asarray(relative_position, jnp.float32)
  offset = 0
  if bidirectional:
    num_buckets //= 2
    offset = jnp.where(rel > 0, num_buckets, 0)
    n = jnp.floor(jnp.abs(rel)).astype(jnp.int32)
  else:
    n = jnp.floor(jnp.maximum(-rel, 0.0)).astype(jnp.int32)
  max_exact = num_buckets // 2
  log_ratio = jnp.log(jnp.maximum(n, max_exact).astype(jnp.float32) / max_exact)
  large = max_exact + (log_ratio / math.log(max_distance / max_exact)
                       * (num_buckets - max_exact)).astype(jnp.int32)
  large = jnp.minimum(large, num_buckets - 1)
  return offset + jnp.where(n < max_exact, n, large)


def _check_t5(cfg, dims):
  _check_heads(cfg, dims)
  half = cfg.num_buckets // 2 if cfg.bidirectional else cfg.num_buckets
  if half < 2:
    raise errors.not_allowed(f"{PREFIX}.num_buckets", cfg.num_buckets,
                             ">= 2 (>= 4 when bidirectional)")
  if cfg.max_distance <= half // 2:
    raise ValueError(f"{PREFIX}.max_distance={cfg.max_distance} must exceed the exact range "
                     f"{half // 2} (half of the buckets per direction)")


@register("t5", {"num_buckets": 32, "max_distance": 128, "bidirectional": False},
          check=_check_t5)
class T5(Scheme):
  """One learned scalar per head per distance bucket, zero at init (so it starts as NoPE)."""

  def __init__(self, *, dims, rngs, num_buckets, max_distance, bidirectional):
    del rngs
    self.table_NxH = nnx.Param(jnp.zeros((num_buckets, dims.num_heads), jnp.float32),
                               logical_axes=(None, "heads"))
    self.num_buckets = num_buckets
    self.max_distance = max_distance
    self.bidirectional = bidirectional

  def bias(self, q_pos_BxQ, k_pos_BxS):
    bucket_BxQxS = t5_bucket(-_distance_BxQxS(q_pos_BxQ, k_pos_BxS), self.num_buckets,
                             self.max_distance, self.bidirectional)
    bias_BxQxSxH = jnp.take(self.table_NxH[...], bucket_BxQxS, axis=0)
    return jnp.moveaxis(bias_BxQxSxH, -1, 1)


def _check_fire(cfg, dims):
  _check_heads(cfg, dims)
  for field in ("hidden", "c_init"):
    if not cfg[field] > 0:
      raise errors.not_allowed(f"{PREFIX}.{field}", cfg[field], "> 0")
  if cfg.threshold_init is not None and not cfg.threshold_init > 0:
    raise errors.not_allowed(f"{PREFIX}.threshold_init", cfg.threshold_init,
                             "> 0 (None: the training length model.max_len)")


FIRE_EPS = 1e-6  # added to psi(normalizer), as the paper's code does


@register("fire", {"hidden": 32, "c_init": 0.1, "threshold_init": Unset(float)},
          check=_check_fire)
class FIRE(Scheme):
  """bias(i, j) = MLP(psi(i - j) / (psi(max(i, L_thr)) + eps)), psi(x) = ln(|c x| + 1).

  MLP 1 -> hidden -> heads with ReLU; c and the threshold are learned. As in the paper's code
  the threshold is L_thr = |m * L_init| with a learned multiplier m (init 1) times a fixed
  L_init: learning L_thr directly gives it an L_init times smaller gradient, so under Adam it
  barely moves. L_init is `model.position.threshold_init` (default None: the training length
  model.max_len; the paper's 512 exceeds short training lengths, where the normalizer would
  never reach past the threshold in training). The query position normalizes the distance, so
  the input stays in [0, 1] at any length.

  The MLP over every (row, query, key) is B x Q x S x hidden units, forward and backward. When
  the positions are integers in [0, N), N = max(Q, S) (packed training rows, plain evaluation),
  the bias only depends on (i, |i - j|), so the MLP runs once over that N x N grid, shared by
  all rows, and each row gathers from it: the same values, B times less MLP work (12x faster
  fwd+bwd at B=16, T=256). Other positions (fractional remaps, randomized training positions
  beyond N) take the direct path; `lax.cond` picks one at run time.
  """

  def __init__(self, *, dims, rngs, hidden, c_init, threshold_init):
    def normal(shape, fan_in):
      return jax.random.normal(rngs.params(), shape) / math.sqrt(fan_in)

    self.c = nnx.Param(jnp.asarray(c_init, jnp.float32))
    # A float, not an array: a constant, not state (only m is learned).
    self.threshold_init = float(dims.max_len if threshold_init is None else threshold_init)
    self.threshold_multiplier = nnx.Param(jnp.asarray(1.0, jnp.float32))
    self.w_in = nnx.Param(normal((hidden,), 1))
    self.b_in = nnx.Param(jnp.zeros((hidden,)))
    self.w_out = nnx.Param(normal((hidden, dims.num_heads), hidden))
    self.b_out = nnx.Param(jnp.zeros((dims.num_heads,)))

  def threshold(self) -> jax.Array:
    """The effective threshold L_thr = |m * L_init|."""
    return jnp.abs(self.threshold_multiplier[...] * self.threshold_init)

  def _mlp(self, x_N):
    """Heads-last MLP of the normalized distance: ... -> ... x H."""
    leading = tuple(range(x_N.ndim))  # the axes of x, made explicit on the weights
    h_NxF = jax.nn.relu(x_N[..., None] * jnp.expand_dims(self.w_in[...], leading)
                        + jnp.expand_dims(self.b_in[...], leading))
    return h_NxF @ self.w_out[...] + jnp.expand_dims(self.b_out[...], leading)

  def _input(self, q_pos, distance):
    """psi(distance) / (psi(max(q_pos, L_thr)) + eps) in float32 (shapes broadcast)."""

    def psi(x):
      return jnp.log(jnp.abs(self.c[...] * x) + 1)

    return psi(distance) / (psi(jnp.maximum(q_pos, self.threshold())) + FIRE_EPS)

  def _direct(self, q_pos_BxQ, k_pos_BxS):
    q_BxQ = jnp.asarray(q_pos_BxQ, jnp.float32)
    x_BxQxS = self._input(q_BxQ[:, :, None], _distance_BxQxS(q_pos_BxQ, k_pos_BxS))
    return jnp.moveaxis(self._mlp(x_BxQxS), -1, 1)

  def _gridded(self, q_pos_BxQ, k_pos_BxS):
    n = max(q_pos_BxQ.shape[1], k_pos_BxS.shape[1])
    p_N = jnp.arange(n, dtype=jnp.float32)
    grid_HxNN = self._mlp(self._input(p_N[:, None], p_N[None, :])).reshape(n * n, -1).T
    flat_BxQxS = q_pos_BxQ[:, :, None] * n + jnp.abs(q_pos_BxQ[:, :, None] - k_pos_BxS[:, None])
    return jnp.moveaxis(jnp.take(grid_HxNN, flat_BxQxS, axis=1), 0, 1)

  def bias(self, q_pos_BxQ, k_pos_BxS):
    def integer(x):
      return jnp.issubdtype(jnp.asarray(x).dtype, jnp.integer)

    if not (integer(q_pos_BxQ) and integer(k_pos_BxS)):
      return self._direct(q_pos_BxQ, k_pos_BxS)
    n = max(q_pos_BxQ.shape[1], k_pos_BxS.shape[1])

    def in_grid(x):
      return (jnp.min(x) >= 0) & (jnp.max(x) < n)

    return jax.lax.cond(in_grid(q_pos_BxQ) & in_grid(k_pos_BxS), self._gridded, self._direct,
                        q_pos_BxQ, k_pos_BxS)
