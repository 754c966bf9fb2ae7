"""Reading results: files, directories, globs, and the errors that name the path."""

import pytest

from lcx.tools import report
from tests.tools.report.results import lengths_result, save


def test_load_errors_name_the_path(tmp_path):
  with pytest.raises(ValueError, match=r"nope\.json: no such file or directory"):
    report.load([tmp_path / "nope.json"])
  with pytest.raises(ValueError, match=r"\*\.json: the pattern matches no file"):
    report.load([str(tmp_path / "*.json")])
  other = save(tmp_path / "other.json", {"loss": 1.0})
  with pytest.raises(
    ValueError,
    match=rf"{other}: not an lcx result: schema=None; expected "
    "'lcx.eval/1'",
  ):
    report.load([other])
  with pytest.raises(ValueError, match=r"no lcx result JSON \(schema 'lcx.eval/1'\) below it"):
    report.load([tmp_path])  # other.json is not one
  bad = save(tmp_path / "d" / "bad.json", {**lengths_result(), "kind": "speed"})
  with pytest.raises(
    ValueError,
    match=rf"^{bad}: kind='speed' is not allowed; allowed: "
    r"lengths, tasks, passkey$",
  ):
    report.load([tmp_path / "d"])
  (tmp_path / "empty").mkdir()
  assert report.load([tmp_path / "empty"], allow_empty=True) == []


def test_load_glob_and_duplicates(tmp_path):
  path = save(tmp_path / "a" / "eval" / "none.json", lengths_result("a"))
  save(tmp_path / "b" / "eval" / "none.json", lengths_result("b"))
  results = report.load([str(tmp_path / "*" / "eval"), path])  # a's file named twice
  assert [r["run"] for r in results] == ["a", "b"]
