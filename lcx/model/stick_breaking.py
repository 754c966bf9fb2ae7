"""Stick-breaking attention (Tan et al. 2024, arXiv 2410.17980): `model.attention.kind`.

A query breaks a stick of length 1 over its allowed keys from the nearest to the farthest: key j
takes the fraction beta_ij = sigmoid(z_ij) of what the nearer keys left,
  A_ij = beta_ij * prod_{allowed k, j < k < i} (1 - beta_ik),   o_i = sum_j A_ij v_j,
with no normalization: the weights sum to <= 1 (the rest goes to no key). No softmax shares one
budget among all keys, so a longer context does not dilute the near keys' weights: the process
itself prefers recent keys, which is why the paper needs no position encoding. lcx composes it
with the same ingredients as softmax: z_ij = q_i . k_j / sqrt(E) with the scheme's `rotate` and
`bias` hooks, the remap's branches, the temperature (it scales q) and the plans' masks, all from
lcx.model.attention's public logits (`attention.logits`, block by block `attention.scores`).

The diagonal is excluded: query i sees keys j < i only, as the reference's default
(`attend_current=False` in shawntan/stickbreaking-attention's `sb_attn_varlen`; its decoding
step drops the current key, `k[..., :-1, :]`). A document's first token attends to nothing
(output 0; the residual carries it). As the reference model (`rem * head_bias`), the stick's
remainder rem_i = 1 - sum_j A_ij = prod_j (1 - beta_ij) times a learned vector b_h per head
(from 0) joins the output: o_i + rem_i b_h, so a query that takes little from its keys still
says so (`remainder_HxE`; `model.attention.remainder_bias=False` drops it). The reference then
applies a GroupNorm per head, which lcx does not.

Log space, for stability at any length (1 - sigmoid(z) = sigmoid(-z), log of it = -softplus(z)):
  log A_ij = log_sigmoid(z_ij) - sum_{allowed k, j < k < i} softplus(z_ik),
a reverse cumulative sum over the keys. A masked key (causal, another document, outside a sparse
pattern) contributes neither a weight nor a factor. There is no sink: `lcx.config.checks` refuses
`model.attention.sink=learned` with this kind.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from lcx.model import attention


def _no_sink(sink_H) -> None:
  if sink_H is not None:
    raise ValueError(
      "stick-breaking attention has no sink (its weights already sum to <= 1): "
      "model.attention.sink must be 'none'"
    )


def _earlier(q_idx_Q, k_idx_S):
  """1 x Q x S: the key strictly before the query (the reference's attend_current=False)."""
  return (q_idx_Q[:, None] > k_idx_S[None, :])[None]


def _weights(logits_BxGxPxQxS, allowed_BxQxS, nearer_BxGxPxQ):
  """(A_BxGxPxQxS, the block's sum of softplus over its allowed keys) for one block of keys,
  given `nearer`: each query's sum of softplus(z) over the allowed keys nearer than the block."""
  allowed = allowed_BxQxS[:, None, None]
  broken_BxGxPxQxS = jnp.where(allowed, jax.nn.softplus(logits_BxGxPxQxS), 0.0)  # -log(1 - beta)
  from_j = jax.lax.cumsum(broken_BxGxPxQxS, axis=4, reverse=True)  # sum over keys k >= j
  after_j = jnp.concatenate([from_j[..., 1:], jnp.zeros_like(from_j[..., :1])], axis=-1)
  log_a = jax.nn.log_sigmoid(logits_BxGxPxQxS) - after_j - nearer_BxGxPxQ[..., None]
  return jnp.where(allowed, jnp.exp(log_a), 0.0), from_j[..., 0]


def _with_remainder(out_BxGxPxQxE, broken_BxGxPxQ, remainder_HxE):
  """o + rem * b_h, rem = exp(-sum of softplus over every allowed key) = prod_j (1 - beta_ij)."""
  if remainder_HxE is None:
    return out_BxGxPxQxE
  g, p = out_BxGxPxQxE.shape[1:3]
  bias_1xGxPx1xE = remainder_HxE.astype(jnp.float32).reshape(1, g, p, 1, -1)
  rem = jnp.exp(-broken_BxGxPxQ)[..., None]
  return (out_BxGxPxQxE.astype(jnp.float32) + rem * bias_1xGxPx1xE).astype(out_BxGxPxQxE.dtype)


def weights(logits_BxGxPxQxS, mask_BxQxS, q_idx_Q, k_idx_S) -> jax.Array:
  """A_BxGxPxQxS of queries over all their keys, from a plan's logits and mask (diagonal
  included: the query and key indices drop it). Also what `lcx.tools.analysis` maps."""
  allowed = mask_BxQxS & _earlier(q_idx_Q, k_idx_S)
  out, _ = _weights(logits_BxGxPxQxS, allowed, jnp.zeros(logits_BxGxPxQxS.shape[:-1], jnp.float32))
  return out


def attend_dense(
  q_BxTxHxE, k_BxTxGxE, v_BxGxTxE, plan: attention.Plan, *, scheme, sink_H=None, remainder_HxE=None
) -> jax.Array:
  """-> out_BxHxTxE, as `attention.attend_dense` (a generation step's keys: the cache's slots);
  `remainder_HxE`: the remainder's learned vector per head (`_with_remainder`), or None."""
  _no_sink(sink_H)
  b, t, h, d = q_BxTxHxE.shape
  g, s = k_BxTxGxE.shape[2], k_BxTxGxE.shape[1]
  # Masked logits (NEG_INF where not allowed): `_weights` keeps only the allowed ones.
  logits = attention.logits(q_BxTxHxE, k_BxTxGxE, plan, scheme).reshape(b, g, h // g, t, s)
  k_idx_S = jnp.arange(s)
  allowed = plan.extras["mask_BxTxT"] & _earlier(plan.start + jnp.arange(t), k_idx_S)
  a, broken = _weights(logits, allowed, jnp.zeros(logits.shape[:-1], jnp.float32))
  out_BxGxPxTxE = jnp.einsum("bgpqs,bgse->bgpqe", a.astype(v_BxGxTxE.dtype), v_BxGxTxE)
  return _with_remainder(out_BxGxPxTxE, broken, remainder_HxE).reshape(b, h, t, d)


def attend_chunked(
  q_BxTxHxE,
  k_BxTxGxE,
  v_BxGxTxE,
  plan: attention.Plan,
  *,
  scheme,
  sink_H=None,
  remainder_HxE=None,
  chunk_size=512,
) -> jax.Array:
  """-> out_BxHxTxE, as `attention.attend_chunked` (a `prepare_chunked` plan); memory O(T * C).

  Query block i visits key blocks i, i-1, ..., 0 (nearest first), carrying per query the sum of
  softplus over the nearer allowed keys: the factor every farther key's weight is multiplied by.
  A scan over all blocks with a cond skipping j < 0, so the result is differentiable too.
  T is padded to a multiple of C with segment 0, which no real token attends to.
  """
  _no_sink(sink_H)
  b, t, h, d = q_BxTxHxE.shape
  g = k_BxTxGxE.shape[2]
  c = min(chunk_size, t)
  n = -(-t // c)
  tp = n * c

  def pad(x, axis=1, mode="edge"):
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, tp - t)
    return jnp.pad(x, widths, mode=mode)

  def rows(x, start, axis=1):
    return jax.lax.dynamic_slice_in_dim(x, start, c, axis=axis)

  # Rotate before padding (lengths come from plan.len_BxT); padded rows are never attended.
  rotated = [
    (pad(q), pad(k), pad(br.q_pos), pad(br.k_pos), br)
    for (q, k), br in zip(attention.rotate(q_BxTxHxE, k_BxTxGxE, plan, scheme), plan.branches)
  ]
  v_BxGxTxE = pad(v_BxGxTxE, axis=2)
  pos_BxT, doc_BxT = pad(plan.pos_BxT), pad(plan.doc_BxT)
  seg_BxT = pad(plan.seg_BxT, mode="constant")  # segment 0: never attended
  pattern = plan.extras["pattern"]

  def query_block(i):
    q_idx = i * c + jnp.arange(c)
    q_pos, q_seg, q_doc = (rows(x, i * c) for x in (pos_BxT, seg_BxT, doc_BxT))

    def visit(j, carry):
      nearer_BxGxPxC, acc_BxGxPxCxE = carry
      k_idx = j * c + jnp.arange(c)
      k_pos, k_seg, k_doc = (rows(x, j * c) for x in (pos_BxT, seg_BxT, doc_BxT))
      logits = attention.scores(
        [(rows(q, i * c), rows(k, j * c)) for q, k, *_ in rotated],
        [scheme.bias(rows(qp, i * c), rows(kp, j * c)) for _, _, qp, kp, _ in rotated],
        [attention.use(br, q_pos, k_pos) for *_, br in rotated],
      )
      mask = attention.visible(q_idx, k_idx, q_seg, k_seg, q_doc, k_doc, pattern)
      allowed = mask & _earlier(q_idx, k_idx)
      a, broken = _weights(logits, allowed, nearer_BxGxPxC)
      av = jnp.einsum(
        "bgpqs,bgse->bgpqe",
        a.astype(v_BxGxTxE.dtype),
        rows(v_BxGxTxE, j * c, 2),
        preferred_element_type=jnp.float32,
      )
      return nearer_BxGxPxC + broken, acc_BxGxPxCxE + av

    def step(carry, back):
      j = i - back
      return jax.lax.cond(j >= 0, visit, lambda j, carry: carry, j, carry), None

    shape = (b, g, h // g, c)
    init = (jnp.zeros(shape, jnp.float32), jnp.zeros(shape + (d,), jnp.float32))
    (broken, acc), _ = jax.lax.scan(step, init, jnp.arange(n))
    return _with_remainder(acc, broken, remainder_HxE).astype(q_BxTxHxE.dtype)  # BxGxPxCxE

  out_NxBxGxPxCxE = jax.lax.map(query_block, jnp.arange(n))
  out_BxHxTxE = jnp.transpose(out_NxBxGxPxCxE, (1, 2, 3, 0, 4, 5)).reshape(b, h, tp, d)
  return out_BxHxTxE[:, :, :t]
