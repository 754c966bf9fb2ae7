"""lcx.tools.report.provenance: which results name a clean commit and carry per-unit outcomes."""

import json

from lcx.tools.report import provenance
from tests.helpers import run_lcx
from tests.tools.report.results import (
  lengths_result,
  passkey_result,
  save,
  tasks_result,
  with_documents,
)

CLEAN = {"commit": "a" * 40, "dirty": False, "diff": None}
DIRTY = {"commit": "a" * 40, "dirty": True, "diff": "b" * 64}


def _sourced(result, source):
  return {**result, "source": source} if source is not None else result


def _tree(tmp_path):
  """experiments/x/results: 2 traceable lengths results, 1 dirty, 1 without per-document losses,
  1 with no source at all; experiments/x/full/results: a task result with per-example outcomes
  in every bucket it scored, one without, a passkey result; plus what the scan must skip."""
  top = tmp_path / "experiments" / "x"
  save(top / "results" / "a" / "none.json", _sourced(with_documents(lengths_result("a")), CLEAN))
  save(top / "results" / "b" / "none.json", _sourced(with_documents(lengths_result("b")), CLEAN))
  save(top / "results" / "c" / "none.json", _sourced(with_documents(lengths_result("c")), DIRTY))
  save(top / "results" / "d" / "none.json", _sourced(lengths_result("d"), CLEAN))
  save(top / "results" / "e" / "none.json", with_documents(lengths_result("e")))
  # replaced results and other JSON are not results of the experiment
  save(top / "results" / "a" / "history" / "old.json", lengths_result("a"))
  save(top / "results" / "a" / "config.json", {"model": {}})
  task = tasks_result()
  for bucket in task["buckets"].values():
    if not bucket.get("skipped"):  # the skipped size scored nothing: nothing to record
      bucket["per_example"] = {"exact": "10" * 50, "digest": "0" * 16}
  save(top / "full" / "results" / "copy" / "none.json", _sourced(task, CLEAN))
  save(top / "full" / "results" / "copy2" / "none.json", _sourced(tasks_result("copy2"), CLEAN))
  save(top / "full" / "results" / "pk" / "none.json", _sourced(passkey_result(), DIRTY))
  return tmp_path / "experiments"


def test_counts_per_folder_and_kind_with_totals(tmp_path):
  entries = provenance.scan([str(_tree(tmp_path))])
  table = provenance.counts(entries)
  top, full = str(tmp_path / "experiments" / "x"), str(tmp_path / "experiments" / "x" / "full")
  got = {k: (c.results, c.clean, c.outcomes, c.traceable) for k, c in table.items()}
  assert got == {
    (top, "lengths"): (5, 3, 4, 2),
    (full, "tasks"): (2, 2, 1, 1),
    (full, "passkey"): (1, 0, 0, 0),
    ("all", "lengths"): (5, 3, 4, 2),
    ("all", "tasks"): (2, 2, 1, 1),
    ("all", "passkey"): (1, 0, 0, 0),
  }
  why = {e.path.split("results/")[1]: e.why for e in entries if not e.traceable}
  assert why == {
    "c/none.json": "no clean commit",
    "d/none.json": "no per-unit outcomes",
    "e/none.json": "no clean commit",
    "copy2/none.json": "no per-unit outcomes",
    "pk/none.json": "no clean commit",  # passkey cells record counts: the commit alone decides
  }


def test_command_prints_the_table_and_lists_what_falls_short(tmp_path):
  top = _tree(tmp_path)
  proc = run_lcx([str(top), "--list"], module="lcx.tools.report.provenance", check=False)
  assert proc.returncode == 0, proc.stderr
  lines = proc.stdout.splitlines()
  assert lines[0].startswith("| results folder | kind | results | clean commit |")
  assert f"| {top / 'x'} | lengths | 5 | 3 | 4 | 2 | 40.0% |" in lines
  assert "| **all** | passkey | 1 | 0 | n/a | 0 | 0.0% |" in lines
  assert "5 of 8 results fall short:" in lines
  assert f"  {top / 'x' / 'results' / 'd' / 'none.json'}: no per-unit outcomes" in lines


def test_bad_paths_are_one_error_line(tmp_path):
  proc = run_lcx([str(tmp_path / "nowhere")], module="lcx.tools.report.provenance", check=False)
  assert proc.returncode == 2
  assert proc.stderr.strip() == f"error: {tmp_path / 'nowhere'}: no such file or directory"
  (tmp_path / "empty").mkdir()
  proc = run_lcx([str(tmp_path / "empty")], module="lcx.tools.report.provenance", check=False)
  assert proc.returncode == 2
  assert proc.stderr.strip() == f"error: no lcx result below {tmp_path / 'empty'}"
  (tmp_path / "cut" / "results").mkdir(parents=True)
  (tmp_path / "cut" / "results" / "r.json").write_text(json.dumps(lengths_result())[:50])
  proc = run_lcx([str(tmp_path / "cut")], module="lcx.tools.report.provenance", check=False)
  assert proc.returncode == 2
  assert proc.stderr.startswith(f"error: {tmp_path / 'cut' / 'results' / 'r.json'}: not JSON")
