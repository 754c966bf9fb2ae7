"""Bootstrap intervals over documents, position buckets, perplexity."""

import numpy as np
import pytest

from lcx.tools.evaluate import stats


def test_interval_contains_the_mean_and_shrinks_with_more_documents():
  rng = np.random.default_rng(0)
  widths = []
  for docs in (10, 200):
    doc_N = np.repeat(np.arange(docs), 50)
    loss_N = rng.normal(3.0, 1.0, size=docs)[doc_N] + rng.normal(0, 0.1, doc_N.size)
    weights = stats.resample_weights(docs, 500, seed=0)
    mean, (lo, hi) = stats.mean_with_ci(loss_N, doc_N, docs, weights)
    assert lo < mean < hi
    widths.append(hi - lo)
  assert widths[1] < widths[0] / 3  # ~ 1 / sqrt(20)


def test_identical_documents_give_a_zero_width_interval_and_no_resamples_none():
  doc_N = np.repeat(np.arange(5), 4)
  loss_N = np.tile([1.0, 2.0, 3.0, 4.0], 5)
  mean, ci = stats.mean_with_ci(loss_N, doc_N, 5, stats.resample_weights(5, 100, 0))
  assert mean == 2.5 and ci == pytest.approx([2.5, 2.5])
  assert stats.mean_with_ci(loss_N, doc_N, 5, stats.resample_weights(5, 0, 0))[1] is None


def test_documents_not_tokens_are_resampled():
  # One long document with low loss, many short ones with high loss: the token mean is
  # dominated by the long document; resampling documents makes the interval wide.
  doc_N = np.concatenate([np.zeros(1000, int), np.repeat(np.arange(1, 11), 10)])
  loss_N = np.where(doc_N == 0, 1.0, 5.0)
  _, (lo, hi) = stats.mean_with_ci(loss_N, doc_N, 11, stats.resample_weights(11, 1000, 0))
  assert hi - lo > 0.3  # token resampling would give ~0.06
  again = stats.mean_with_ci(loss_N, doc_N, 11, stats.resample_weights(11, 1000, 0))[1]
  assert again == [lo, hi]  # seeded


def test_position_edges_are_log_spaced_per_octave():
  edges = stats.position_edges(256, 4)
  assert edges[:9] == [0, 1, 2, 3, 4, 5, 6, 7, 8] and edges[-1] == 256
  for octave in range(4, 8):  # [16, 32), [32, 64), ...: 4 buckets each
    assert sum(2**octave <= e < 2 ** (octave + 1) for e in edges) == 4
  assert stats.position_edges(100, 4)[-1] == 100
  assert stats.position_edges(1, 4) == [0, 1]
