"""The "tasks" kind: exact match and error rate tables, what a result ranks as."""

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
