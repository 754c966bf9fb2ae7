"""Each test's seconds in a cold full run, stored in tests/durations.json (written by
`./launch.sh test --store_durations=tests/durations.json` in a fresh clone), used twice:
  - the quick loop: a test whose stored seconds exceed QUICK_SECONDS is marked slow, so
    `./launch.sh test -m "not slow"` runs the others between edits (CI runs every test);
  - the order: units of work (`unit`) longest first, so that two workers finish together
    instead of one waiting on a long test taken last.
A test the file does not know yet counts as quick and short until the file is written again.
`--store_compile=PATH` writes where each test's seconds went instead: jax's tracing, lowering
and XLA compilation in the test's own process (`CompileSeconds`; a CLI test's subprocesses
compile on their own and count only in its duration)."""

from __future__ import annotations

import collections
import functools
import json
import os
import pathlib

import pytest

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


def write_json(path: pathlib.Path, data: dict) -> None:
  """`data` to `path`, one entry a line, whole or not at all (a temporary file, then a rename)."""
  tmp = path.with_suffix(".tmp")
  tmp.write_text(json.dumps(data, indent=0) + "\n")
  os.replace(tmp, path)


class Recorder:
  """Sums each test's setup, call and teardown seconds (on xdist's controller, which receives
  every worker's reports) and writes them to `path` when the session ends."""

  def __init__(self, path: str):
    self.path = pathlib.Path(path)
    self.seconds = collections.defaultdict(float)

  def pytest_runtest_logreport(self, report):
    self.seconds[report.nodeid] += report.duration

  def pytest_sessionfinish(self, session):
    write_json(self.path, {k: round(v, 3) for k, v in sorted(self.seconds.items())})


COMPILE_EVENTS = {  # jax.monitoring's duration events of a new program, by stage
  "/jax/core/compile/jaxpr_trace_duration": "trace",
  "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
  "/jax/core/compile/backend_compile_duration": "xla",
}


class CompileSeconds:
  """In the process that runs the tests (an xdist worker): the seconds of each COMPILE_EVENTS
  stage since the last report, added to each setup, call and teardown report as the
  `compile_seconds` user property, which xdist carries to the controller."""

  def __init__(self):
    import jax

    self.seconds = collections.Counter()
    jax.monitoring.register_event_duration_secs_listener(self.on_event)

  def on_event(self, event: str, seconds: float, **kwargs):
    if event in COMPILE_EVENTS:
      self.seconds[COMPILE_EVENTS[event]] += seconds

  def pytest_runtest_logstart(self, nodeid, location):
    self.seconds.clear()  # what ran between tests (collection, fixtures' teardown) is no one's

  @pytest.hookimpl(wrapper=True)
  def pytest_runtest_makereport(self, item, call):
    report = yield
    # a list of the report's own: the three reports share the item's list
    report.user_properties = [*report.user_properties, ("compile_seconds", dict(self.seconds))]
    self.seconds.clear()
    return report


class CompileRecorder:
  """On the controller: sums each test's `compile_seconds` and duration, writes them to `path`
  ({test: {"seconds", "trace", "lower", "xla"}}) and prints the totals."""

  def __init__(self, path: str):
    self.path = pathlib.Path(path)
    self.tests = collections.defaultdict(collections.Counter)

  def pytest_runtest_logreport(self, report):
    test = self.tests[report.nodeid]
    test["seconds"] += report.duration
    for name, value in report.user_properties:
      if name == "compile_seconds":
        test.update(value)

  def totals(self) -> collections.Counter:
    return sum(self.tests.values(), collections.Counter())

  def pytest_terminal_summary(self, terminalreporter):
    total = self.totals()
    compiling = sum(total[stage] for stage in COMPILE_EVENTS.values())
    terminalreporter.write_line(
      f"compile: {compiling:.0f} of {total['seconds']:.0f} s of test time "
      + ", ".join(f"{stage} {total[stage]:.0f} s" for stage in COMPILE_EVENTS.values())
      + f" -> {self.path}"
    )

  def pytest_sessionfinish(self, session):
    rounded = {
      nodeid: {k: round(v, 3) for k, v in sorted(test.items())}
      for nodeid, test in sorted(self.tests.items())
    }
    write_json(self.path, rounded)
