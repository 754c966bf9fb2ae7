"""Attention-logit biases: ALiBi (Press 2021), T5 buckets (Raffel 2020), FIRE (Li 2023),
KERPLE (Chi 2022) and Sandwich (Chi 2023).

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
from lcx.model.positions import base, fields
from lcx.model.positions.base import PREFIX, Scheme, register


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
    return [start * start**i for i in range(n)]

  if math.log2(num_heads).is_integer():
    return np.asarray(power_of_2(num_heads), np.float64)
  p = 2 ** math.floor(math.log2(num_heads))
  return np.concatenate([power_of_2(p), alibi_slopes(2 * p)[0::2][: num_heads - p]])


def _check_heads(cfg, dims):
  if dims.num_heads < 1:
    raise errors.not_allowed(
      "model.num_heads", dims.num_heads, f">= 1 for {PREFIX}.name={cfg.name!r}"
    )


@register("alibi", check=_check_heads)  # every scheme's fields: lcx/model/positions/fields.py
class ALiBi(Scheme):
  """bias = -m_h * (i - j): a fixed linear penalty on distance, one slope per head."""

  bias_of_distance = True
  head_constants = ("slopes_H",)

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
  large = max_exact + (
    log_ratio / math.log(max_distance / max_exact) * (num_buckets - max_exact)
  ).astype(jnp.int32)
  large = jnp.minimum(large, num_buckets - 1)
  return offset + jnp.where(n < max_exact, n, large)


def _table_row(table_NxH, b):
  """table[b] for a traced bucket b, H: a one-hot sum over the N rows (no dynamic index)."""
  onehot_N = (jnp.arange(table_NxH.shape[0]) == b).astype(table_NxH.dtype)
  return jnp.sum(table_NxH * onehot_N[:, None], 0)


def _bucket_range(bucket_BxQxS):
  """The least and greatest bucket present (scalars): the only rows a lookup reads."""
  return jnp.min(bucket_BxQxS), jnp.max(bucket_BxQxS)


@jax.custom_vjp
def table_lookup(table_NxH, bucket_BxQxS):
  """table[bucket] as BxHxQxS with compares and selects, no gather (Triton lowers none).

  table[lo] everywhere, then table[b] where bucket == b for b in (lo, hi], lo and hi the
  least and greatest bucket of the block (`_bucket_range`): one compare and one select per
  element and bucket present. A block whose distances all reach past max_distance holds the
  last bucket alone: a constant, no loop. The loop's bounds are traced, which reverse mode
  cannot differentiate, hence the vjp below (the same loop, a masked sum per bucket).
  """
  return _lookup_fwd(table_NxH, bucket_BxQxS)[0]


def _lookup_fwd(table_NxH, bucket_BxQxS):
  lo, hi = _bucket_range(bucket_BxQxS)
  bucket_Bx1xQxS = bucket_BxQxS[:, None]

  def step(b, acc_BxHxQxS):
    return jnp.where(
      bucket_Bx1xQxS == b, _table_row(table_NxH, b)[None, :, None, None], acc_BxHxQxS
    )

  shape = (bucket_BxQxS.shape[0], table_NxH.shape[1], *bucket_BxQxS.shape[1:])
  first_BxHxQxS = jnp.broadcast_to(_table_row(table_NxH, lo)[None, :, None, None], shape)
  out = jax.lax.fori_loop(lo + 1, hi + 1, step, first_BxHxQxS)
  return out, (table_NxH, bucket_BxQxS, lo, hi)


def _lookup_bwd(res, ct_BxHxQxS):
  table_NxH, bucket_BxQxS, lo, hi = res
  bucket_Bx1xQxS = bucket_BxQxS[:, None]
  n = jnp.arange(table_NxH.shape[0])

  def step(b, d_NxH):
    d_H = jnp.sum(jnp.where(bucket_Bx1xQxS == b, ct_BxHxQxS, 0.0), (0, 2, 3))
    return d_NxH + jnp.where((n == b)[:, None], d_H[None, :], 0.0)

  return jax.lax.fori_loop(lo, hi + 1, step, jnp.zeros_like(table_NxH)), None


table_lookup.defvjp(_lookup_fwd, _lookup_bwd)


def _check_t5(cfg, dims):
  _check_heads(cfg, dims)
  half = cfg.num_buckets // 2 if cfg.bidirectional else cfg.num_buckets
  if half < 2:
    raise errors.not_allowed(
      f"{PREFIX}.num_buckets", cfg.num_buckets, ">= 2 (>= 4 when bidirectional)"
    )
  if cfg.max_distance <= half // 2:
    raise ValueError(
      f"{PREFIX}.max_distance={cfg.max_distance} must exceed the exact range "
      f"{half // 2} (half of the buckets per direction)"
    )


@register("t5", check=_check_t5)
class T5(Scheme):
  """One learned scalar per head per distance bucket, zero at init (so it starts as NoPE)."""

  bias_of_distance = True

  @classmethod
  def gpu_kernel_blocker_of(cls, cfg):
    return base.power_of_two_blocker(cfg, "num_buckets", cfg.num_buckets, "the bucket table")

  def __init__(self, *, dims, rngs, num_buckets, max_distance, bidirectional):
    del rngs
    self.table_NxH = nnx.Param(
      jnp.zeros((num_buckets, dims.num_heads), jnp.float32), logical_axes=(None, "heads")
    )
    self.num_buckets = num_buckets
    self.max_distance = max_distance
    self.bidirectional = bidirectional

  def bias(self, q_pos_BxQ, k_pos_BxS):
    bucket_BxQxS = t5_bucket(
      -_distance_BxQxS(q_pos_BxQ, k_pos_BxS),
      self.num_buckets,
      self.max_distance,
      self.bidirectional,
    )
    bias_BxQxSxH = jnp.take(self.table_NxH[...], bucket_BxQxS, axis=0)
    return jnp.moveaxis(bias_BxQxSxH, -1, 1)

  def kernel_bias(self, q_pos_1xQ, k_pos_1xS):
    """`bias` without the gather (`table_lookup`), for the flash kernel; both signs of a
    bidirectional table too (the loop covers the buckets present, whichever they are)."""
    bucket_1xQxS = t5_bucket(
      -_distance_BxQxS(q_pos_1xQ, k_pos_1xS),
      self.num_buckets,
      self.max_distance,
      self.bidirectional,
    )
    return table_lookup(self.table_NxH[...], bucket_1xQxS)


FIRE_EPS = 1e-6  # added to psi(normalizer), as the paper's code does


@register("fire", check=_check_heads)
class FIRE(Scheme):
  """bias(i, j) = MLP(psi(i - j) / (psi(max(i, L_thr)) + eps)), psi(x) = ln(|c x| + 1).

  MLP 1 -> hidden -> heads with ReLU; c and the threshold are learned. As in the paper's code
  the threshold is L_thr = |m * L_init| with a learned multiplier m (init 1) times a fixed
  L_init: learning L_thr directly gives it an L_init times smaller gradient, so under Adam it
  barely moves. L_init is `model.position.threshold_init` (default None: the training length
  model.max_len; the paper's 512 exceeds short training lengths, where the normalizer would
  never reach past the threshold in training). The query position normalizes the distance, so
  the input stays in [0, 1] at any length.

  `init`: `linear` (default), PyTorch nn.Linear's, as the paper's appendix code builds the MLP:
  weights and biases of each layer uniform in +-1/sqrt(fan_in) (+-1 for the 1 -> hidden layer).
  `normal` (lcx before): normal weights over sqrt(fan_in) and zero biases; with b_in = 0 and
  an input >= 0 every unit with w_in < 0 stays at 0 and never gets a gradient (about half),
  and the MLP starts exactly linear in the input.

  The MLP over every (row, query, key) is B x Q x S x hidden units, forward and backward. When
  the positions are integers in [0, N), N = max(Q, S) (packed training rows, plain evaluation),
  the bias only depends on (i, |i - j|), so the MLP runs once over that N x N grid, shared by
  all rows, and each row gathers from it: the same values, B times less MLP work (12x faster
  fwd+bwd at B=16, T=256). Other positions (fractional remaps, randomized training positions
  beyond N) take the direct path; `lax.cond` picks one at run time.
  """

  gpu_kernel_blocker = "its bias MLP is a 4-D matmul (Triton lowers 2-D matmuls)"
  tpu_kernel_blocker = (
    "its bias MLP's weight gradient is a matmul contracting 3 axes (Mosaic contracts one)"
  )

  def __init__(self, *, dims, rngs, hidden, c_init, threshold_init, init):
    def normal(shape, fan_in):
      return jax.random.normal(rngs.params(), shape) / math.sqrt(fan_in)

    def uniform(shape, fan_in):
      bound = 1 / math.sqrt(fan_in)
      return jax.random.uniform(rngs.params(), shape, jnp.float32, -bound, bound)

    def zeros(shape, fan_in):
      del fan_in
      return jnp.zeros(shape)

    weight, bias = {"linear": (uniform, uniform), "normal": (normal, zeros)}[init]

    self.c = nnx.Param(jnp.asarray(c_init, jnp.float32))
    # A float, not an array: a constant, not state (only m is learned).
    self.threshold_init = float(dims.max_len if threshold_init is None else threshold_init)
    self.threshold_multiplier = nnx.Param(jnp.asarray(1.0, jnp.float32))
    self.w_in = nnx.Param(weight((hidden,), 1))
    self.b_in = nnx.Param(bias((hidden,), 1))
    self.w_out = nnx.Param(weight((hidden, dims.num_heads), hidden))
    self.b_out = nnx.Param(bias((dims.num_heads,), hidden))

  def threshold(self) -> jax.Array:
    """The effective threshold L_thr = |m * L_init|."""
    return jnp.abs(self.threshold_multiplier[...] * self.threshold_init)

  def _mlp(self, x_N):
    """Heads-last MLP of the normalized distance: ... -> ... x H."""
    leading = tuple(range(x_N.ndim))  # the axes of x, made explicit on the weights
    h_NxF = jax.nn.relu(
      x_N[..., None] * jnp.expand_dims(self.w_in[...], leading)
      + jnp.expand_dims(self.b_in[...], leading)
    )
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

    # Differentiating lax.cond makes every branch return the residuals of all branches, zeros
    # where not its own: the direct path's B x Q x S x hidden activations were written as zeros
    # every gridded step (~57 ms per step at 16 x 256 on CPU). Rematerialized, the direct path
    # keeps only its inputs: FIRE's train step 0.94x (interleaved A/B).
    direct = jax.checkpoint(self._direct)
    return jax.lax.cond(
      in_grid(q_pos_BxQ) & in_grid(k_pos_BxS), self._gridded, direct, q_pos_BxQ, k_pos_BxS
    )


def clamp_keep_gradient(x, low, high=None):
  """x clipped to [low, high] in value with the identity gradient.

  The KERPLE reference clamps each parameter's stored value in place before every forward (a
  projection), so the value used is clipped but the gradient is never cut off; a plain clip
  here would zero the gradient of a parameter past its bound and freeze it there. Unlike the
  reference the stored value may stay past the bound (it returns after as many steps).
  """
  return x + jax.lax.stop_gradient(jnp.clip(x, low, high) - x)


def kerple_log(distance, r1, r2):
  """-r1 * ln(1 + r2 |distance|) (shapes broadcast): KERPLE's logarithmic variant."""
  return -r1 * jnp.log1p(r2 * jnp.abs(distance))


def kerple_power(distance, r1, r2):
  """-r1 * |distance|^r2 (shapes broadcast), 0 at distance 0 with a finite gradient in r2."""
  d = jnp.abs(distance)
  positive = d > 0
  return -r1 * jnp.where(positive, jnp.exp(r2 * jnp.log(jnp.where(positive, d, 1.0))), 0.0)


class KerpleBias:
  """bias = kernel(i - j; r1_h, r2_h) with r1, r2 > 0 learned per head (shared by layers).

  A mixin of the two registered schemes (kernel and r2's upper bound set by each), not a
  Scheme itself: every Scheme subclass is a registered name.

  As in the paper's code: r1 and r2 start uniform in (0, r1_init) and (0, r2_init) (or at those
  values, init='constant') and are clamped to >= eps (r2 of the power variant to [eps, 2]).
  """

  kernel = None  # kerple_log or kerple_power
  r2_max = None
  bias_of_distance = True

  def __init__(self, *, dims, rngs, r1_init, r2_init, init, eps):
    def start(scale):
      if init == "constant":
        return jnp.full((dims.num_heads,), scale, jnp.float32)
      return scale * jax.random.uniform(rngs.params(), (dims.num_heads,), jnp.float32)

    self.r1 = nnx.Param(start(r1_init), logical_axes=("heads",))
    self.r2 = nnx.Param(start(r2_init), logical_axes=("heads",))
    self.eps = float(eps)

  def coefficients(self) -> tuple[jax.Array, jax.Array]:
    """(r1_H, r2_H) as the bias uses them (clamped)."""
    return (
      clamp_keep_gradient(self.r1[...], self.eps),
      clamp_keep_gradient(self.r2[...], self.eps, self.r2_max),
    )

  def bias(self, q_pos_BxQ, k_pos_BxS):
    r1_H, r2_H = self.coefficients()
    distance_Bx1xQxS = _distance_BxQxS(q_pos_BxQ, k_pos_BxS)[:, None]
    return self.kernel(distance_Bx1xQxS, r1_H[None, :, None, None], r2_H[None, :, None, None])


@register("kerple_log", check=_check_heads)
class KerpleLog(KerpleBias, Scheme):
  """-r1 ln(1 + r2 |i - j|): the paper's best variant (its code: r1 ~ U(0, 2), r2 ~ U(0, 1))."""

  kernel = staticmethod(kerple_log)


@register("kerple_power", check=_check_heads)
class KerplePower(KerpleBias, Scheme):
  """-r1 |i - j|^r2, r2 in (0, 2] (its code: r1 ~ U(0, 1), r2 ~ U(0, 2)); r2 = 1 is a learned
  ALiBi."""

  kernel = staticmethod(kerple_power)
  r2_max = fields.KERPLE_POWER_MAX


def sandwich_frequencies(dim: int, base: float = 10000.0) -> np.ndarray:
  """base^(-2i/dim) for i = 1..dim/2: the paper's sum starts at i = 1 (so does its NeMo port)."""
  return base ** (-2.0 * np.arange(1, dim // 2 + 1) / dim)


def sandwich_embedding(pos_BxL, dim: int, base: float = 10000.0) -> jax.Array:
  """[cos(p w_i), sin(p w_i)] over the sandwich frequencies, float32 BxLxZ (Z = dim, the paper's
  d'): p_m . p_n is then sum_i cos((m - n) w_i)."""
  angle_BxLxR = (
    jnp.asarray(pos_BxL, jnp.float32)[..., None]
    * jnp.asarray(sandwich_frequencies(dim, base), jnp.float32)[None, None, :]
  )
  return jnp.concatenate([jnp.cos(angle_BxLxR), jnp.sin(angle_BxLxR)], axis=-1)


def sandwich_head_scales(num_heads: int, compression: float = 8.0) -> np.ndarray:
  """1 / (compression * h / H) for heads h = 1..H: ALiBi's range of ratios, head 1 the steepest."""
  return num_heads / (compression * np.arange(1, num_heads + 1))


@register("sandwich", check=_check_heads)
class Sandwich(Scheme):
  """bias_h(m, n) = (p_m . p_n - dim/2) / (compression * h / H), no parameters.

  p are sinusoidal embeddings of their own dimension d' (`dim`, the paper's 128, not d_model):
  p_m . p_n = sum_i cos((m - n) w_i) is largest (dim/2) at distance 0 and decays, oscillating,
  with distance. Minus dim/2 (a constant the softmax ignores; the NeMo port subtracts it too)
  it is 0 at distance 0 and negative beyond; each head divides it by 8h/H like ALiBi's slopes.
  Computed as an inner product (one matmul over dim, memory B x Q x S), which in float32 loses
  about |position| * 1e-7 radians per angle: negligible below ~10^5.
  """

  bias_of_distance = True
  head_constants = ("scales_H",)
  gpu_auto_xla = (
    "its kernel bias, 12 bfloat16-split dots per element, made the default model's train "
    "step 24x NoPE's on an H200 (experiments/bench/gpu_2026-11-26b)"
  )

  @classmethod
  def gpu_kernel_blocker_of(cls, cfg):
    return base.power_of_two_blocker(cfg, "dim", cfg.dim // 2, "its frequencies")

  def __init__(self, *, dims, rngs, dim, base, compression):
    del rngs
    self.dim, self.base = int(dim), float(base)
    self.scales_H = tuple(float(s) for s in sandwich_head_scales(dims.num_heads, compression))

  def bias(self, q_pos_BxQ, k_pos_BxS):
    q_BxQxZ = sandwich_embedding(q_pos_BxQ, self.dim, self.base)
    k_BxSxZ = sandwich_embedding(k_pos_BxS, self.dim, self.base)
    inner_BxQxS = jnp.einsum("bqz,bsz->bqs", q_BxQxZ, k_BxSxZ, precision=jax.lax.Precision.HIGHEST)
    scales_1xHx1x1 = jnp.asarray(self.scales_H, jnp.float32)[None, :, None, None]
    return scales_1xHx1x1 * (inner_BxQxS - self.dim / 2)[:, None]

  def kernel_bias(self, q_pos_1xQ, k_pos_1xS):
    """`bias` of one batch row with the inner product as 2-D dots (Triton lowers no batched
    matmul and no concatenation): cos.cos + sin.sin, each by `split_dot` (six bfloat16 dots
    accumulated in float32), as accurate as the dense path's float32 product
    (tests/model/kernels/test_flash.py measures both to position 4096)."""
    freqs_1xR = jnp.asarray(sandwich_frequencies(self.dim, self.base), jnp.float32)[None]
    q_QxR = _one_row(q_pos_1xQ)[:, None] * freqs_1xR
    k_SxR = _one_row(k_pos_1xS)[:, None] * freqs_1xR
    inner_QxS = split_dot(jnp.cos(q_QxR), jnp.cos(k_SxR)) + split_dot(
      jnp.sin(q_QxR), jnp.sin(k_SxR)
    )
    scales_1xHx1x1 = jnp.asarray(self.scales_H, jnp.float32)[None, :, None, None]
    return scales_1xHx1x1 * (inner_QxS - self.dim / 2)[None, None]


def _one_row(pos_1xL):
  """The positions of the one batch row a kernel hook sees, L."""
  if pos_1xL.shape[0] != 1:
    raise ValueError(f"a kernel hook takes one batch row, got {pos_1xL.shape[0]}")
  return jnp.asarray(pos_1xL, jnp.float32).reshape(pos_1xL.shape[1:])


def split_dot(a_QxZ, b_SxZ, parts: int = 3):
  """a @ b.T, QxS float32, from bfloat16 parts: each factor x = x_0 + x_1 + x_2 + O(2^-24 |x|),
  x_i bfloat16, and a.b = sum of a_i.b_j over i + j < parts (the smaller terms dropped): six
  dots with exact products and float32 sums, float32's accuracy. On a GPU they run on the
  tensor cores (a float32 dot would run on its CUDA cores, several times slower); on CPU they
  give the same numbers, so the tests measure the GPU's rounding."""

  def split(x):
    out = []
    for _ in range(parts):
      out.append(x.astype(jnp.bfloat16))
      x = x - out[-1].astype(jnp.float32)
    return out

  a, b = split(a_QxZ), split(b_SxZ)
  terms = [(i, j) for i in range(parts) for j in range(parts) if i + j < parts]
  out_QxS = None
  for i, j in sorted(terms, key=lambda ij: -sum(ij)):  # the smallest terms first
    term_QxS = jnp.dot(a[i], b[j].T, preferred_element_type=jnp.float32)
    out_QxS = term_QxS if out_QxS is None else out_QxS + term_QxS
  return out_QxS
