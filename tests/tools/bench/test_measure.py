"""lcx.tools.bench.measure: ratios, the median's order-statistic interval and the interleaved
rounds. No timing thresholds."""

import numpy as np
import pytest

from lcx.tools.bench import measure


def test_ratio_is_the_median_of_the_round_ratios():
  assert measure.ratio([2.0, 4.0, 9.0], [1.0, 2.0, 3.0]) == 2.0  # median of 2, 2, 3


def test_median_ci_is_the_textbook_order_statistic_interval():
  # n = 100: the 40th and 61st values (96.5%); n = 15: the 4th and 12th (96.5%).
  assert measure.median_ci(list(range(1, 101))[::-1])[:2] == (40, 61)
  low, high, coverage = measure.median_ci(list(range(1, 16)))
  assert (low, high) == (4, 12) and coverage == pytest.approx(1 - 2 * 576 / 2**15)
  # Too few values for 95%: the extremes, with their coverage, 1 - 2 / 2^5.
  assert measure.median_ci([5.0, 1.0, 3.0, 2.0, 4.0]) == (1.0, 5.0, 1 - 2 / 32)
  assert measure.median_ci([1.0, 2.0, 3.0, 4.0, 5.0], level=0.9) == (1.0, 5.0, 1 - 2 / 32)
  assert measure.ratio_ci([2.0] * 7, [1.0] * 7) == (2.0, 2.0, 1 - 2 / 128)
  with pytest.raises(ValueError, match="no values"):
    measure.median_ci([])


def test_median_ci_covers_the_median_at_its_stated_rate():
  """Over many samples of a skewed distribution, the interval holds the true median at least
  as often as it says (it is exact for continuous data)."""
  rng = np.random.default_rng(0)
  true_median = np.log(2.0)  # of the exponential distribution
  for n in (7, 15, 40):
    hits, trials = 0, 2000
    for _ in range(trials):
      low, high, coverage = measure.median_ci(list(rng.exponential(size=n)))
      hits += low <= true_median <= high
    assert abs(hits / trials - coverage) < 0.02, (n, hits / trials, coverage)


def test_interleaved_rotates_the_order_and_times_all_but_a_warm_up_step(monkeypatch):
  """Each round: every program once untimed, then `steps` timed; the order rotates. A step's
  "time" here is its index among its program's calls, so the warm-up's index 0 never counts."""
  calls = []
  programs = {n: measure.Program(step=lambda n=n: calls.append(n), compile_s=0.0) for n in "abc"}
  monkeypatch.setattr(measure, "timed", lambda fn: (fn(), calls.count(calls[-1]) - 1)[1])
  rounds = measure.interleaved(programs, rounds=3, steps=2)
  assert calls == list("aaabbbcccbbbcccaaacccaaabbb")
  assert rounds == {"a": [1.5, 4.5, 7.5], "b": [1.5, 4.5, 7.5], "c": [1.5, 4.5, 7.5]}
