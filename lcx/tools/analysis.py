"""Inside a trained model, at and past its training length L: attention maps, entropy, attention
sinks, head types, logit statistics and the norm of q and k per rotary frequency pair.

Every function takes a restored checkpoint (`load`: the run's config and parameters, nothing
else) and a batch of tokens, and works for every scheme and remap because nothing here
re-derives attention: q and k are what the model's own blocks hand to the kernel (`qk` records
them), and the logits come from `lcx.model.attention`'s public logits (`attention.logits` of a
`prepare_dense` plan; for chosen query rows, its parts over a `prepare_chunked` plan: `rotate`,
`scores`, `add_prefix`, `visible`, `with_contextual`), with an input hook's prefix sums as the
block handed them and PaTH's Householders as the kernel received them, so they are the numbers
the kernels compute.
Up to `DENSE_MAX` tokens
every query row is computed; beyond, only chosen rows (`default_rows`), in blocks, so memory
stays O(rows x T).
The statistics are numpy functions of those maps.

Thresholds (`classify_heads`), mean attention mass over queries with at least `min_context`
tokens of their document before them:
  previous-token  mass on the key one token back >= 0.5
  sink            mass on the document's first token >= 0.5 (attention sink)
  positional      mass on one fixed offset other than 1 (0: itself, 2, 3, ...) >= 0.5: a
                  diagonal in the attention map
  content         none of these: where it looks depends on the tokens
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from lcx import errors
from lcx.model import attention, positions, stick_breaking
from lcx.model.decoder import Decoder
from lcx.model.positions.rotary import PAIRINGS
from lcx.run import checkpoint, prepare as prepare_lib

DENSE_MAX = 1024  # longest sequence whose full T x T maps are computed; beyond: chosen rows
DEFAULT_ROWS = 256  # query rows computed past DENSE_MAX when none are given
ROW_BLOCK = 256  # query rows per compiled call (memory: layers x heads x ROW_BLOCK x T)
THRESHOLD = 0.5  # mean attention mass that makes a head previous-token / sink / positional
MIN_CONTEXT = 8  # queries with fewer tokens of their document before them are not classified
MAX_OFFSET = 16  # positional heads: the fixed offsets considered, 0..MAX_OFFSET


# --- A restored model. ---


@dataclasses.dataclass(eq=False)
class Model:
  """A decoder with restored parameters and the config it was built from (eval-time fields
  such as scaling or remap may differ from training: see `load`)."""

  config: ml_collections.ConfigDict
  decoder: Decoder
  step: int | None = None
  workdir: str | None = None
  _programs: dict = dataclasses.field(default_factory=dict, repr=False)

  @property
  def train_len(self) -> int:
    return self.config.model.max_len

  def program(self, key, make):
    """A jitted function cached per key (one compile per key and shape)."""
    if key not in self._programs:
      self._programs[key] = make()
    return self._programs[key]


def with_params(config: ml_collections.ConfigDict, params: dict) -> Decoder:
  """A Decoder for `config.model` holding `params` (nested dicts of arrays, as
  `lcx.run.checkpoint.restore_params` returns them; list indices may be strings)."""
  graphdef, state = nnx.split(
    nnx.eval_shape(lambda: Decoder(config.model, rngs=nnx.Rngs(0))), nnx.Param
  )

  def fill(abstract, given, where):
    if isinstance(abstract, dict):
      missing = [k for k in abstract if k not in given and str(k) not in given]
      if missing:
        raise ValueError(
          f"params{where}: no entry {missing[0]!r}; the checkpoint does not "
          "match the config's model"
        )
      return {
        k: fill(v, given[k] if k in given else given[str(k)], f"{where}.{k}")
        for k, v in abstract.items()
      }
    value = jnp.asarray(given)
    if value.shape != abstract.shape:
      raise ValueError(
        f"params{where}: shape {value.shape}, the config's model has {abstract.shape}"
      )
    return value.astype(abstract.dtype)

  nnx.replace_by_pure_dict(state, fill(nnx.to_pure_dict(state), params, ""))
  return nnx.merge(graphdef, state)


def load(workdir: str, step: int | None = None, variant: str | dict | None = None) -> Model:
  """The run's model at `step` (None: the latest), parameters only, on the default device.

  `variant`: eval-time changes as `eval.variants` names them ("yarn@4", "self_extend@64/4") or
  a dict of dotted overrides ({"model.position.scaling": {...}}); trained fields are refused.
  """
  from lcx import variants  # the evaluation's own variant parsing

  config = prepare_lib.run_config(workdir)
  if variant:
    changes = (
      variants.overrides(variant, config.eval.named_variants)
      if isinstance(variant, str)
      else variant
    )
    config = variants.apply(config, changes)
  params, meta = checkpoint.restore_params(workdir, step)
  return Model(config, with_params(config, params), meta["step"], workdir)


# --- q and k of every layer, as the blocks hand them to the kernel. ---


def _inputs(tokens_BxT, pos_BxT=None, seg_BxT=None):
  tokens_BxT = np.asarray(tokens_BxT, np.int32)
  if tokens_BxT.ndim == 1:
    tokens_BxT = tokens_BxT[None]
  shape = tokens_BxT.shape
  pos = np.broadcast_to(np.arange(shape[1], dtype=np.int32), shape) if pos_BxT is None else pos_BxT
  seg = np.ones(shape, np.int32) if seg_BxT is None else seg_BxT
  pos, seg = np.asarray(pos), np.asarray(seg, np.int32)
  if pos.shape != shape or seg.shape != shape:
    raise ValueError(f"positions {pos.shape} and segments {seg.shape} must match tokens {shape}")
  return tokens_BxT, pos, seg


def _recording(kernel: attention.Kernel, record: list) -> attention.Kernel:
  """`kernel` whose attend also keeps the (q, k) it is given, the model's own projections, and
  the prefix sums of an input hook (FoX's gates from the block's hidden states) or None, and
  PaTH's (w, beta) or None."""

  def attend(q_BxTxHxK, k_BxTxGxK, v_BxGxTxK, plan, **options):
    record.append((q_BxTxHxK, k_BxTxGxK, options.get("prefix_BxSxH"), options.get("householder")))
    return kernel.attend(q_BxTxHxK, k_BxTxGxK, v_BxGxTxK, plan, **options)

  return attention.Kernel(kernel.prepare, attend)


def _forward(decoder: Decoder, tokens_BxT, pos_BxT, seg_BxT, kernel_name: str):
  """Decoder.__call__ with a recording kernel: ([(q, k) per layer], logits_BxTxV)."""
  kernel = decoder.kernel(kernel_name)
  plans = decoder.plans(functools.partial(kernel.prepare, pos_BxT, seg_BxT))
  record = []
  logits = decoder.forward(tokens_BxT, pos_BxT, _recording(kernel, record), plans)
  return record, logits


def _check_length(model: Model, length: int) -> None:
  m = model.config.model
  positions.check_eval_length(m.position, positions.Dims.of(m), length)


@dataclasses.dataclass(frozen=True)
class QK:
  """Per layer N: q_NxBxTxHxK and k_NxBxTxGxK before the scheme's rotation (float32), and the
  inputs' positions and segment ids; `prefix` N x B x T x H: an input hook's prefix sums c
  (FoX; 0 in a block without the hook), or None for a scheme without one; with PaTH, its
  w_NxBxTxGxK and beta_NxBxTxG (beta 0, no transform, in a NoPE block of the per-layer
  schedule), else None."""

  q: np.ndarray
  k: np.ndarray
  pos: np.ndarray
  seg: np.ndarray
  prefix: np.ndarray | None = None
  w: np.ndarray | None = None
  beta: np.ndarray | None = None

  def householder(self, layer: int):
    """(w, beta) of `layer` for `attention.logits`, or None."""
    return None if self.w is None else (self.w[layer], self.beta[layer])


def qk(model: Model, tokens_BxT, pos_BxT=None, seg_BxT=None, *, with_logits=False):
  """q and k of every layer for a batch (positions default to 0..T-1, one document per row).

  The forward pass uses the chunked kernel from `eval.chunked_from` tokens, as evaluation
  does. Returns a `QK`, and the model's logits_BxTxV too when `with_logits`.
  """
  tokens_BxT, pos_BxT, seg_BxT = _inputs(tokens_BxT, pos_BxT, seg_BxT)
  _check_length(model, tokens_BxT.shape[1])
  kernel = "chunked" if tokens_BxT.shape[1] >= model.config.eval.chunked_from else "dense"
  graphdef, state = nnx.split(model.decoder)

  def make():
    def run(state, tokens, pos, seg):
      record, logits = _forward(nnx.merge(graphdef, state), tokens, pos, seg, kernel)
      q = jnp.stack([q.astype(jnp.float32) for q, *_ in record])
      k = jnp.stack([k.astype(jnp.float32) for _, k, *_ in record])
      prefix = None
      if any(c is not None for _, _, c, _ in record):  # a NoPE block of the schedule: c = 0
        zero = jnp.zeros(q.shape[1:4], jnp.float32)
        prefix = jnp.stack([zero if c is None else c for _, _, c, _ in record])
      if all(hh is None for *_, hh in record):
        return q, k, prefix, None, None, logits
      none = (jnp.zeros(k.shape[1:]), jnp.zeros(k.shape[1:-1]))  # beta = 0: H = I
      w, beta = (jnp.stack(x) for x in zip(*[none if hh is None else hh for *_, hh in record]))
      return q, k, prefix, w, beta, logits

    return jax.jit(run)

  program = model.program(("qk", kernel), make)
  q, k, prefix, w, beta, logits = program(state, tokens_BxT, pos_BxT, seg_BxT)
  prefix = None if prefix is None else np.asarray(prefix)
  w, beta = (None, None) if w is None else (np.asarray(w), np.asarray(beta))
  out = QK(np.asarray(q), np.asarray(k), pos_BxT, seg_BxT, prefix, w, beta)
  return (out, np.asarray(logits)) if with_logits else out


# --- Attention maps from lcx.model.attention's own pieces. ---


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
  tokens_BxT, pos_BxT, seg_BxT = _inputs(tokens_BxT, pos_BxT, seg_BxT)
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


# --- Statistics of the maps (numpy). ---


def entropy(probs, axis: int = -1) -> np.ndarray:
  """Shannon entropy in nats, 0 log 0 = 0: log n for uniform attention over n keys."""
  p = np.asarray(probs)
  p = p if np.issubdtype(p.dtype, np.floating) else p.astype(np.float64)
  return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=axis)


def _key_mass(maps: Maps, keys_BxQxT) -> np.ndarray:
  """N x B x H x Q attention mass on the allowed keys selected by keys_BxQxT."""
  sel = (keys_BxQxT & maps.allowed)[None, :, None]
  return np.sum(np.where(sel, maps.probs, 0.0), axis=-1)


def offset_mass(maps: Maps, max_offset: int = MAX_OFFSET) -> np.ndarray:
  """N x B x H x Q x (max_offset + 1): mass on the key d tokens before each query (d = 0: the
  query itself), 0 where that key is outside the query's document or not allowed."""
  idx_QxD = maps.rows[:, None] - np.arange(max_offset + 1)[None]
  safe_QxD = np.maximum(idx_QxD, 0)
  ok_BxQxD = (idx_QxD >= 0)[None] & np.take_along_axis(
    maps.allowed, np.broadcast_to(safe_QxD, maps.allowed.shape[:2] + safe_QxD.shape[1:]), axis=-1
  )
  gathered = np.take_along_axis(
    maps.probs, np.broadcast_to(safe_QxD, maps.probs.shape[:-1] + safe_QxD.shape[1:]), axis=-1
  )
  return np.where(ok_BxQxD[None, :, None], gathered, 0.0)


def query_stats(maps: Maps) -> dict[str, np.ndarray]:
  """Per layer, batch row, head and query (N x B x H x Q): entropy (nats), normalized entropy
  (entropy / log of the allowed keys; 1 = uniform, NaN with one key), largest probability, and
  the mass on the document's first token, the previous token and the query itself; plus the
  number of allowed keys (B x Q)."""
  n_BxQ = maps.allowed.sum(-1)
  ent = entropy(maps.probs)
  with np.errstate(divide="ignore", invalid="ignore"):
    n = n_BxQ[None, :, None]
    normalized = np.where(n > 1, ent / np.log(np.maximum(n, 2)), np.nan)
  first_BxT = maps.doc == 0
  offsets = offset_mass(maps, 1)
  return {
    "entropy": ent,
    "normalized_entropy": normalized,
    "max_prob": maps.probs.max(-1),
    "first_token": _key_mass(maps, np.broadcast_to(first_BxT[:, None], maps.allowed.shape)),
    "previous_token": offsets[..., 1],
    "self": offsets[..., 0],
    "allowed": n_BxQ,
  }


def mean_over_queries(values_NxBxHxQ, select_BxQ) -> np.ndarray:
  """N x H mean over the batch rows and query rows where select_BxQ holds (NaN: none)."""
  sel = np.broadcast_to(np.asarray(select_BxQ)[None, :, None], np.shape(values_NxBxHxQ))
  with np.errstate(invalid="ignore"):
    total = np.sum(np.where(sel, np.nan_to_num(values_NxBxHxQ), 0.0), axis=(1, 3))
    count = np.sum(sel & ~np.isnan(values_NxBxHxQ), axis=(1, 3))
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def by_position(maps: Maps, values_NxBxHxQ, edges=None) -> tuple[np.ndarray, np.ndarray]:
  """(positions_P, N x H x P): the mean over batch rows of each query position present; with
  `edges` (e.g. `lcx.tools.evaluate.stats.position_edges`), over the positions of each bucket
  [edges[i], edges[i+1]), positions_P then the buckets' starts (empty buckets dropped)."""
  q_pos = maps.q_pos
  if edges is None:
    groups = [(p, q_pos == p) for p in np.unique(q_pos)]
  else:
    groups = [(lo, (q_pos >= lo) & (q_pos < hi)) for lo, hi in zip(edges[:-1], edges[1:])]
    groups = [(lo, select) for lo, select in groups if select.any()]
  return (
    np.asarray([lo for lo, _ in groups]),
    np.stack([mean_over_queries(values_NxBxHxQ, select) for _, select in groups], -1),
  )


@dataclasses.dataclass(frozen=True)
class Heads:
  """classify_heads: per layer (`layers`) x head, the label and the mean masses it is read from;
  `offset` is the best fixed offset other than 1 and `offset_mass` its mass."""

  labels: np.ndarray
  previous_token: np.ndarray
  first_token: np.ndarray
  offset: np.ndarray
  offset_mass: np.ndarray
  normalized_entropy: np.ndarray
  layers: tuple
  threshold: float


def classify_heads(
  maps: Maps,
  threshold: float = THRESHOLD,
  min_context: int = MIN_CONTEXT,
  max_offset: int = MAX_OFFSET,
) -> Heads:
  """Labels every head previous-token, sink, positional or content (module docstring), in that
  order of precedence, from its mean mass over queries with >= min_context tokens before them."""
  select = maps.q_doc >= min_context
  if not select.any():
    raise ValueError(
      f"min_context={min_context}: no query row has that many tokens of its "
      "document before it; use longer documents or a smaller min_context"
    )
  stats = query_stats(maps)

  def mean(v):
    return mean_over_queries(v, select)

  offsets = offset_mass(maps, max_offset)
  offset_means = np.stack([mean(offsets[..., d]) for d in range(max_offset + 1)], -1)
  other = offset_means.copy()
  other[..., 1] = -np.inf
  best = other.argmax(-1)
  best_mass = np.take_along_axis(offset_means, best[..., None], -1)[..., 0]
  previous, first = offset_means[..., 1], mean(stats["first_token"])
  labels = np.where(
    previous >= threshold,
    "previous-token",
    np.where(first >= threshold, "sink", np.where(best_mass >= threshold, "positional", "content")),
  )
  return Heads(
    labels.astype(object),
    previous,
    first,
    best,
    best_mass,
    mean(stats["normalized_entropy"]),
    maps.layers,
    threshold,
  )


def head_table(heads: Heads) -> str:
  """A markdown table: one row per layer and head with its label and masses."""
  from lcx.tools import report  # the one table renderer

  rows = []
  for i, layer in enumerate(heads.layers):
    for h in range(heads.labels.shape[1]):
      rows.append(
        [
          str(layer),
          str(h),
          heads.labels[i, h],
          f"{heads.previous_token[i, h]:.2f}",
          f"{heads.first_token[i, h]:.2f}",
          f"{heads.offset_mass[i, h]:.2f} @{heads.offset[i, h]}",
          f"{heads.normalized_entropy[i, h]:.2f}",
        ]
      )
  return report.markdown_table(
    ["layer", "head", "type", "previous", "first token", "best other offset", "entropy / log n"],
    rows,
  )


def logit_stats(maps: Maps, train_len: int | None = None) -> dict[str, np.ndarray]:
  """N x H statistics of the logits over allowed (query, key) pairs, split at L = train_len:
  `within_*` pairs at distance < L (what training showed), `past_*` at distance >= L (mean,
  std, max, count); `shift` = (past_mean - within_mean) / within_std; `row_max_within` /
  `row_max_past`: the mean over query rows at position < L / >= L of the row's largest logit."""
  length = maps.train_len if train_len is None else train_len
  dist_BxQxT = maps.q_pos[:, :, None] - maps.pos[:, None, :]
  logits = maps.logits
  out = {}
  for name, part in (("within", dist_BxQxT < length), ("past", dist_BxQxT >= length)):
    sel = np.broadcast_to((part & maps.allowed)[None, :, None], logits.shape)
    count = sel.sum(axis=(1, 3, 4))
    mean = np.where(sel, logits, 0.0).sum(axis=(1, 3, 4), dtype=np.float64) / np.maximum(count, 1)
    var = np.where(sel, (logits - mean[:, None, :, None, None]) ** 2, 0.0).sum(
      axis=(1, 3, 4), dtype=np.float64
    ) / np.maximum(count, 1)
    out[f"{name}_mean"] = np.where(count > 0, mean, np.nan)
    out[f"{name}_std"] = np.where(count > 0, np.sqrt(var), np.nan)
    out[f"{name}_max"] = np.where(
      count > 0, np.where(sel, logits, -np.inf).max(axis=(1, 3, 4)), np.nan
    )
    out[f"{name}_count"] = count
  with np.errstate(invalid="ignore", divide="ignore"):
    out["shift"] = (out["past_mean"] - out["within_mean"]) / out["within_std"]
  row_max = np.where(maps.allowed[None, :, None], logits, -np.inf).max(axis=-1)
  out["row_max_within"] = mean_over_queries(row_max, maps.q_pos < length)
  out["row_max_past"] = mean_over_queries(row_max, maps.q_pos >= length)
  return out


def logit_samples(
  maps: Maps,
  layer: int,
  head: int,
  train_len: int | None = None,
  limit: int = 100_000,
  seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
  """(within, past): allowed logits of one layer (an index into maps.layers) and head at
  distance < L and >= L, at most `limit` each (a seeded draw), for histograms."""
  length = maps.train_len if train_len is None else train_len
  dist_BxQxT = maps.q_pos[:, :, None] - maps.pos[:, None, :]
  logits_BxQxT = maps.logits[layer][:, head]
  rng = np.random.default_rng(seed)
  out = []
  for part in (dist_BxQxT < length, dist_BxQxT >= length):
    values = logits_BxQxT[part & maps.allowed]
    out.append(rng.choice(values, limit, replace=False) if len(values) > limit else values)
  return out[0], out[1]


def length_sweep(
  model: Model, tokens_BxT, lengths, *, rows: int = DEFAULT_ROWS, dense_max: int = DENSE_MAX
) -> list[dict]:
  """Attention at each length T in `lengths` on the first T tokens of each row (one document
  per row, positions from 0): per length, N x H means over query rows at positions < L
  (`*_within`) and >= L (`*_past`) of entropy, normalized entropy, first-token mass and largest
  probability. Up to dense_max tokens every row is used, beyond `rows` evenly spread ones."""
  tokens_BxT = np.asarray(tokens_BxT, np.int32)
  tokens_BxT = tokens_BxT[None] if tokens_BxT.ndim == 1 else tokens_BxT
  if max(lengths) > tokens_BxT.shape[1]:
    raise ValueError(f"lengths={list(lengths)}: the tokens have only {tokens_BxT.shape[1]} per row")
  out = []
  for t in sorted(lengths):
    chosen = None if t <= dense_max else default_rows(t, rows)
    maps = attention_maps(model, tokens_BxT[:, :t], rows=chosen, dense_max=dense_max)
    stats = query_stats(maps)
    row = {"length": t, "rows": len(maps.rows)}
    for name in ("entropy", "normalized_entropy", "first_token", "max_prob"):
      row[f"{name}_within"] = mean_over_queries(stats[name], maps.q_pos < maps.train_len)
      row[f"{name}_past"] = mean_over_queries(stats[name], maps.q_pos >= maps.train_len)
    out.append(row)
  return out


# --- q and k norms per rotary frequency pair. ---


def pair_norms(x_xK, pairing: str = "rotate_half", rotary_dim: int | None = None):
  """(pairs_xR, rest_x): each rotary pair's norm sqrt(a^2 + b^2), pairs split as the scheme
  splits them (`pairing`), and the norm of the features past rotary_dim (0 without). The squares
  sum to the squared norm of x; a rotation keeps every pair's norm."""
  if pairing not in PAIRINGS:
    raise errors.not_allowed("pairing", pairing, sorted(PAIRINGS))
  x = np.asarray(x_xK, np.float64)
  d = x.shape[-1] if rotary_dim is None else rotary_dim
  if d % 2 or not 2 <= d <= x.shape[-1]:
    raise errors.not_allowed("rotary_dim", d, f"even numbers in [2, {x.shape[-1]}]")
  split, _ = PAIRINGS[pairing]
  a, b = split(x[..., :d])
  return np.sqrt(a * a + b * b), np.sqrt(np.sum(x[..., d:] ** 2, axis=-1))


def rotary_frequencies(model: Model, seq_len: int | None = None) -> np.ndarray | None:
  """The inverse frequency of each rotary pair as the model rotates (None: not a rotary scheme):
  `lcx.model.positions.rope_frequencies` of the scheme's base, rotary dim and resolved scaling at
  `seq_len` (dynamic and longrope read it; None: L); p-RoPE's dropped pairs are 0."""
  scheme = model.decoder.position
  if not hasattr(scheme, "rotary_dim"):
    return None
  inv_freq_R, _ = positions.rope_frequencies(
    model.config.model.head_dim,
    base=scheme.base,
    scaling=dataclasses.asdict(scheme.scaling),
    seq_len=seq_len,
    rotary_dim=scheme.rotary_dim,
  )
  kept = getattr(scheme, "num_kept", None)  # p-RoPE: the first num_kept pairs rotate
  if kept is not None:
    inv_freq_R = np.where(np.arange(len(inv_freq_R)) < kept, inv_freq_R, 0.0)
  return inv_freq_R


def wavelengths(inv_freq_R) -> np.ndarray:
  """2 pi / inv_freq per pair, in positions (inf for a pair that does not rotate)."""
  inv = np.asarray(inv_freq_R, np.float64)
  with np.errstate(divide="ignore"):
    return np.where(inv > 0, 2 * math.pi / np.where(inv > 0, inv, 1.0), np.inf)


@dataclasses.dataclass(frozen=True)
class Bands:
  """RMS over tokens of each rotary pair's norm, per layer N and head: q N x H x R, k N x G x R;
  `*_rest` the features past the rotary dim; inv_freq / wavelength per pair (None for a scheme
  that does not rotate: pairs are then split as rotate_half over head_dim, for comparison)."""

  q: np.ndarray
  k: np.ndarray
  q_rest: np.ndarray
  k_rest: np.ndarray
  inv_freq: np.ndarray | None
  wavelength: np.ndarray | None
  pairing: str
  rotary_dim: int
  train_len: int

  def fraction_below(self, length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(q N x H, k N x G): the share of the squared norm in pairs whose wavelength is < length
    (default L: pairs that turn a full circle within the training length)."""
    if self.wavelength is None:
      raise ValueError("fraction_below needs a rotary scheme (wavelength is None)")
    fast_R = self.wavelength < (self.train_len if length is None else length)

    def share(x, rest):
      return (x[..., fast_R] ** 2).sum(-1) / ((x**2).sum(-1) + rest**2)

    return share(self.q, self.q_rest), share(self.k, self.k_rest)


def frequency_bands(
  model: Model, tokens_BxT, pos_BxT=None, seg_BxT=None, *, qk_values: QK | None = None
) -> Bands:
  """q and k norm per rotary pair, per layer and head, over every token of the batch."""
  values = qk_values if qk_values is not None else qk(model, tokens_BxT, pos_BxT, seg_BxT)
  scheme = model.decoder.position
  pairing = getattr(scheme, "pairing", "rotate_half")
  rotary_dim = getattr(scheme, "rotary_dim", model.config.model.head_dim)

  def rms(x):  # over batch and tokens
    return np.sqrt(np.mean(x**2, axis=(1, 2)))

  q_pairs, q_rest = pair_norms(values.q, pairing, rotary_dim)
  k_pairs, k_rest = pair_norms(values.k, pairing, rotary_dim)
  inv_freq = rotary_frequencies(model, values.q.shape[2])
  return Bands(
    rms(q_pairs),
    rms(k_pairs),
    rms(q_rest),
    rms(k_rest),
    inv_freq,
    None if inv_freq is None else wavelengths(inv_freq),
    pairing,
    rotary_dim,
    model.train_len,
  )
