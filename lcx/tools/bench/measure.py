"""How every section measures: a compiled, warmed-up program, and interleaved rounds.

(Not `lcx.run.timing`, which splits a block's wall time into compiling and running.)

Programs that are compared run interleaved, round-robin (the order rotated every round), so slow
drift of a shared machine hits all of them alike; a ratio is the median over rounds of the
per-round ratio.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import time
from typing import Callable


@dataclasses.dataclass
class Program:
  """A benchmarked program, compiled and warmed up: `step()` runs it once and waits for it."""

  step: Callable[[], object]
  compile_s: float


def timed(fn: Callable[[], object]) -> float:
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def interleaved(programs: dict, rounds: int, steps: int) -> dict[object, list[float]]:
  """Per-round median seconds per step of each program. Every round runs every program once
  untimed, then `steps` timed times; the order rotates each round so no program always follows
  the same one.

  The untimed step: a program's first step after another program's can be slow for reasons
  outside it (with launch.sh's glibc.malloc.hugetlb=1, CoPE's took ~0.9 s, 0.7 s of it in the
  kernel zeroing pages, and its next 0.55 s). A training loop runs one program: steps are
  timed warm."""
  names = list(programs)
  out = {name: [] for name in names}
  for r in range(rounds):
    shift = r % len(names)
    for name in names[shift:] + names[:shift]:
      programs[name].step()
      out[name].append(statistics.median(timed(programs[name].step) for _ in range(steps)))
  return out


def round_ratios(rounds_a: list[float], rounds_b: list[float]) -> list[float]:
  """a / b per round: both ran close in time, so machine drift cancels."""
  return [a / b for a, b in zip(rounds_a, rounds_b)]


def ratio(rounds_a: list[float], rounds_b: list[float]) -> float:
  """Median over rounds of a / b (`round_ratios`)."""
  return statistics.median(round_ratios(rounds_a, rounds_b))


def median_ci(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
  """(low, high, coverage): the distribution-free interval for the median, order statistics
  k and n + 1 - k of n values with the largest k whose coverage 1 - 2 P(Binomial(n, 1/2) < k)
  is still >= `level`. With too few values for `level` (n < 6 at 0.95), the minimum and maximum
  and their coverage, which is then below `level`: the caller prints it."""
  x, n = sorted(values), len(values)
  if n == 0:
    raise ValueError("median_ci of no values")

  def coverage(k):
    return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n

  k = max([k for k in range(1, (n + 1) // 2 + 1) if coverage(k) >= level], default=1)
  return x[k - 1], x[n - k], coverage(k)


def ratio_ci(rounds_a: list[float], rounds_b: list[float], level: float = 0.95):
  """`median_ci` of the per-round ratios a / b whose median `ratio` is."""
  return median_ci(round_ratios(rounds_a, rounds_b), level)


def load_average() -> list[float]:
  return [round(x, 2) for x in os.getloadavg()]
