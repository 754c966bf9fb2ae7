"""tests/pairwise.py, the helper that picks test_generate's cases: every valid pair covered, only
valid cases, fewer than the product, the same list every time."""

import itertools

import pytest

from tests import pairwise


def _pairs(cases, factors):
  return {
    (i, c[i], j, c[j]) for c in cases for i, j in itertools.combinations(range(len(factors)), 2)
  }


def test_three_binary_factors_take_the_four_cases_of_the_classic_array():
  factors = [(0, 1)] * 3
  cases = pairwise.pairwise(factors)
  assert len(cases) == 4  # the orthogonal array L4(2^3); the product has 8
  assert _pairs(cases, factors) == _pairs(itertools.product(*factors), factors)


@pytest.mark.parametrize("sizes", [(3, 3, 3, 3), (5, 2, 4), (6, 6, 2, 3, 2)])
def test_every_pair_is_covered_by_fewer_cases_than_the_product(sizes):
  factors = [range(n) for n in sizes]
  cases = pairwise.pairwise(factors)
  product = list(itertools.product(*factors))
  assert _pairs(cases, factors) == _pairs(product, factors)
  assert len(cases) < len(product) and len(set(cases)) == len(cases)
  assert cases == pairwise.pairwise(factors)  # deterministic
  sorted_sizes = sorted(sizes)
  assert len(cases) >= sorted_sizes[-1] * sorted_sizes[-2]  # the two largest factors' pairs


def test_invalid_combinations_are_never_picked_and_their_pairs_not_asked():
  """b=1 never goes with c=1: that pair is absent, every other pair of a valid case is there."""
  factors = [(0, 1, 2), (0, 1), (0, 1)]

  def valid(case):
    return not (case[1] == 1 and case[2] == 1)

  cases = pairwise.pairwise(factors, valid)
  valid_cases = [c for c in itertools.product(*factors) if valid(c)]
  assert all(valid(c) for c in cases)
  assert _pairs(cases, factors) == _pairs(valid_cases, factors)
  assert (1, 1, 2, 1) not in _pairs(cases, factors)


def test_each_value_picks_a_few_cases_that_hold_every_value():
  factors = [range(4), range(3), range(2)]
  cases = pairwise.pairwise(factors)
  quick = pairwise.each_value(cases)
  assert set(quick) <= set(cases) and len(quick) == 4  # one per value of the largest factor
  for i, values in enumerate(factors):
    assert {c[i] for c in quick} == set(values)


def test_values_that_act_alike_have_their_pairs_asked_once_for_their_kind():
  """Three schemes of one kind and one of another, each with two remaps: every scheme once,
  each kind with each remap, in 5 cases where all pairs of values need the product's 8."""
  factors = [("a1", "a2", "a3", "b1"), ("x", "y")]

  def kind(case):
    return (case[0][0], case[1])

  cases = pairwise.pairwise(factors, kind=kind)
  assert len(cases) == 5 and len(pairwise.pairwise(factors)) == 8
  assert {c[0] for c in cases} == set(factors[0]) and {c[1] for c in cases} == set(factors[1])
  assert {kind(c) for c in cases} == {(k, r) for k in "ab" for r in "xy"}
