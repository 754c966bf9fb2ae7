"""Attention temperature: per-query factors on the logits, for attention that stays sharp when
the context grows past the training length L.

Each multiplies q (before the position hooks, which are linear in q, so the q.k logit is
multiplied; additive biases such as ALiBi's are not), as ReRoPE's and Llama 4's code scale the
query. `model.attention.temperature` (trained):
  none    factor 1
  log_n   max(1, ln(n) / ln(L)), n = the query's position + 1: 1 up to L, growing slowly
          beyond. ReRoPE's form (bojone/rerope; remaps.log_n_scale), which we follow. Llama 4
          scales NoPE layers' queries by 1 + 0.1 ln(floor((i + 1) / 8192) + 1) instead, also
          1 inside its floor scale, a step function beyond (`llama4`):
  llama4  Llama 4 as shipped (HF Llama4TextAttention, attn_temperature_tuning): queries of the
          NoPE blocks only (model.nope_every's, or every block of the `nope` scheme) times
          1 + 0.1 ln(floor((i + 1) / 8192) + 1), i the query's position; fixed constants,
          independent of L. Refused where no block is NoPE (it would do nothing).
  ssmax   Scalable-Softmax (Nakanishi 2025, 2501.19399): softmax(s_h ln(n) z), a learned s
          per layer and head, n the number of keys the query sees (causal: position + 1).
          The paper leaves s's init open; we start at s_h = 1 / ln(L), so the factor is 1 at
          n = L (softmax at the training length), below 1 before it and above 1 beyond.
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

from lcx.positions.remaps import log_n_scale

TEMPERATURES = ("none", "log_n", "ssmax", "llama4")
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


def query_factor(
  temperature: str,
  q_pos_BxL,
  len_BxL,
  *,
  train_len: int,
  ssmax_H=None,
  beta_c: float = 0.0,
  nope: bool = False,
) -> jax.Array | None:
  """The float32 factor on each query (BxLx1, or BxLxH with ssmax), or None when it is 1.

  `nope`: the block carries no position signal (llama4 tempers those blocks only)."""
  factor = None
  if temperature == "llama4" and nope:
    factor = llama4_scale(q_pos_BxL)[:, :, None]
  elif temperature == "log_n":
    factor = log_n_scale(q_pos_BxL, max(train_len, 2))[:, :, None]
  elif temperature == "ssmax":
    n_BxL = jnp.asarray(q_pos_BxL, jnp.float32) + 1
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
