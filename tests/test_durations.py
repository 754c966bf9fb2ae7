"""The stored durations (tests/durations.py): units of work, the quick loop's slow marks, the
longest-first order, the recorder that writes them, and the compile seconds' recorder."""

import json
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import durations

GROUPED = "tests/run/test_prepare.py"  # holds a module-scoped fixture
ALONE = "tests/test_pairwise.py"  # holds none


def test_a_file_with_a_module_fixture_is_one_unit_and_other_tests_are_units_alone():
  assert durations.unit(f"{GROUPED}::test_a") == durations.unit(f"{GROUPED}::test_b[1]") == GROUPED
  assert durations.unit(f"{ALONE}::test_a") == f"{ALONE}::test_a"


def test_longest_first_orders_units_by_their_total_and_keeps_a_file_together():
  ids = [f"{GROUPED}::a", f"{GROUPED}::b", f"{ALONE}::x", f"{ALONE}::y", f"{ALONE}::new"]
  seconds = {f"{GROUPED}::a": 0.5, f"{GROUPED}::b": 0.75, f"{ALONE}::x": 1.0, f"{ALONE}::y": 3.0}
  assert durations.longest_first(ids, seconds) == [
    f"{ALONE}::y",  # 3.0
    f"{GROUPED}::a",  # the file's 1.25, in its own order
    f"{GROUPED}::b",
    f"{ALONE}::x",  # 1.0
    f"{ALONE}::new",  # unknown: 0, last
  ]


def test_a_test_over_the_quick_budget_is_slow_and_an_unknown_one_is_not():
  seconds = {"a": durations.QUICK_SECONDS + 0.01, "b": durations.QUICK_SECONDS}
  assert durations.is_slow("a", seconds)
  assert not durations.is_slow("b", seconds) and not durations.is_slow("c", seconds)


def test_the_recorder_writes_each_tests_setup_call_and_teardown_seconds(tmp_path):
  recorder = durations.Recorder(str(tmp_path / "d.json"))
  for nodeid, duration in [("t::a", 0.25), ("t::a", 1.5), ("t::a", 0.125), ("t::b", 0.5)]:
    recorder.pytest_runtest_logreport(types.SimpleNamespace(nodeid=nodeid, duration=duration))
  recorder.pytest_sessionfinish(None)
  assert json.loads((tmp_path / "d.json").read_text()) == {"t::a": 1.875, "t::b": 0.5}
  assert [p.name for p in tmp_path.iterdir()] == ["d.json"]


def test_this_session_marks_and_orders_by_the_stored_durations(request):
  """The conftest hook ran on this session's items (under xdist, this worker's collection):
  each test over the budget is marked slow, and the items are longest first (checked where no
  `-m` expression took some of a file's tests away, which changes its total)."""
  items, seconds = request.session.items, durations.stored()
  assert seconds, "tests/durations.json is missing"
  for item in items:
    if durations.is_slow(item.nodeid, seconds):
      assert item.get_closest_marker("slow") is not None, item.nodeid
  ids = [item.nodeid for item in items]
  if not request.config.getoption("markexpr"):
    assert ids == durations.longest_first(ids, seconds)


def test_compile_seconds_count_a_new_programs_stages_into_its_own_report():
  seconds = durations.CompileSeconds()
  seconds.pytest_runtest_logstart("t::a", None)
  unique = float(np.random.default_rng().integers(1 << 30))  # a program no cache holds
  jax.jit(lambda x: x * unique + 1.0)(jnp.ones(3)).block_until_ready()
  seconds.on_event("/jax/checkpoint/write/duration", 100.0)  # not a compile stage
  item = types.SimpleNamespace(user_properties=[("kept", 1)])
  report = types.SimpleNamespace(user_properties=item.user_properties)
  wrapper = seconds.pytest_runtest_makereport(item, None)
  next(wrapper)
  with pytest.raises(StopIteration) as done:
    wrapper.send(report)
  assert done.value.value is report
  (name, stages), *_ = report.user_properties[1:]
  assert name == "compile_seconds" and set(stages) == {"trace", "lower", "xla"}
  assert all(0 < s < 100 for s in stages.values())
  assert item.user_properties == [("kept", 1)]  # the next phase's report does not get them
  assert not seconds.seconds


def test_the_compile_recorder_sums_each_tests_phases_and_prints_totals(tmp_path):
  recorder = durations.CompileRecorder(str(tmp_path / "c.json"))
  phases = [
    ("t::a", 0.5, {"xla": 0.25}),
    ("t::a", 2.0, {"trace": 0.25, "lower": 0.75, "xla": 0.5}),
    ("t::b", 1.25, None),  # no compile property (a report from before the option)
  ]
  for nodeid, duration, stages in phases:
    props = [("compile_seconds", stages)] if stages else []
    recorder.pytest_runtest_logreport(
      types.SimpleNamespace(nodeid=nodeid, duration=duration, user_properties=props)
    )
  lines = []
  recorder.pytest_terminal_summary(types.SimpleNamespace(write_line=lines.append))
  recorder.pytest_sessionfinish(None)
  assert json.loads((tmp_path / "c.json").read_text()) == {
    "t::a": {"lower": 0.75, "seconds": 2.5, "trace": 0.25, "xla": 0.75},
    "t::b": {"seconds": 1.25},
  }
  assert lines == [
    f"compile: 2 of 4 s of test time trace 0 s, lower 1 s, xla 1 s -> {tmp_path}/c.json"
  ]
