"""Summaries of per-token losses: means with bootstrap confidence intervals over documents,
log-spaced position buckets, bits per byte. Pure numpy.

Tokens of one document are correlated, so intervals resample whole documents (with
replacement), not tokens: each resample's mean is sum(loss) / sum(tokens) over its documents.
One matrix of resample weights serves every statistic of an evaluation, so intervals of the
overall loss, each position bucket and bits per byte come from the same resamples.
"""

from __future__ import annotations

import math

import numpy as np

from lcx.tools.bootstrap import CONFIDENCE, resample_weights  # noqa: F401 (shared with the report)


def ratio_ci(
  num_D: np.ndarray, den_D: np.ndarray, weights_RxD: np.ndarray, confidence: float = CONFIDENCE
) -> list[float] | None:
  """Percentile interval of sum(num) / sum(den) over document resamples (None: no resamples)."""
  if not len(weights_RxD):
    return None
  num_R, den_R = weights_RxD @ num_D, weights_RxD @ den_D
  ratio_R = num_R[den_R > 0] / den_R[den_R > 0]
  tail = (1 - confidence) / 2 * 100
  return [float(x) for x in np.percentile(ratio_R, [tail, 100 - tail])]


def per_doc_sums(values_N: np.ndarray, doc_N: np.ndarray, num_docs: int) -> np.ndarray:
  return np.bincount(doc_N, weights=values_N, minlength=num_docs)


def position_edges(length: int, per_octave: int) -> list[int]:
  """Bucket edges 0, 1, ... log-spaced with `per_octave` per doubling, ending at `length`.

  2^(i / per_octave) rounded to integers, duplicates merged: [0, 1), [1, 2), [2, 3), ...
  exact at short positions, then `per_octave` buckets per octave out to the longest length.
  """
  top = math.ceil(math.log2(max(length, 2)) * per_octave)
  edges = {0, length} | {round(2 ** (i / per_octave)) for i in range(top + 1)}
  return sorted(e for e in edges if e <= length)


def mean_with_ci(loss_N, doc_N, num_docs, weights_RxD):
  """(mean loss, its interval) over tokens, intervals from document resamples."""
  loss_D = per_doc_sums(loss_N, doc_N, num_docs)
  count_D = per_doc_sums(np.ones_like(loss_N), doc_N, num_docs)
  return float(loss_N.mean()), ratio_ci(loss_D, count_D, weights_RxD)


def perplexity(loss: float) -> float:
  return math.exp(min(loss, 700.0))
