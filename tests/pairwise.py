"""All-pairs test cases: a small list of combinations in which every pair of values of two
factors that some valid combination holds occurs at least once (a fault comes from one value or
the meeting of two far more often than from three; the full product is rarely needed).
Deterministic: a greedy pick in the product's order, no randomness, so test ids stay the same."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence

Case = tuple


def values_of(case: Case) -> set[tuple]:
  """The (factor index, value) items one case covers."""
  return set(enumerate(case))


def pairs_of(case: Case) -> set[tuple]:
  """The (factor index, value, factor index, value) pairs one case covers."""
  return {(i, case[i], j, case[j]) for i, j in itertools.combinations(range(len(case)), 2)}


def greedy_cover(candidates: Sequence[Case], items: Callable[[Case], set]) -> list[Case]:
  """Candidates, one at a time, each covering the most items (`items(case)`) not yet covered
  (the first on a tie), until every item of any candidate is covered."""
  covers = {c: items(c) for c in candidates}
  uncovered = set().union(*covers.values())
  cases = []
  while uncovered:
    best = max(candidates, key=lambda c: len(covers[c] & uncovered))  # max keeps the first
    cases.append(best)
    uncovered -= covers[best]
  return cases


def valid_product(factors: Sequence[Sequence], valid: Callable[[Case], bool]) -> list[Case]:
  return [c for c in itertools.product(*factors) if valid(c)]


def pairwise(
  factors: Sequence[Sequence],
  valid: Callable[[Case], bool] = lambda case: True,
  kind: Callable[[Case], Case] = lambda case: case,
) -> list[Case]:
  """Valid combinations covering every pair of kinds that any valid combination holds, and
  every value. `kind(case)` maps each factor's value to what decides how it acts (a scheme to
  the position hooks it overrides, say; by default the value itself): where many values act
  alike, their pairs with another factor are asked once for the kind, not once for each value,
  and each value a kind stands for still occurs once."""

  def items(case):
    kinds = kind(case)
    hidden = {(i, v) for i, v in enumerate(case) if kinds[i] != v}  # values a kind stands for
    return pairs_of(kinds) | hidden

  return greedy_cover(valid_product(factors, valid), items)


def each_value(cases: Iterable[Case]) -> list[Case]:
  """A few of `cases` that hold every value any of them holds: a quick subset."""
  return greedy_cover(list(cases), values_of)
