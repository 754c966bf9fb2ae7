"""The "tasks" kind: exact match and error rate tables, what a result ranks as."""

import numpy as np
import pytest

from lcx.tools import report
from tests.tools.report.results import row_cells, tasks_result


def test_task_table_cells_and_skipped_bucket():
  text = report.task_tables([tasks_result()])
  lines = text.splitlines()
  assert lines[0].startswith(
    "Task copy: exact match by task size, 95% CI; trained on sizes "
    "1-16. Examples per bucket: 1-16: 100; 17-32: 100; 33-64: 100."
  )
  assert row_cells(lines[2]) == [
    "run/variant",
    "1-16",
    "17-32",
    "33-64",
  ]
  assert row_cells(lines[4]) == [
    "copy/none",
    "0.953 [0.93, 0.97]",
    "0.410 [0.31, 0.51]",
    "skipped",
  ]
  assert lines[-1] == "- copy/none sizes 33-64: skipped: model.max_len=32 < 64"


def test_task_depth_table():
  result = tasks_result()
  result["depths"] = {"0": result["buckets"], "0.5": result["buckets"]}
  text = report.task_tables([result])
  assert "copy/none: copy exact match by needle depth and size" in text
  assert "| depth 0.5 | 0.953 [0.93, 0.97] |" in text


def test_task_error_rates_show_only_for_results_that_record_them():
  old = tasks_result()
  assert "error rate" not in report.format_tables([old])
  new = tasks_result(run="flip")
  new["buckets"]["1-16"].update(error_rate=0.125, error_rate_ci=[0.0625, 0.25])
  body = report.format_tables([old, new]).split("## Task error rate on scored tokens\n")[1]
  rows = {
    x.split("|")[1].strip(): [c.strip() for c in x.split("|")[2:-1]]
    for x in body.split("\n## ")[0].splitlines()
    if x.startswith("|")
  }
  assert "copy/none" not in rows and rows["flip/none"][0] == "0.125 [0.062, 0.250]"


def test_a_variant_that_picks_the_task_ranks_as_its_run_or_its_method():
  def result(run, variant, task, overrides):
    r = tasks_result(run)
    r.update(task=task, variant=variant, overrides=overrides)
    return r

  picks = {"data.task": "niah_multikey"}
  assert report.system(result("rope-s0", "multikey", "niah_multikey", picks)) == "rope"
  yarn = dict(picks, **{"model.position.scaling": {"rope_type": "yarn"}})
  assert report.system(result("rope-s1", "multikey_yarn", "niah_multikey", yarn)) == "rope/yarn"
  # A variant that does not pick the task keeps its whole name.
  assert report.system(result("copy-rope-s0", "yarn@4", "copy", {})) == "rope/yarn@4"


def _with_examples(run, hits, digest="same"):
  """A copy result of run `run` whose 17-32 bucket holds per-example outcomes: the first
  `hits` of 100 examples right, and the 1-16 bucket all but the last right."""
  r = tasks_result(run)
  r["buckets"]["17-32"]["per_example"] = {
    "exact": "1" * hits + "0" * (100 - hits),
    "digest": digest,
  }
  r["buckets"]["1-16"]["per_example"] = {"exact": "1" * 99 + "0", "digest": "in"}
  r["config"] = {"eval": {"bootstrap": 200}, "data": {"seed": 3}}
  return r


def test_a_paired_task_difference_is_the_bootstrap_over_the_same_examples():
  from lcx.tools import bootstrap
  from lcx.tools.report import tasks

  a, b = _with_examples("copy-alibi", 60), _with_examples("copy-rope", 45)
  diff, ci = tasks.paired(a, b, "17-32", 200, 3)
  exact_a = np.array([1.0] * 60 + [0.0] * 40)
  exact_b = np.array([1.0] * 45 + [0.0] * 55)
  ones = np.ones(100)
  weights = bootstrap.resample_weights(100, 200, 3)
  assert (diff, ci) == bootstrap.paired_difference(exact_a, ones, exact_b, ones, weights)
  assert diff == pytest.approx(0.15) and ci[0] > 0  # A's right examples include all of B's
  assert tasks.paired(a, b, "1-16", 200, 3) == (0.0, [0.0, 0.0])
  other = _with_examples("copy-rope", 45, digest="other examples")
  assert tasks.paired(a, other, "17-32", 200, 3) is None
  assert tasks.paired(a, tasks_result("copy-rope"), "17-32", 200, 3) is None  # no outcomes


def test_task_pairs_meet_their_own_seeds_baseline_and_summarize_across_seeds():
  results = []
  for seed, (alibi, rope) in enumerate([(60, 45), (55, 50), (70, 20)]):
    results += [
      _with_examples(f"copy-alibi-s{seed}", alibi),
      _with_examples(f"copy-rope-s{seed}", rope),
    ]
  assert report.baselines(results) == ["alibi", "rope"]
  text = report.format_tables(results, "rope")
  each = text.split("## Task pairs: each result against a baseline")[1].split("## ")[0]
  assert each.count("| run/variant - copy-rope-s") == 3
  s2 = each.split("run/variant - copy-rope-s2/none")[1].splitlines()
  assert row_cells(s2[2])[0] == "copy-alibi-s2/none" and row_cells(s2[2])[2].startswith("+0.500")
  across = text.split("## Task pairs across seeds: each system against its seed's baseline")[1]
  row = next(line for line in across.splitlines() if line.startswith("| alibi "))
  cells = row_cells(row)
  assert cells[:2] == ["alibi", "0,1,2"]
  assert cells[2] == "+0.000 [+0.000, +0.000] 0/3"  # 1-16: the same outcomes in every seed
  assert cells[3].startswith("+0.233 [+0.050, +0.500]")  # (0.15 + 0.05 + 0.50) / 3
  assert cells[4] == "-"  # skipped bucket
  assert "Task pairs" not in report.format_tables(results)  # no baseline, no pairs
