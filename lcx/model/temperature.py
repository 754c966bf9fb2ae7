"""Attention temperature: per-query factors on the logits, for attention that stays sharp when
the context grows past the training length L.

Each multiplies q (before the position hooks, which are linear in q, so the q.k logit is
multiplied; additive biases such as ALiBi's are not), as ReRoPE's and Llama 4's code scale the
query. `model.attention.temperature` (trained):
  none    factor 1
  log_n   max(1, ln(n) / ln(L)), n = the query's position + 1: 1 up to L, growing slowly
          beyond. ReRoPE's form (bojone/rerope; remaps.log_n_scale), which we follow (with the
          rerope remap the factor is applied once: remaps.for_temperature). Llama 4
          scales NoPE layers' queries by 1 + 0.1 ln(floor((i + 1) / 8192) + 1) instead, also
          1 inside its floor scale, a step function beyond (`llama4`):
  llama4  Llama 4 as shipped (HF Llama4TextAttention, attn_temperature_tuning): queries of the
          NoPE blocks only (model.nope_every's, or every block of the `nope` scheme) times
          1 + 0.1 ln(floor((i + 1) / 8192) + 1), i the query's position; fixed constants,
          independent of L. Refused where no block is NoPE (it would do nothing).
  ssmax   Scalable-Softmax (Nakanishi 2025, 2501.19399): softmax(s_h ln(n) z), a learned s
          per layer and head, n the number of keys the query sees: its allowed keys under the
          causal, packed-document, pattern and window masks (`visible_keys`; a plain causal
          document: its index in the document + 1), whatever positions the remap, randomized
          positions or PoSE give it. `model.attention.ssmax_n=position` takes n = position + 1
          instead (lcx before, wrong under a window: ln 4096 for 128 keys).
          The paper leaves s's init open; we start at s_h = 1 / ln(L), so the factor is 1 at
          n = L (softmax at the training length), below 1 before it and above 1 beyond.
  scale_invariant
          Scale-invariant attention (Anson 2025, 2505.17083), with p-RoPE in the paper: each
          logit z = q.k/sqrt(E) at distance t = i - j >= 0 becomes a_t z + m_t, with
          a_t = sqrt(2 ln(t/tau + 1) + 1) and m_t = -2 ln(t/tau + 1) (the paper's a_t^2 =
          2 (ln(t/tau + 1) - ln alpha + beta/alpha), m_t = -a_t^2 + beta/alpha at its
          alpha = beta = e^0.5, so a_0 = 1, m_0 = 0); tau = `model.attention.si_tau` (its 10).
          Not a factor on q: a (scale, shift) pair from the scheme's bias hook
          (`ScaleInvariant`), so both kernels and the cache apply it block by block; a
          scheme's own bias is added after the scaling.
and, at evaluation, `model.attention.beta_c` = C (variant `beta@C`, DroPE's fitted temperature,
Gelberg 2025, 2512.12167): factor 1 + C ln(T / L) for a current length T > L (1 up to L), T
each token's sequence length (`attention.document_length`, as dynamic RoPE scaling reads it).
Every factor is a function of positions, so dense, chunked and cached attention agree. The
factors act in every block, NoPE blocks of the per-layer schedule included (Llama 4 tempers
its NoPE layers only).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from lcx.model import options
from lcx.model.positions import base as positions_base
from lcx.model.positions.remaps import log_n_scale

# The fields' values, declared where lcx.config.checks checks them before jax loads.
TEMPERATURES, SSMAX_N = options.TEMPERATURES, options.SSMAX_N

LLAMA4_FLOOR_SCALE, LLAMA4_ATTN_SCALE = 8192, 0.1  # Llama 4's shipped config values


def llama4_scale(q_pos_BxL) -> jax.Array:
  """Llama 4's NoPE query factor log(floor((i + 1) / floor_scale) + 1) * attn_scale + 1."""
  steps = jnp.floor((jnp.asarray(q_pos_BxL, jnp.float32) + 1) / LLAMA4_FLOOR_SCALE)
  return jnp.log1p(steps) * LLAMA4_ATTN_SCALE + 1


def ssmax_init(train_len: int) -> float:
  """s_h at init: 1 / ln(L), so s ln(n) is 1 at n = L (L >= 2)."""
  return 1.0 / math.log(max(train_len, 2))


def beta_factor(len_BxL, train_len: int, c: float) -> jax.Array:
  """1 + c ln(max(T, L) / L): 1 up to the training length L."""
  t = jnp.asarray(len_BxL, jnp.float32)
  return 1.0 + c * jnp.log(jnp.maximum(t, train_len) / train_len)


def _keys_by_index(pattern, size: int, block: int = 512) -> jax.Array:
  """n[d] = #{k <= d : pattern(d, k)} for in-document indices d < size (pattern None: d + 1),
  a block of query indices at a time: O(size * block) memory."""
  if pattern is None:
    return jnp.arange(1, size + 1)
  c = min(block, size)
  pad = -size % c
  d_NxC = jnp.arange(size + pad).reshape(-1, c)
  k_S = jnp.arange(size)

  def count(d_C):
    d_Cx1, k_1xS = d_C[:, None], k_S[None, :]
    return ((k_1xS <= d_Cx1) & pattern(d_Cx1, k_1xS)).sum(-1)

  return jax.lax.map(count, d_NxC).reshape(-1)[:size]


def visible_keys(plan) -> jax.Array:
  """BxQ: how many keys each query of a plan may attend to (its own included).

  A dense plan (and a generation step's) counts its mask's rows; a chunked plan (queries =
  keys), which holds no mask, counts by each query's index in its document and the plan's
  pattern (the mask depends on nothing else: causal, same document, pattern over in-document
  indices). lcx.model.decoder.Decoder counts once per forward pass (extras["keys_BxQ"])."""
  if "keys_BxQ" in plan.extras:
    return plan.extras["keys_BxQ"]
  mask = plan.extras.get("mask_BxTxT")
  if mask is not None:
    return mask.sum(-1)
  return _keys_by_index(plan.extras.get("pattern"), plan.doc_BxT.shape[1])[plan.doc_BxT]


def query_factor(
  temperature: str,
  q_pos_BxL,
  len_BxL,
  *,
  train_len: int,
  ssmax_H=None,
  beta_c: float = 0.0,
  keys_BxL=None,
  nope: bool = False,
) -> jax.Array | None:
  """The float32 factor on each query (BxLx1, or BxLxH with ssmax), or None when it is 1.

  `keys_BxL`: SSMax's n (`visible_keys`); None: position + 1 (`ssmax_n=position`).
  `nope`: the block carries no position signal (llama4 tempers those blocks only)."""
  factor = None
  if temperature == "llama4" and nope:
    factor = llama4_scale(q_pos_BxL)[:, :, None]
  elif temperature == "log_n":
    factor = log_n_scale(q_pos_BxL, max(train_len, 2))[:, :, None]
  elif temperature == "ssmax":
    n_BxL = jnp.asarray(q_pos_BxL if keys_BxL is None else keys_BxL - 1, jnp.float32) + 1
    factor = jnp.log(n_BxL)[:, :, None] * ssmax_H[None, None, :]
  if beta_c:
    beta = beta_factor(len_BxL, train_len, beta_c)
    beta_BxLx1 = jnp.broadcast_to(beta, jnp.shape(q_pos_BxL))[:, :, None]
    factor = beta_BxLx1 if factor is None else factor * beta_BxLx1
  return factor


def scale_queries(q_BxLxHxE, factor):
  """q times a `query_factor` (None: q unchanged), in q's dtype."""
  if factor is None:
    return q_BxLxHxE
  return q_BxLxHxE * factor[..., None].astype(q_BxLxHxE.dtype)


def scale_invariant(distance, tau: float):
  """(a_t, m_t) at distances t (float32; t < 0, masked keys, read as 0)."""
  log_term = jnp.log1p(jnp.maximum(jnp.asarray(distance, jnp.float32), 0.0) / tau)
  return jnp.sqrt(2.0 * log_term + 1.0), -2.0 * log_term


class ScaleInvariant(positions_base.BiasWrapper):
  """A position scheme whose logits become a_t z + m_t + its own bias: every hook is the
  scheme's, but `bias` returns the (scale, shift) pair `attention.scores` applies. Built
  per forward pass around the model's schemes (lcx.model.decoder.Decoder.layer_scheme); holds no
  parameters of its own."""

  def __init__(self, inner, tau: float):
    super().__init__(inner)
    self.tau = float(tau)

  def bias(self, q_pos_BxQ, k_pos_BxS):
    q = jnp.asarray(q_pos_BxQ, jnp.float32)
    k = jnp.asarray(k_pos_BxS, jnp.float32)
    scale_BxQxS, shift_BxQxS = scale_invariant(q[:, :, None] - k[:, None, :], self.tau)
    inner = self.inner.bias(q_pos_BxQ, k_pos_BxS)
    shift = shift_BxQxS[:, None] if inner is None else shift_BxQxS[:, None] + inner
    return scale_BxQxS[:, None], shift
