"""Causal self-attention kernels: dense for training, chunked online softmax for long evaluation.

A kernel has two halves. `prepare(pos, seg, scheme=, remap=, pattern=)` does the work that
depends on positions only, once per forward pass, and its result (a `Plan`) is shared by every
layer: the remap's branches and, in the dense kernel, the mask and each branch's bias. A learned
bias (T5, FIRE) is then evaluated once per step and its gradient flows back once, not once per
layer. `attend(q, k, v, plan, scheme=)` does the per-layer work; the scheme's `rotate` hook acts
there because it touches q and k. q and k come token-major (the rotary hooks' layout), v goes in
and the output comes out head-major, the layouts the matmuls around them want (no copies).

Both kernels take the same ingredients, so they agree to float precision:
  - the scheme's `rotate` and `bias` hooks (positions in, no stored (T, T) tables), and its
    `contextual` hook (CoPE: logits from q and the logits, no positions), which the dense kernel
    calls once over all keys and the chunked kernel once per key block, nearest block first,
  - the remap's branches (Self-Extend, ReRoPE: several position views merged by a `use` mask),
  - a mask built from causality, packed-document segments and an optional sparse pattern, the
    pattern seeing each token's index within its own document (not its row index, nor its
    position, which remaps and randomized training positions change),
  - an optional learned sink logit per head in every softmax denominator (`softmax`),
  - the prefix sums c_BxSxH of a scheme's `from_input` hook (FoX), computed per layer from its
    hidden states (lcx.model.decoder): logit (i, j) gets c_i - c_j (`add_prefix`), block by block.
  - PaTH's Householder transforms between each query and its keys (`householder`: w and beta
    of every token from the layer's input; lcx/model/positions/path.py), in place of plain q.k.

A generation step (`prepare_step`) is a dense plan too, whose queries are the new tokens and
whose keys are a KV cache's slots: the same hooks, mask and merge, so cached logits equal the
full forward pass.

The logits are assembled in one place, public, for every kernel and tool to build on:
`logits(q, k, plan, scheme)` gives a dense plan's masked B x H x Q x S logits (the dense
softmax and stick-breaking kernels, lcx.tools.analysis); callers that go block by block or row by
row (the chunked kernels, the Pallas kernel's reference, lcx.tools.analysis past DENSE_MAX) take its
parts: `rotate`, `scores` (branches, biases, `use` merge), `add_prefix`, `with_contextual`,
`visible` (the mask) and `softmax`.

Shape letters (array-name suffixes such as q_BxTxHxE), one meaning each:
  B batch                  H query heads                 D model width (d_model)
  T, L sequence length     G key/value heads (GQA)       E head dim (head_dim)
  Q query length           P query heads per kv head     F MLP width
  S key length             R rotary pairs                V vocabulary
  C chunk length           N a count of items (rows, chunks, table entries)
H = G * P; R = rotary_dim / 2; Q and S are T (L) unless a block's length is meant.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp

from lcx.model import cpu_tuned
from lcx.model.positions.documents import document_index, document_length

NEG_INF = -1e30  # finite, so fully masked padding rows never produce NaN
# Names (jax.ad_checkpoint.checkpoint_name) of what every kernel's attend returns, and of the
# Pallas kernel's log-sum-exp: model.remat=matmuls keeps them for the backward (decoder.KEPT).
OUT, LSE = "attention_out", "attention_lse"


def document_cumsum(a_BxTxH: jax.Array, seg_BxT: jax.Array) -> jax.Array:
  """Prefix sums of `a` along T that restart at each packed document (where the segment id
  changes): a segmented associative scan, so c stays as small as one document's sums (with one
  running sum over a packed row, c_i - c_j would be a difference of large numbers)."""
  starts_BxT = document_index(seg_BxT) == 0

  def combine(left, right):
    (a_left, start_left), (a_right, start_right) = left, right
    return jnp.where(start_right[..., None], a_right, a_left + a_right), start_left | start_right

  return jax.lax.associative_scan(combine, (a_BxTxH, starts_BxT), axis=1)[0]


def visible(q_idx_Q, k_idx_S, q_seg_BxQ, k_seg_BxS, q_doc_BxQ, k_doc_BxS, pattern):
  """Allowed (query, key) pairs: causal, same document, and inside the sparse pattern."""
  allowed = (q_idx_Q[:, None] >= k_idx_S[None, :])[None]
  allowed = allowed & (q_seg_BxQ[:, :, None] == k_seg_BxS[:, None, :])
  if pattern is not None:
    allowed = allowed & pattern(q_doc_BxQ[:, :, None], k_doc_BxS[:, None, :])
  return allowed  # BxQxS


def _add_bias(logits_BxGxPxQxS, bias):
  """logits plus an optional BxHxQxS bias (H may be 1: broadcast), in float32; or, for a
  (scale, shift) pair of such arrays (scale-invariant attention), logits * scale + shift."""
  if bias is None:
    return logits_BxGxPxQxS
  g, per = logits_BxGxPxQxS.shape[1:3]

  def grouped(x):
    x = jnp.broadcast_to(x, (x.shape[0], g * per) + x.shape[2:])
    return x.reshape(x.shape[0], g, per, *x.shape[2:]).astype(jnp.float32)

  if isinstance(bias, tuple):
    scale, shift = bias
    return logits_BxGxPxQxS * grouped(scale) + grouped(shift)
  return logits_BxGxPxQxS + grouped(bias)


def _heads_major(q_BxQxHxE, g):
  """Token-major q as BxGxPxQxE."""
  b, nq, h, d = q_BxQxHxE.shape
  return jnp.transpose(q_BxQxHxE.reshape(b, nq, g, h // g, d), (0, 2, 3, 1, 4))


def _logits(q_BxQxHxE, k_BxSxGxE, bias, householder=None):
  """Scaled logits plus an optional bias, as BxGxPxQxS float32 (token-major q and k); with
  `householder` (PaTH's w_BxSxGxE, beta_BxSxG; Q = S), q_i^T H_i ... H_{j+1} k_j in place of
  q_i . k_j (`path.dense_logits`; 0 above the diagonal, which the mask removes).

  q is laid out heads-major and scaled first (`_q_grouped`): from token-major q, XLA:CPU
  computed the logits as k . q (S before Q) and transposed them, a B x H x T x T copy per
  layer; scaling the B x H x T x T logits instead cost 0.4-1.2% of the step (NoPE, RoPE,
  ALiBi, FIRE; one interleaved A/B)."""
  q_BxGxPxQxE = _q_grouped(q_BxQxHxE, k_BxSxGxE.shape[2])
  if householder is not None:
    from lcx.model.positions import (
      path,  # deferred: lcx.model.positions loads every scheme on first use
    )

    w_BxSxGxE, beta_BxSxG = householder
    heads_major = functools.partial(jnp.moveaxis, source=1, destination=2)
    logits = path.dense_logits(
      q_BxGxPxQxE, heads_major(k_BxSxGxE), heads_major(w_BxSxGxE), jnp.moveaxis(beta_BxSxG, 1, 2)
    )
    return _add_bias(logits, bias)
  logits = jnp.einsum(
    "bgpqe,bsge->bgpqs", q_BxGxPxQxE, k_BxSxGxE, preferred_element_type=jnp.float32
  )
  return _add_bias(logits, bias)


def _sink(sink_H, heads):
  """A per-head sink logit as float32 of shape `heads`: (G, P) or (H,), q's head order."""
  return sink_H.astype(jnp.float32).reshape(heads)


def softmax(logits_BxGxPxQxS, sink_H=None):
  """Softmax over the keys; with `sink_H`, one more logit per head joins every denominator but
  no key (gpt-oss, x-transformers' head_learned_sink), so a query may attend to nothing: its
  weights over the real keys then sum to < 1. The head axes may also be one, BxHxQxS."""
  sink = None
  if sink_H is not None:
    heads = logits_BxGxPxQxS.shape[1:-2]  # (G, P) or (H,)
    sink = _sink(sink_H, heads)[None, ..., None, None]
  return _softmax_vjp(logits_BxGxPxQxS, sink)


def _softmax_plain(logits_BxGxPxQxS, sink_1xGxPx1x1):
  """The softmax with an optional sink in the denominator, plain jnp: the reference of
  `_softmax_tuned`, run off CPU and inside `cpu_tuned.plain()` (forward-mode autodiff)."""
  m = jax.lax.stop_gradient(logits_BxGxPxQxS.max(-1, keepdims=True))
  if sink_1xGxPx1x1 is not None:
    m = jnp.maximum(m, sink_1xGxPx1x1)
  p = jnp.exp(logits_BxGxPxQxS - m)
  denominator = p.sum(-1, keepdims=True)
  if sink_1xGxPx1x1 is not None:
    denominator = denominator + jnp.exp(sink_1xGxPx1x1 - m)
  return p / denominator


@jax.custom_vjp
def _softmax_tuned(logits_BxGxPxQxS, sink_1xGxPx1x1):
  """The softmax with a hand-written backward, y * (g - sum(g * y)), from y alone (a sink's
  own weight, 1 - sum(y), gets no cotangent). The default train step is 8% faster on XLA:CPU
  than with jax.nn.softmax (whose custom JVP transposes into more passes over the logits) and
  with a sink 16% faster than autodiff of max, exp, sum and division."""
  return _softmax_plain(logits_BxGxPxQxS, sink_1xGxPx1x1)


def _softmax_fwd(logits_BxGxPxQxS, sink_1xGxPx1x1):
  y = _softmax_plain(logits_BxGxPxQxS, sink_1xGxPx1x1)
  return y, (y, sink_1xGxPx1x1)


def _softmax_bwd(res, g_BxGxPxQxS):
  y_BxGxPxQxS, sink_1xGxPx1x1 = res
  gy_BxGxPxQx1 = jnp.sum(g_BxGxPxQxS * y_BxGxPxQxS, -1, keepdims=True)
  grad_logits = y_BxGxPxQxS * (g_BxGxPxQxS - gy_BxGxPxQx1)
  if sink_1xGxPx1x1 is None:
    return grad_logits, None
  sink_weight_BxGxPxQx1 = 1 - jnp.sum(y_BxGxPxQxS, -1, keepdims=True)
  grad_sink = -jnp.sum(
    sink_weight_BxGxPxQx1 * gy_BxGxPxQx1, (0, y_BxGxPxQxS.ndim - 2), keepdims=True
  )
  return grad_logits, grad_sink.astype(sink_1xGxPx1x1.dtype)


_softmax_tuned.defvjp(_softmax_fwd, _softmax_bwd)
_softmax_vjp = cpu_tuned.choose(_softmax_tuned, _softmax_plain)  # the seam (lcx/model/cpu_tuned.py)


def _merge(logits_and_use):
  """Logits of the last branch, overridden by earlier branches where their `use` holds."""
  (logits, _), *earlier = logits_and_use[::-1]
  for lb, use_BxQxS in earlier:
    logits = jnp.where(use_BxQxS[:, None, None], lb, logits)
  return logits


def use(branch, q_pos_BxQ, k_pos_BxS):
  return None if branch.use is None else branch.use(q_pos_BxQ[:, :, None], k_pos_BxS[:, None, :])


def rotate(q_BxTxHxE, k_BxTxGxE, plan, scheme):
  """q and k rotated once per remap branch, over the whole sequence (O(T) memory)."""
  return [
    scheme.rotate(
      _scaled(q_BxTxHxE, br.q_scale),
      k_BxTxGxE,
      br.q_pos,
      br.k_pos,
      q_len_BxL=plan.len_BxT,
      k_len_BxL=plan.len_BxT,
    )
    for br in plan.branches
  ]


def _q_grouped(q_BxQxHxE, g):
  """Token-major q as BxGxPxQxE times 1/sqrt(E): the layout and the scale of the logits."""
  return _heads_major(q_BxQxHxE, g) * (q_BxQxHxE.shape[-1] ** -0.5)


def with_contextual(scheme, q_BxQxHxE, logits_BxGxPxQxS, mask_BxQxS):
  """logits plus the scheme's contextual logits over every key in one call (the dense kernel,
  a generation step, lcx.tools.analysis); unchanged, at no cost, when the scheme has no such
  hook."""
  if scheme.contextual is None:
    return logits_BxGxPxQxS
  q_BxGxPxQxE = _q_grouped(q_BxQxHxE, logits_BxGxPxQxS.shape[1])
  extra_BxGxPxQxS, _ = scheme.contextual(q_BxGxPxQxE, logits_BxGxPxQxS, mask_BxQxS, None)
  return logits_BxGxPxQxS + extra_BxGxPxQxS


def add_prefix(logits_BxGxPxQxS, prefix_q_BxHxQ, prefix_k_BxHxS):
  """logits plus c_i - c_j: the sum of a scheme's `from_input` quantities over the tokens after
  key j up to query i (FoX: log forget gates), from head-major prefix sums of the queries and
  the keys (each kernel slices its own rows of c)."""
  return _add_bias(logits_BxGxPxQxS, prefix_q_BxHxQ[..., :, None] - prefix_k_BxHxS[..., None, :])


def scores(pairs, biases, uses, householder=None):
  """Every remap branch's q.k / sqrt(E) plus its bias, merged by the branches' `use` masks:
  BxGxPxQxS float32 from `rotate`d (q_BxQxHxE, k_BxSxGxE) pairs, their biases (None, an array
  or a (scale, shift) pair: `_add_bias`) and `use` masks (`use`). With `householder` (PaTH:
  w_BxSxGxE, beta_BxSxG; Q = S), q_i^T H_i ... H_{j+1} k_j in place of q_i . k_j.
  The dense kernels, the Pallas kernel's reference and lcx.tools.analysis build on it; the chunked
  kernel merges its own per-block products the same way (`_merge`)."""
  return _merge(
    [(_logits(q, k, bias, householder), u) for (q, k), bias, u in zip(pairs, biases, uses)]
  )


def logits(q_BxQxHxE, k_BxSxGxE, plan, scheme, *, prefix_BxSxH=None, householder=None):
  """The logits a dense plan's (`prepare_dense`, `prepare_step`) queries give its keys, as the
  softmax (or stick-breaking) sees them: logits_BxHxQxS float32, from token-major q and k.

  q and k rotated per remap branch (`rotate`), q.k / sqrt(E) plus each branch's bias
  (`scores`), then an input hook's c_i - c_j (`add_prefix`; the queries' c are
  c[start:start+Q]), then the contextual hook (`with_contextual`, over biased logits), then
  NEG_INF where the plan's mask forbids. The temperature is in q already (lcx.model.temperature puts
  it there; scale-invariant attention's (scale, shift) is its bias).

  The mask is added (finite logits + NEG_INF == NEG_INF), one add per layer that XLA:CPU fuses,
  where a select made its own pass forward and backward (default step 0.96-1.0x over three
  interleaved A/Bs: a small gain, inside the noise in two); it is added in 4-D, B x H x Q x S:
  with a unit P axis (no GQA) XLA:CPU gave 5-D logits a layout that cost a B x H x T x T copy
  per layer.
  """
  b, t, h, _ = q_BxQxHxE.shape
  rotated = rotate(q_BxQxHxE, k_BxSxGxE, plan, scheme)
  logits_BxGxPxQxS = scores(rotated, plan.extras["biases"], plan.extras["uses"], householder)
  if prefix_BxSxH is not None:  # before the contextual hook, which reads biased logits
    prefix_BxHxS = jnp.swapaxes(prefix_BxSxH, 1, 2)
    prefix_BxHxQ = jax.lax.dynamic_slice_in_dim(prefix_BxHxS, plan.start, t, axis=2)
    logits_BxGxPxQxS = add_prefix(logits_BxGxPxQxS, prefix_BxHxQ, prefix_BxHxS)
  mask_BxQxS = plan.extras["mask_BxTxT"]
  logits_BxGxPxQxS = with_contextual(scheme, rotated[-1][0], logits_BxGxPxQxS, mask_BxQxS)
  s = logits_BxGxPxQxS.shape[-1]
  return logits_BxGxPxQxS.reshape(b, h, t, s) + plan.extras["mask_bias_BxTxT"][:, None]


def _scaled(q_BxTxHxE, q_scale_BxT):
  """q times the branch's per-query factor (ReRoPE's log-n), in q's dtype."""
  if q_scale_BxT is None:
    return q_BxTxHxE
  return q_BxTxHxE * q_scale_BxT[:, :, None, None].astype(q_BxTxHxE.dtype)


@dataclasses.dataclass(frozen=True)
class Plan:
  """What a kernel precomputes from positions, shared by all layers of one forward pass.

  `branches`: the remap's position views; `pos_BxT`: true positions (what `use` reads);
  `seg_BxT`, `doc_BxT`: segment ids and in-document token indices; `len_BxT`: each token's
  document length (`document_length`, read by length-dependent scalings); `extras`: per-kernel
  (dense: the BxTxT mask, as booleans and as an additive bias, and each branch's bias and
  `use` mask). `start`: the queries are the keys start..start+Q-1: 0 with Q = T, except in a
  generation step (`prepare_step`), where pos/seg/doc describe the KV cache's slots and
  `len_BxT` is Bx1, the current length.
  """

  branches: list
  pos_BxT: jax.Array
  seg_BxT: jax.Array
  doc_BxT: jax.Array
  len_BxT: jax.Array
  extras: dict[str, Any]
  start: Any = 0


# --- Dense: materializes the full BxHxTxT logits; fastest at training lengths. ---


def _dense_extras(branches, q_pos_BxQ, k_pos_BxK, mask_BxQxK, scheme) -> dict[str, Any]:
  """The dense kernel's position-only work: the mask (and as an additive 0 / NEG_INF bias),
  each branch's bias and `use` mask."""
  return {
    "mask_BxTxT": mask_BxQxK,
    "mask_bias_BxTxT": jnp.where(mask_BxQxK, 0.0, NEG_INF),
    "biases": [scheme.bias(br.q_pos, br.k_pos) for br in branches],
    "uses": [use(br, q_pos_BxQ, k_pos_BxK) for br in branches],
  }


def prepare_dense(pos_BxT, seg_BxT, *, scheme, remap, pattern=None) -> Plan:
  return densify(
    prepare_chunked(pos_BxT, seg_BxT, scheme=scheme, remap=remap, pattern=pattern), scheme
  )


def densify(plan: Plan, scheme) -> Plan:
  """A chunked plan (positions only) as the dense plan of the same positions: the Pallas
  kernel's caller runs `attend_dense` on it where the kernel cannot go (forward mode)."""
  idx = jnp.arange(plan.pos_BxT.shape[1])
  doc_BxT, seg_BxT = plan.doc_BxT, plan.seg_BxT
  mask_BxTxT = visible(idx, idx, seg_BxT, seg_BxT, doc_BxT, doc_BxT, plan.extras["pattern"])
  extras = _dense_extras(plan.branches, plan.pos_BxT, plan.pos_BxT, mask_BxTxT, scheme)
  return dataclasses.replace(plan, extras=extras)


def prepare_step(
  start, num_new: int, size: int, batch: int, *, scheme, remap, pattern=None
) -> Plan:
  """A dense plan for a generation step (`attend_dense` runs it): the queries are the
  `num_new` tokens at start.. of one document per row, the keys a KV cache's `size` slots
  (token i in slot i; slots from start + num_new on are masked, whatever they hold).

  One document from index 0, so positions and in-document indices are token indices, and the
  current length every query and key reads is start + num_new: what `prepare_dense` gives
  the same tokens as a whole sequence. `start` may be traced.
  """
  q_idx_Q, k_idx_K = start + jnp.arange(num_new), jnp.arange(size)
  q_pos_BxQ = jnp.broadcast_to(q_idx_Q, (batch, num_new))
  k_pos_BxK = jnp.broadcast_to(k_idx_K, (batch, size))
  q_seg_BxQ, k_seg_BxK = jnp.ones_like(q_pos_BxQ), jnp.ones_like(k_pos_BxK)
  mask_BxQxK = visible(q_idx_Q, k_idx_K, q_seg_BxQ, k_seg_BxK, q_pos_BxQ, k_pos_BxK, pattern)
  branches = remap.branches(q_pos_BxQ, k_pos_BxK)
  len_Bx1 = jnp.full((batch, 1), start + num_new)
  return Plan(
    branches,
    k_pos_BxK,
    k_seg_BxK,
    k_pos_BxK,
    len_Bx1,
    _dense_extras(branches, q_pos_BxQ, k_pos_BxK, mask_BxQxK, scheme),
    start,
  )


def attend_dense(
  q_BxTxHxE,
  k_BxTxGxE,
  v_BxGxTxE,
  plan: Plan,
  *,
  scheme,
  sink_H=None,
  prefix_BxSxH=None,
  householder=None,
) -> jax.Array:
  """-> out_BxHxTxE (T: the queries; a generation step's keys are the cache's slots).
  `sink_H`: a learned sink logit per head (`softmax`), or None; `prefix_BxSxH`: the prefix
  sums c of the scheme's `from_input` hook over the keys (the queries' are c[start:start+T]),
  or None; `householder`: PaTH's (w_BxTxGxE, beta_BxTxG), or None (`scores`)."""
  b, t, h, d = q_BxTxHxE.shape
  logits_BxHxTxS = logits(
    q_BxTxHxE, k_BxTxGxE, plan, scheme, prefix_BxSxH=prefix_BxSxH, householder=householder
  )
  # From here on N = P * T rows per kv head for the values.
  g, s = k_BxTxGxE.shape[2], logits_BxHxTxS.shape[-1]
  probs_BxHxTxS = softmax(logits_BxHxTxS, sink_H).astype(v_BxGxTxE.dtype)
  out_BxGxNxE = jnp.einsum("bgns,bgse->bgne", probs_BxHxTxS.reshape(b, g, -1, s), v_BxGxTxE)
  return out_BxGxNxE.reshape(b, h, t, d)


# --- Chunked: online softmax over key blocks; memory O(T * chunk), not O(T^2). ---


def prepare_chunked(pos_BxT, seg_BxT, *, scheme, remap, pattern=None) -> Plan:
  del scheme  # biases are evaluated block by block in `attend_chunked`
  branches, doc_BxT = remap.branches(pos_BxT, pos_BxT), document_index(seg_BxT)
  return Plan(
    branches, pos_BxT, seg_BxT, doc_BxT, document_length(pos_BxT, seg_BxT), {"pattern": pattern}
  )


def attend_chunked(
  q_BxTxHxE,
  k_BxTxGxE,
  v_BxGxTxE,
  plan: Plan,
  *,
  scheme,
  sink_H=None,
  prefix_BxSxH=None,
  chunk_size=512,
  householder=None,
) -> jax.Array:
  """-> out_BxHxTxE. Query block i visits key blocks 0..i only (causality): half of dense's work,
  and only those from the start of its first query's document (packed documents: far less). It
  visits them from the diagonal outward (i, i-1, ..): the online softmax does not mind the
  order, and a contextual hook (CoPE) then carries a sum over the nearer keys from block to block.
  Segments must be contiguous runs of a row, as packing makes them (`lcx.data.pipeline`).
  A sink logit (`sink_H`) starts the online softmax: running max = sink, sum = 1, no value.
  `prefix_BxSxH` (a scheme's `from_input` prefix sums c, or None): each block of logits gets
  the query block's c minus the key block's.
  PaTH (`householder`: w_BxTxGxE, beta_BxTxG; one remap branch) takes its diagonal block's
  logits from `path.block_terms` and carries each query, transformed by the Householders of
  the key blocks passed so far, from block to block (the carry a contextual hook would use).

  T is padded to a multiple of `chunk_size` with segment 0, which no real token attends to.
  q and k are laid out head-major (BxGxPxTxE, BxGxTxE) once, before the loops (v comes so), so
  every block product is a plain batched matmul over contiguous rows: no per-block layout copies.
  """
  b, t, h, d = q_BxTxHxE.shape
  g = k_BxTxGxE.shape[2]
  per = h // g
  c = min(chunk_size, t)
  n = -(-t // c)
  tp = n * c

  def pad(x):
    """x (B x T x ...) edge-padded to B x tp x ... ."""
    return jnp.pad(x, [(0, 0), (0, tp - t)] + [(0, 0)] * (x.ndim - 2), mode="edge")

  def q_major(q_BxTxHxE):
    return jnp.transpose(pad(q_BxTxHxE).reshape(b, tp, g, per, d), (0, 2, 3, 1, 4))

  def kv_major(x_BxTxGxE):
    return jnp.transpose(pad(x_BxTxGxE), (0, 2, 1, 3))

  # Rotate before padding (padded rows are never attended; lengths come from plan.len_BxT).
  rotated = [
    (
      q_major(q) * (d**-0.5),
      kv_major(k),
      dataclasses.replace(br, q_pos=pad(br.q_pos), k_pos=pad(br.k_pos)),
    )
    for (q, k), br in zip(rotate(q_BxTxHxE, k_BxTxGxE, plan, scheme), plan.branches)
  ]
  v_BxGxTxE = jnp.pad(v_BxGxTxE, [(0, 0), (0, 0), (0, tp - t), (0, 0)], mode="edge")
  pos_BxT, doc_BxT = pad(plan.pos_BxT), pad(plan.doc_BxT)
  seg_BxT = jnp.pad(plan.seg_BxT, [(0, 0), (0, tp - t)])  # segment 0: never attended
  prefix_BxHxT = None if prefix_BxSxH is None else jnp.swapaxes(pad(prefix_BxSxH), 1, 2)

  def rows(x, start, axis=1):
    """The chunk of `c` rows of x from `start` along `axis`."""
    return jax.lax.dynamic_slice_in_dim(x, start, c, axis=axis)

  pattern = plan.extras["pattern"]
  plain = pattern is None and scheme.contextual is None  # may skip the mask of a whole block
  carries = scheme.contextual is not None or householder is not None  # from the diagonal on
  if householder is not None:
    from lcx.model.positions import (
      path,  # deferred: lcx.model.positions loads every scheme on first use
    )

    w_BxTxGxE, beta_BxTxG = householder
    ((q_path, k_path, _),) = rotated  # PaTH refuses every remap: one branch
    path_blocks = (
      q_path.reshape(b, g, per, n, c, d).astype(jnp.float32),
      k_path.reshape(b, g, n, c, d).astype(jnp.float32),
      jnp.moveaxis(pad(w_BxTxGxE.astype(jnp.float32)), 1, 2).reshape(b, g, n, c, d),
      jnp.moveaxis(pad(beta_BxTxG.astype(jnp.float32)), 1, 2).reshape(b, g, n, c),
    )
    # Every block's keys at its end and its product (O(T E + T E^2 / C)); XLA drops the unused
    # in-block logits here, which each query block computes for itself (O(C^2), not O(T C)).
    _, _, k_end, p_hh = path.block_terms(*path_blocks)

  def path_logits(i, j, q_carry):
    """PaTH's logits of query block i over key block j and the carried queries: block i's own
    logits at the diagonal (q_carry None), else the carry against j's keys at their block's
    end, the carry then passing through block j's Householders."""
    if q_carry is None:
      one = [
        jax.lax.dynamic_slice_in_dim(x, i, 1, axis) for x, axis in zip(path_blocks, (3, 2, 2, 2))
      ]
      local, q_start, _, _ = path.block_terms(*one)
      return local[:, :, :, 0], q_start[:, :, :, 0]
    k_j = jax.lax.dynamic_index_in_dim(k_end, j, 2, keepdims=False)
    logits = jnp.einsum("bgpqe,bgse->bgpqs", q_carry, k_j, precision=jax.lax.Precision.HIGHEST)
    p_j = jax.lax.dynamic_index_in_dim(p_hh, j, 2, keepdims=False)
    return logits, jnp.einsum(
      "bgpqe,bgef->bgpqf", q_carry, p_j, precision=jax.lax.Precision.HIGHEST
    )

  def query_block(i):
    q_idx = i * c + jnp.arange(c)
    q_blocks = [(rows(q, i * c, 3), k, rows(br.q_pos, i * c), br) for q, k, br in rotated]
    q_pos, q_seg, q_doc = (rows(x, i * c) for x in (pos_BxT, seg_BxT, doc_BxT))
    # Documents are contiguous runs of a row: no query of the block sees a key before the
    # start of its first query's document, so key blocks before it are never visited.
    first_block = jnp.min(i * c - doc_BxT[:, i * c]) // c

    def key_block(j, carry, masked=True):
      m_prev, l_prev, acc, context = carry
      k_pos, k_seg, k_doc = (rows(x, j * c) for x in (pos_BxT, seg_BxT, doc_BxT))

      def products(qb, k):
        nonlocal context
        if householder is None:
          return jnp.einsum(
            "bgpqe,bgse->bgpqs", qb, rows(k, j * c, 2), preferred_element_type=jnp.float32
          )
        out, context = path_logits(i, j, context)
        return out

      logits = _merge(
        [
          (
            _add_bias(products(qb, k), scheme.bias(qb_pos, rows(br.k_pos, j * c))),
            use(br, q_pos, k_pos),
          )
          for qb, k, qb_pos, br in q_blocks
        ]
      )
      if prefix_BxHxT is not None:
        logits = add_prefix(logits, rows(prefix_BxHxT, i * c, 2), rows(prefix_BxHxT, j * c, 2))
      if masked:
        mask = visible(q_idx, j * c + jnp.arange(c), q_seg, k_seg, q_doc, k_doc, pattern)
        if scheme.contextual is not None:  # with the last branch's q, as the dense kernel
          extra, context = scheme.contextual(q_blocks[-1][0], logits, mask, context)
          logits = logits + extra
        logits = jnp.where(mask[:, None, None], logits, NEG_INF)
      m_new = jnp.maximum(m_prev, logits.max(-1))
      p = jnp.exp(logits - m_new[..., None])
      corr = jnp.exp(m_prev - m_new)
      l_new = l_prev * corr + p.sum(-1)
      pv = jnp.einsum(
        "bgpqs,bgse->bgpqe",
        p.astype(v_BxGxTxE.dtype),
        rows(v_BxGxTxE, j * c, 2),
        preferred_element_type=jnp.float32,
      )
      return m_new, l_new, acc * corr[..., None] + pv, context

    shape = (b, g, per, c)
    if sink_H is None:
      m0, denom0 = jnp.full(shape, NEG_INF, jnp.float32), jnp.zeros(shape, jnp.float32)
    else:
      m0 = jnp.broadcast_to(_sink(sink_H, (g, per))[None, :, :, None], shape)
      denom0 = jnp.ones(shape, jnp.float32)
    init, first = (m0, denom0, jnp.zeros(shape + (d,), jnp.float32), None), 0
    if carries:  # a contextual or PaTH carry starts as None, at the diagonal block
      init, first = key_block(i, init), 1

    def visit(s, carry):
      j = i - s
      if not plain:
        return key_block(j, carry)
      # Below the diagonal, a key block whose first key shares the document of the query
      # block's last query is all allowed (documents are contiguous): no mask to build.
      inside = (j < i) & jnp.all(seg_BxT[:, j * c] == seg_BxT[:, i * c + c - 1])
      return jax.lax.cond(
        inside, lambda cr: key_block(j, cr, masked=False), lambda cr: key_block(j, cr), carry
      )

    _, denom, acc, _ = jax.lax.fori_loop(first, i + 1 - first_block, visit, init)
    return (acc / denom[..., None]).astype(q_BxTxHxE.dtype)  # BxGxPxCxE

  out_NxBxGxPxCxE = jax.lax.map(query_block, jnp.arange(n))
  out_BxHxTxE = jnp.transpose(out_NxBxGxPxCxE, (1, 2, 3, 0, 4, 5)).reshape(b, h, tp, d)
  return out_BxHxTxE[:, :, :t]


@dataclasses.dataclass(frozen=True)
class Kernel:
  prepare: Callable[..., Plan]
  # attend(q_BxTxHxE, k_BxTxGxE, v_BxGxTxE, plan, *, scheme, sink_H=None, prefix_BxSxH=None)
  attend: Callable[..., jax.Array]


def _swap_heads_time(x):
  """Token-major <-> head-major: BxTxHxE <-> BxHxTxE (or G heads)."""
  return jnp.swapaxes(x, 1, 2)


def _one_call(
  prepare,
  attend,
  q_BxTxHxE,
  k_BxTxGxE,
  v_BxTxGxE,
  pos_BxT,
  seg_BxT,
  *,
  scheme,
  remap,
  pattern=None,
  **attend_kwargs,
):
  """Prepare a plan, then attend, all token-major (tests, single layers)."""
  plan = prepare(pos_BxT, seg_BxT, scheme=scheme, remap=remap, pattern=pattern)
  v_BxGxTxE = _swap_heads_time(v_BxTxGxE)
  out_BxHxTxE = attend(q_BxTxHxE, k_BxTxGxE, v_BxGxTxE, plan, scheme=scheme, **attend_kwargs)
  return _swap_heads_time(out_BxHxTxE)


# dense(q, k, v, pos, seg, *, scheme, remap, pattern=None, sink_H=None, prefix_BxSxH=None,
#       householder=None); chunked also takes chunk_size (default 512).
dense = functools.partial(_one_call, prepare_dense, attend_dense)
chunked = functools.partial(_one_call, prepare_chunked, attend_chunked)
