"""Seeded bootstraps over documents, pure numpy (the report reads results without jax).

Tokens of one document are correlated, so every interval resamples whole documents. A paired
comparison (scheme A minus scheme B, or length x minus 1x of one run) resamples the documents
once for both sides: each resample's difference is taken on the same documents, so what the
two sides share (a hard document is hard for both) cancels and the interval is narrower than
two separate intervals suggest.
"""

from __future__ import annotations

import functools

import numpy as np

CONFIDENCE = 0.95


@functools.lru_cache(maxsize=8)
def resample_weights(num_docs: int, resamples: int, seed: int) -> np.ndarray:
  """RxD: how often each document appears in each bootstrap resample (rows sum to D), read-only.

  Kept for the next call with the same arguments: a report draws the same matrix for each
  comparison of one protocol (nope_tasks' tables: 2808 draws, 1.2 s with the matrix kept,
  8 s without)."""
  if resamples == 0 or num_docs == 0:
    weights_RxD = np.zeros((0, num_docs))
  else:
    rng = np.random.default_rng([seed, 7])
    draws = rng.multinomial(num_docs, np.full(num_docs, 1 / num_docs), size=resamples)
    weights_RxD = draws.astype(np.float64)
  weights_RxD.flags.writeable = False
  return weights_RxD


def paired_difference(
  loss_a_D: np.ndarray,
  tokens_a_D: np.ndarray,
  loss_b_D: np.ndarray,
  tokens_b_D: np.ndarray,
  weights_RxD: np.ndarray,
  confidence: float = CONFIDENCE,
) -> tuple[float, list[float] | None]:
  """(A's mean loss per token minus B's, its percentile interval) on the same D documents.

  `loss_*_D` is each document's mean loss, `tokens_*_D` its scored tokens: each side's mean is
  sum(loss x tokens) / sum(tokens) over the documents, in every resample over the same weights.
  The interval is None without resamples."""
  sum_a_D, sum_b_D = loss_a_D * tokens_a_D, loss_b_D * tokens_b_D
  diff = float(sum_a_D.sum() / tokens_a_D.sum() - sum_b_D.sum() / tokens_b_D.sum())
  if not len(weights_RxD):
    return diff, None
  diff_R = difference_resamples(loss_a_D, tokens_a_D, loss_b_D, tokens_b_D, weights_RxD)
  tail = (1 - confidence) / 2 * 100
  return diff, [float(x) for x in np.percentile(diff_R, [tail, 100 - tail])]


def difference_resamples(loss_a_D, tokens_a_D, loss_b_D, tokens_b_D, weights_RxD) -> np.ndarray:
  """R: A's mean loss per token minus B's in each resample (`paired_difference`'s draws), for a
  statistic of several paired differences taken on the same resamples."""
  sum_a_D, sum_b_D = loss_a_D * tokens_a_D, loss_b_D * tokens_b_D
  return (weights_RxD @ sum_a_D) / (weights_RxD @ tokens_a_D) - (weights_RxD @ sum_b_D) / (
    weights_RxD @ tokens_b_D
  )
