"""Causal self-attention kernels: dense for training, chunked online softmax for long evaluation.

Both take the same ingredients, so they agree to float precision:
  - the scheme's `rotate` and `bias` hooks (positions in, no stored (T, T) tables),
  - the remap's branches (Self-Extend, ReRoPE: several position views merged by a `use` mask),
  - a mask built from causality, packed-document segments and an optional sparse pattern.
Shapes: B batch, T length, H query heads, G key/value heads (GQA, H = G * R), K head dim.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

NEG_INF = -1e30  # finite, so fully masked padding rows never produce NaN


def _mask(q_idx_Q, k_idx_K, q_seg_BxQ, k_seg_BxK, pattern):
  """Allowed (query, key) pairs: causal, same document, and inside the sparse pattern."""
  allowed = (q_idx_Q[:, None] >= k_idx_K[None, :])[None]
  allowed = allowed & (q_seg_BxQ[:, :, None] == k_seg_BxK[:, None, :])
  if pattern is not None:
    allowed = allowed & pattern(q_idx_Q[:, None], k_idx_K[None, :])[None]
  return allowed  # BxQxK


def _rotate_branches(q_BxTxHxK, k_BxTxGxK, pos_BxT, scheme, remap):
  """Rotates q and k once per remap branch, over the whole sequence (O(T) memory)."""
  out = []
  for branch in remap.branches(pos_BxT, pos_BxT):
    q, k = scheme.rotate(q_BxTxHxK, k_BxTxGxK, branch.q_pos, branch.k_pos)
    out.append((q, k, branch))
  return out


def _logits(q_BxQxHxK, k_BxKxGxK, qb_pos_BxQ, kb_pos_BxK, scheme):
  """Scaled logits of one branch, with its bias, as BxGxRxQxK in float32."""
  b, nq, h, d = q_BxQxHxK.shape
  g = k_BxKxGxK.shape[2]
  q_BxQxGxRxK = q_BxQxHxK.reshape(b, nq, g, h // g, d)
  logits = jnp.einsum("bqgrd,bkgd->bgrqk", q_BxQxGxRxK, k_BxKxGxK,
                      preferred_element_type=jnp.float32) * (d ** -0.5)
  bias = scheme.bias(qb_pos_BxQ, kb_pos_BxK)
  if bias is not None:
    bias = jnp.broadcast_to(bias, (bias.shape[0], h) + bias.shape[2:])
    logits = logits + bias.reshape(bias.shape[0], g, h // g, *bias.shape[2:]).astype(jnp.float32)
  return logits


def _merged_logits(rotated, q_sl, k_sl, pos_BxT, scheme):
  """Logits of the last branch, overridden by earlier branches where their `use` holds."""
  logits = None
  for q, k, branch in reversed(rotated):
    lb = _logits(q_sl(q), k_sl(k), q_sl(branch.q_pos), k_sl(branch.k_pos), scheme)
    if logits is None:
      logits = lb
    else:
      use_BxQxK = branch.use(q_sl(pos_BxT)[:, :, None], k_sl(pos_BxT)[:, None, :])
      logits = jnp.where(use_BxQxK[:, None, None], lb, logits)
  return logits


def dense(q_BxTxHxK, k_BxTxGxK, v_BxTxGxK, pos_BxT, seg_BxT, *, scheme, remap, pattern=None):
  """Materializes the full BxHxTxT logits: fastest for training lengths."""
  b, t, h, d = q_BxTxHxK.shape
  g = k_BxTxGxK.shape[2]
  rotated = _rotate_branches(q_BxTxHxK, k_BxTxGxK, pos_BxT, scheme, remap)
  ident = lambda x: x
  logits = _merged_logits(rotated, ident, ident, pos_BxT, scheme)
  idx = jnp.arange(t)
  mask_BxTxT = _mask(idx, idx, seg_BxT, seg_BxT, pattern)
  logits = jnp.where(mask_BxTxT[:, None, None], logits, NEG_INF)
  probs = jax.nn.softmax(logits, axis=-1).astype(v_BxTxGxK.dtype)
  out = jnp.einsum("bgrqk,bkgd->bqgrd", probs, v_BxTxGxK)
  return out.reshape(b, t, h, d)


def chunked(q_BxTxHxK, k_BxTxGxK, v_BxTxGxK, pos_BxT, seg_BxT, *, scheme, remap, pattern=None,
            chunk_size=512):
  """Online-softmax attention over key blocks: memory O(T * chunk), not O(T^2).

  Query block i visits key blocks 0..i only (causality), so the work is half of dense.
  T is padded to a multiple of `chunk_size` with segment 0, which no real token attends to.
  """
  b, t, h, d = q_BxTxHxK.shape
  g = k_BxTxGxK.shape[2]
  c = min(chunk_size, t)
  n = -(-t // c)
  # Rotate before padding: dynamic scaling methods read the true length from q's shape.
  rotated = _rotate_branches(q_BxTxHxK, k_BxTxGxK, pos_BxT, scheme, remap)
  pad_to_blocks = lambda x: jnp.pad(x, [(0, 0), (0, n * c - t)] + [(0, 0)] * (x.ndim - 2),
                                    mode="edge")
  rotated = [(pad_to_blocks(q), pad_to_blocks(k),
              dataclasses.replace(br, q_pos=pad_to_blocks(br.q_pos),
                                  k_pos=pad_to_blocks(br.k_pos))) for q, k, br in rotated]
  v_BxTxGxK, pos_BxT = pad_to_blocks(v_BxTxGxK), pad_to_blocks(pos_BxT)
  seg_BxT = jnp.pad(seg_BxT, [(0, 0), (0, n * c - t)])  # segment 0: never attended
  block = lambda start: (lambda x: jax.lax.dynamic_slice_in_dim(x, start, c, axis=1))

  def query_block(i):
    q_sl = block(i * c)
    q_idx = i * c + jnp.arange(c)

    def key_block(j, carry):
      m_prev, l_prev, acc = carry
      k_sl = block(j * c)
      logits = _merged_logits(rotated, q_sl, k_sl, pos_BxT, scheme)
      mask = _mask(q_idx, j * c + jnp.arange(c), q_sl(seg_BxT), k_sl(seg_BxT), pattern)
      logits = jnp.where(mask[:, None, None], logits, NEG_INF)
      m_new = jnp.maximum(m_prev, logits.max(-1))
      p = jnp.exp(logits - m_new[..., None])
      corr = jnp.exp(m_prev - m_new)
      l_new = l_prev * corr + p.sum(-1)
      pv = jnp.einsum("bgrqk,bkgd->bgrqd", p.astype(v_BxTxGxK.dtype), k_sl(v_BxTxGxK),
                      preferred_element_type=jnp.float32)
      return m_new, l_new, acc * corr[..., None] + pv

    shape = (b, g, h // g, c)
    init = (jnp.full(shape, NEG_INF, jnp.float32), jnp.zeros(shape, jnp.float32),
            jnp.zeros(shape + (d,), jnp.float32))
    _, l, acc = jax.lax.fori_loop(0, i + 1, key_block, init)
    out = (acc / l[..., None]).astype(q_BxTxHxK.dtype)  # BxGxRxCxK
    return jnp.moveaxis(out, 3, 1).reshape(b, c, h, d)

  out_NxBxCxHxK = jax.lax.map(query_block, jnp.arange(n))
  out = jnp.moveaxis(out_NxBxCxHxK, 0, 1).reshape(b, n * c, h, d)
  return out[:, :t]


KERNELS = {"dense": dense, "chunked": chunked}


def get_kernel(name: str, chunk_size: int):
  if name not in KERNELS:
    raise ValueError(f"attention kernel {name!r} is unknown; allowed: {sorted(KERNELS)}")
  if name == "chunked":
    return functools.partial(chunked, chunk_size=chunk_size)
  return dense
