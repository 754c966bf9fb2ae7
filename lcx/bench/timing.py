"""Timing shared by every section: a compiled, warmed-up program, and interleaved rounds.

Programs that are compared run interleaved, round-robin (the order rotated every round), so slow
drift of a shared machine hits all of them alike; a ratio is the median over rounds of the
per-round ratio.
"""

from __future__ import annotations

import dataclasses
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


def ratio(rounds_a: list[float], rounds_b: list[float]) -> float:
  """Median over rounds of a / b: both ran close in time, so machine drift cancels."""
  return statistics.median(a / b for a, b in zip(rounds_a, rounds_b))


def load_average() -> list[float]:
  return [round(x, 2) for x in os.getloadavg()]
