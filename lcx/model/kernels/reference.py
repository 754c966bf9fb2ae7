"""The plain-jnp attention the Pallas kernel (`flash.py`) must equal: same inputs, T x T logits.

Built from lcx.model.attention's public pieces (`scores`, `visible`, `softmax`), so it is the
dense path restated over the kernel's inputs: one (q, k) pair per remap branch, already
rotated, the branches' positions and `use` masks, true positions, segments and in-document
indices, the scheme (its `bias` hook), the sparse pattern, the sink and an input hook's prefix
sums.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from lcx.model import attention


def attention_reference(
  qk_pairs,
  v_BxGxTxE,
  branches,
  pos_BxT,
  seg_BxT,
  doc_BxT,
  *,
  scheme,
  pattern=None,
  sink_H=None,
  prefix_BxSxH=None,
) -> jax.Array:
  """-> out_BxHxTxE, materialising every B x H x T x T logit; `prefix_BxSxH`: an input hook's
  prefix sums c (FoX), logit (i, j) plus c_i - c_j (`attention.add_prefix`), or None."""
  b, t, h, e = qk_pairs[0][0].shape
  logits_BxGxPxTxT = attention.scores(
    qk_pairs,
    [scheme.bias(br.q_pos, br.k_pos) for br in branches],
    [attention.use(br, pos_BxT, pos_BxT) for br in branches],
  )
  if prefix_BxSxH is not None:
    prefix_BxHxS = jnp.swapaxes(prefix_BxSxH, 1, 2)
    logits_BxGxPxTxT = attention.add_prefix(logits_BxGxPxTxT, prefix_BxHxS, prefix_BxHxS)
  idx_T = jnp.arange(t)
  mask_BxTxT = attention.visible(idx_T, idx_T, seg_BxT, seg_BxT, doc_BxT, doc_BxT, pattern)
  logits_BxGxPxTxT = jnp.where(mask_BxTxT[:, None, None], logits_BxGxPxTxT, attention.NEG_INF)
  probs = attention.softmax(logits_BxGxPxTxT, sink_H).astype(v_BxGxTxE.dtype)
  out_BxGxPxTxE = jnp.einsum("bgpqs,bgse->bgpqe", probs, v_BxGxTxE)
  return out_BxGxPxTxE.reshape(b, h, t, e).astype(qk_pairs[0][0].dtype)
