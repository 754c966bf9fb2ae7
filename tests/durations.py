"""Each test's seconds in a cold full run, stored in tests/durations.json (written by
`./launch.sh test --store_durations=tests/durations.json` in a fresh clone), used twice:
  - the quick loop: a test whose stored seconds exceed QUICK_SECONDS is marked slow, so
    `./launch.sh test -m "not slow"` runs the others between edits (CI runs every test);
  - the order: units of work (`unit`) longest first, so that two workers finish together
    instead of one waiting on a long test taken last.
A test the file does not know yet counts as quick and short until the file is written again.
Where a slow test's seconds go: `JAX_LOG_COMPILES=1` names each program it compiles, and
`jax.monitoring`'s `/jax/core/compile/*` duration events time tracing, lowering and XLA."""

from __future__ import annotations

import collections
import functools
import json
import pathlib

from lcx import files
from tests.helpers import ROOT

PATH = pathlib.Path(__file__).with_name("durations.json")
QUICK_SECONDS = 0.3


@functools.cache
def stored() -> dict[str, float]:
  return json.loads(PATH.read_text()) if PATH.exists() else {}


@functools.cache
def _has_module_fixture(path: str) -> bool:
  return 'scope="module"' in (ROOT / path).read_text()


def unit(nodeid: str) -> str:
  """A unit of work for the scheduler: a file that holds a module-scoped fixture is one (its
  fixture is built once, on the worker that runs the file), any other test is one alone."""
  path = nodeid.split("::", 1)[0]
  return path if _has_module_fixture(path) else nodeid


def is_slow(nodeid: str, seconds: dict[str, float]) -> bool:
  return seconds.get(nodeid, 0.0) > QUICK_SECONDS


def longest_first(tests: list, seconds: dict[str, float], nodeid=lambda test: test) -> list:
  """`tests` (node ids, or pytest items with `nodeid=`) by their unit's stored seconds, longest
  first; a unit's tests stay together and in their order (the sort is stable, and a file's
  tests are together when collected)."""
  totals = collections.Counter()
  for test in tests:
    totals[unit(nodeid(test))] += seconds.get(nodeid(test), 0.0)
  return sorted(tests, key=lambda test: -totals[unit(nodeid(test))])


class Recorder:
  """Sums each test's setup, call and teardown seconds (on xdist's controller, which receives
  every worker's reports) and writes them to `path` when the session ends."""

  def __init__(self, path: str):
    self.path = pathlib.Path(path)
    self.seconds = collections.defaultdict(float)

  def pytest_runtest_logreport(self, report):
    self.seconds[report.nodeid] += report.duration

  def pytest_sessionfinish(self, session):
    rounded = {k: round(v, 3) for k, v in sorted(self.seconds.items())}
    files.write_atomic(str(self.path), json.dumps(rounded, indent=0) + "\n")
