"""Statistics of the maps (numpy): entropy, attention mass by key, head types
(`classify_heads`, thresholds in the package docstring), logit statistics split at the training
length, and the length sweep."""

from __future__ import annotations

import dataclasses

import numpy as np

from lcx.tools.analysis.capture import Model
from lcx.tools.analysis.maps import DEFAULT_ROWS, DENSE_MAX, Maps, attention_maps, default_rows

THRESHOLD = 0.5  # mean attention mass that makes a head previous-token / sink / positional
MIN_CONTEXT = 8  # queries with fewer tokens of their document before them are not classified
MAX_OFFSET = 16  # positional heads: the fixed offsets considered, 0..MAX_OFFSET


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
