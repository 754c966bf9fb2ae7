"""Attention maps from lcx.model.attention's own pieces: every query row up to `DENSE_MAX`
tokens, chosen rows (`default_rows`) in blocks of `ROW_BLOCK` beyond, so memory stays
O(rows x T)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lcx.model import attention, stick_breaking
from lcx.tools.analysis.capture import QK, Model, inputs, qk

DENSE_MAX = 1024  # longest sequence whose full T x T maps are computed; beyond: chosen rows
DEFAULT_ROWS = 256  # query rows computed past DENSE_MAX when none are given
ROW_BLOCK = 256  # query rows per compiled call (memory: layers x heads x ROW_BLOCK x T)


def _layer_parts(decoder, layer):
  """(scheme, remap, pattern) block `layer` attends with: the decoder's, or for a NoPE block of
  the per-layer schedule identity hooks, no remap and the pattern without the window."""
  scheme = decoder.layer_scheme(layer)
  if decoder.has_positions(layer):
    return scheme, decoder.remap, decoder.positioned_pattern
  return scheme, decoder.no_remap, decoder.pattern


def _dense_logits(
  decoder, layer, q_BxTxHxK, k_BxTxGxK, pos_BxT, seg_BxT, prefix_BxTxH=None, householder=None
):
  """Every query row: the dense kernel's plan and masked logits (`attention.logits`)."""
  scheme, remap, pattern = _layer_parts(decoder, layer)
  plan = attention.prepare_dense(pos_BxT, seg_BxT, scheme=scheme, remap=remap, pattern=pattern)
  logits_BxHxTxT = attention.logits(
    q_BxTxHxK, k_BxTxGxK, plan, scheme, prefix_BxSxH=prefix_BxTxH, householder=householder
  )
  return logits_BxHxTxT, plan.extras["mask_BxTxT"]


def _row_logits(
  decoder,
  layer,
  q_BxTxHxK,
  k_BxTxGxK,
  pos_BxT,
  seg_BxT,
  rows_Q,
  prefix_BxTxH=None,
  householder=None,
):
  """Query rows `rows_Q` only, against every key: O(Q x T) memory at any length, but with
  PaTH (`householder`), whose rows are those of all T x T logits (`path.dense_logits`).

  The whole sequence is rotated (per-token lengths, xPos's centre), as the chunked kernel does;
  biases, `use` masks and the mask are then taken for the chosen rows, and the logits
  assembled from `attention.logits`'s parts in its order, masked as it masks.
  """
  scheme, remap, pattern = _layer_parts(decoder, layer)
  plan = attention.prepare_chunked(pos_BxT, seg_BxT, scheme=scheme, remap=remap, pattern=pattern)

  def rows(x):
    return jnp.take(x, rows_Q, axis=1)

  rotated = attention.rotate(q_BxTxHxK, k_BxTxGxK, plan, scheme)
  biases = [scheme.bias(rows(br.q_pos), br.k_pos) for br in plan.branches]
  uses = [attention.use(br, rows(plan.pos_BxT), plan.pos_BxT) for br in plan.branches]
  if householder is None:
    logits = attention.scores([(rows(q), k) for q, k in rotated], biases, uses)
  else:  # PaTH: the chosen rows of all T x T transformed products (Q = S in `scores`)
    biases = [scheme.bias(br.q_pos, br.k_pos) for br in plan.branches]
    uses = [attention.use(br, plan.pos_BxT, plan.pos_BxT) for br in plan.branches]
    logits = jnp.take(attention.scores(rotated, biases, uses, householder), rows_Q, axis=3)
  if prefix_BxTxH is not None:
    c_BxHxT = jnp.swapaxes(prefix_BxTxH, 1, 2)
    logits = attention.add_prefix(logits, jnp.take(c_BxHxT, rows_Q, axis=2), c_BxHxT)
  mask = attention.visible(
    rows_Q,
    jnp.arange(pos_BxT.shape[1]),
    rows(plan.seg_BxT),
    plan.seg_BxT,
    rows(plan.doc_BxT),
    plan.doc_BxT,
    pattern,
  )
  logits = attention.with_contextual(scheme, rows(rotated[-1][0]), logits, mask)
  b, g, p, q, t = logits.shape
  mask_bias = jnp.where(mask, 0.0, attention.NEG_INF)[:, None]
  return logits.reshape(b, g * p, q, t) + mask_bias, mask


def default_rows(length: int, count: int = DEFAULT_ROWS) -> np.ndarray:
  """`count` query rows spread evenly over 0..length-1, the last row included."""
  return np.unique(np.round(np.linspace(0, length - 1, min(count, length))).astype(np.int32))


@dataclasses.dataclass(frozen=True)
class Maps:
  """Attention of query rows `rows_Q` over all T keys, per layer N (`layers`) and head H.

  probs: N x B x H x Q x T (0 where not allowed; a row sums to < 1 with a learned sink);
  logits: the same, NaN where not allowed (scaled, bias added, remap branches merged: what the
  softmax sees); allowed: B x Q x T, the keys any of the layers may see (the per-layer
  schedule's windowed blocks see fewer);
  pos, seg, doc: B x T true positions, segment ids and index in the document.
  """

  probs: np.ndarray
  logits: np.ndarray
  allowed: np.ndarray
  rows: np.ndarray
  pos: np.ndarray
  seg: np.ndarray
  doc: np.ndarray
  layers: tuple
  train_len: int

  @property
  def q_pos(self) -> np.ndarray:
    """B x Q positions of the query rows."""
    return self.pos[:, self.rows]

  @property
  def q_doc(self) -> np.ndarray:
    """B x Q: tokens of its document before each query row."""
    return self.doc[:, self.rows]


def attention_maps(
  model: Model,
  tokens_BxT,
  pos_BxT=None,
  seg_BxT=None,
  *,
  rows=None,
  layers=None,
  dense_max: int = DENSE_MAX,
  qk_values: QK | None = None,
) -> Maps:
  """Attention probabilities and logits per layer and head.

  rows: query row indices (None: all rows up to `dense_max` tokens, else `default_rows`);
  layers: layer indices (None: all); qk_values: a `qk` result for these inputs, to skip the
  forward pass.
  """
  tokens_BxT, pos_BxT, seg_BxT = inputs(tokens_BxT, pos_BxT, seg_BxT)
  t = tokens_BxT.shape[1]
  values = qk_values if qk_values is not None else qk(model, tokens_BxT, pos_BxT, seg_BxT)
  n_layers = values.q.shape[0]
  layers = tuple(range(n_layers)) if layers is None else tuple(int(i) for i in layers)
  if any(not 0 <= i < n_layers for i in layers):
    raise ValueError(f"layers={layers}: the model has layers 0..{n_layers - 1}")
  dense = rows is None and t <= dense_max
  rows_Q = (
    np.arange(t, dtype=np.int32)
    if dense
    else np.asarray(default_rows(t) if rows is None else rows, np.int32)
  )
  if rows_Q.ndim != 1 or len(rows_Q) == 0 or rows_Q.min() < 0 or rows_Q.max() >= t:
    raise ValueError(f"rows must be query indices in [0, {t}), got {rows_Q}")
  graphdef, state = nnx.split(model.decoder)

  def make(dense):
    def run(state, q_NxBxTxHxK, k_NxBxTxGxK, prefix_NxBxTxH, pos, seg, rows_Q, householders):
      decoder = nnx.merge(graphdef, state)
      probs, logits, masks = [], [], []
      for n, (layer, q, k) in enumerate(zip(layers, q_NxBxTxHxK, k_NxBxTxGxK)):
        c = None if prefix_NxBxTxH is None else prefix_NxBxTxH[n]
        if dense:
          lg, mask = _dense_logits(decoder, layer, q, k, pos, seg, c, householders[n])
        else:
          lg, mask = _row_logits(decoder, layer, q, k, pos, seg, rows_Q, c, householders[n])
        b, h, nq, nk = lg.shape  # lg masked: NEG_INF where not allowed
        sink = decoder.blocks[layer].attn.sink_H
        if decoder.attention_kind == "stick_breaking":  # weights sum to <= 1, no diagonal
          q_idx = jnp.arange(nq) if dense else rows_Q
          g = k.shape[2]
          lg_BxGxPxQxT = lg.reshape(b, g, h // g, nq, nk)
          p = stick_breaking.weights(lg_BxGxPxQxT, mask, q_idx, jnp.arange(nk))
        else:
          p = attention.softmax(lg, None if sink is None else sink[...])
        probs.append(p.reshape(b, h, nq, nk))
        logits.append(jnp.where(mask[:, None], lg, jnp.nan))
        masks.append(mask)
      return jnp.stack(probs), jnp.stack(logits), jnp.any(jnp.stack(masks), axis=0)

    return jax.jit(run)

  program = model.program(("maps", dense, layers), lambda: make(dense))
  q, k = values.q[list(layers)], values.k[list(layers)]
  c = None if values.prefix is None else values.prefix[list(layers)]
  householders = [values.householder(i) for i in layers]
  if dense:
    probs, logits, allowed = program(state, q, k, c, pos_BxT, seg_BxT, rows_Q, householders)
  else:  # fixed-size blocks of rows (the last padded with its own last row): one program
    parts = []
    for start in range(0, len(rows_Q), ROW_BLOCK):
      block = rows_Q[start : start + ROW_BLOCK]
      padded = (
        np.pad(block, (0, ROW_BLOCK - len(block)), mode="edge")
        if len(rows_Q) > ROW_BLOCK
        else block
      )
      out = program(state, q, k, c, pos_BxT, seg_BxT, padded, householders)
      parts.append([np.asarray(x)[..., : len(block), :] for x in out])
    probs, logits, allowed = (np.concatenate(xs, axis=-2) for xs in zip(*parts))
  doc = np.asarray(attention.document_index(jnp.asarray(seg_BxT)))
  return Maps(
    np.asarray(probs),
    np.asarray(logits),
    np.asarray(allowed),
    rows_Q,
    np.asarray(pos_BxT),
    np.asarray(seg_BxT),
    doc,
    layers,
    model.train_len,
  )
