"""The stored durations (tests/durations.py): units of work, the quick loop's slow marks, the
longest-first order and the recorder that writes them."""

import json
import types

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
