"""The paired bootstrap over documents, against a direct computation and its math properties."""

import numpy as np
import pytest

from lcx.tools import bootstrap


def _documents(seed, docs=30):
  rng = np.random.default_rng(seed)
  tokens_D = rng.integers(20, 400, docs).astype(np.float64)
  hard_D = rng.normal(3.0, 0.6, docs)  # what both sides share: how hard each document is
  return tokens_D, hard_D, rng


def test_paired_difference_is_the_direct_resample_computation():
  tokens_D, hard_D, rng = _documents(0)
  loss_a_D = hard_D + rng.normal(0.1, 0.05, hard_D.size)
  loss_b_D = hard_D + rng.normal(0.0, 0.05, hard_D.size)
  weights_RxD = bootstrap.resample_weights(hard_D.size, 500, seed=3)
  diff, (lo, hi) = bootstrap.paired_difference(loss_a_D, tokens_D, loss_b_D, tokens_D, weights_RxD)
  # Direct: expand each resample into its list of drawn documents, pool their tokens.
  diffs = []
  for w_D in weights_RxD:
    drawn = np.repeat(np.arange(hard_D.size), w_D.astype(int))
    mean_a = sum(loss_a_D[d] * tokens_D[d] for d in drawn) / sum(tokens_D[d] for d in drawn)
    mean_b = sum(loss_b_D[d] * tokens_D[d] for d in drawn) / sum(tokens_D[d] for d in drawn)
    diffs.append(mean_a - mean_b)
  assert [lo, hi] == pytest.approx(np.percentile(diffs, [2.5, 97.5]), abs=1e-12)
  direct = (loss_a_D * tokens_D).sum() / tokens_D.sum() - (loss_b_D * tokens_D).sum() / (
    tokens_D.sum()
  )
  assert diff == pytest.approx(direct, abs=1e-12)
  assert lo < diff < hi


def test_a_constant_shift_has_a_zero_width_interval_and_pairing_narrows():
  tokens_D, hard_D, rng = _documents(1)
  weights_RxD = bootstrap.resample_weights(hard_D.size, 1000, seed=0)
  diff, ci = bootstrap.paired_difference(hard_D + 0.25, tokens_D, hard_D, tokens_D, weights_RxD)
  assert diff == pytest.approx(0.25) and ci == pytest.approx([0.25, 0.25])
  # Unpaired (each side resampled on its own) the shared difficulty would not cancel.
  other_RxD = bootstrap.resample_weights(hard_D.size, 1000, seed=1)
  mean_a_R = (weights_RxD @ ((hard_D + 0.25) * tokens_D)) / (weights_RxD @ tokens_D)
  mean_b_R = (other_RxD @ (hard_D * tokens_D)) / (other_RxD @ tokens_D)
  lo, hi = np.percentile(mean_a_R - mean_b_R, [2.5, 97.5])
  assert hi - lo > 0.2


def test_seeded_and_without_resamples_no_interval():
  tokens_D, hard_D, _ = _documents(2)
  w = bootstrap.resample_weights(hard_D.size, 200, seed=5)
  again = bootstrap.resample_weights(hard_D.size, 200, seed=5)
  assert np.array_equal(w, again) and (w.sum(axis=1) == hard_D.size).all()
  diff, ci = bootstrap.paired_difference(
    hard_D, tokens_D, hard_D * 0.9, tokens_D, bootstrap.resample_weights(hard_D.size, 0, 0)
  )
  assert ci is None and diff > 0


def test_resample_weights_are_seeded_draws_of_whole_documents_shared_read_only():
  """Rows are multinomial draws of D documents (the seed's own, another seed's differ); a
  second call returns the same matrix, which no caller can change for the next."""
  weights_RxD = bootstrap.resample_weights(12, 300, seed=5)
  assert weights_RxD.shape == (300, 12) and (weights_RxD.sum(1) == 12).all()
  assert np.array_equal(weights_RxD, weights_RxD.astype(int))
  assert weights_RxD.mean() == pytest.approx(1.0) and (weights_RxD == 0).any()
  assert not np.array_equal(weights_RxD, bootstrap.resample_weights(12, 300, seed=6))
  assert np.array_equal(bootstrap.resample_weights(12, 300, seed=5), weights_RxD)
  with pytest.raises(ValueError, match="read-only"):
    weights_RxD[0, 0] += 1
  assert bootstrap.resample_weights(12, 0, seed=5).shape == (0, 12)
