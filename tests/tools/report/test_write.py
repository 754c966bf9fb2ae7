"""report.md and results.csv: every kind in order, plots only with data, deterministic."""

import csv
import math

import pytest

from lcx.tools import report
from tests.tools.report.results import PNG, lengths_result, passkey_result, save, tasks_result


def _all_results():
  return [
    lengths_result("rope", "none"),
    lengths_result("rope", "yarn@4", losses={1: 2.0, 2: 2.05, 4: 2.1}),
    lengths_result("nope", "none", losses={1: 2.1, 2: 3.0, 4: 5.0}),
    tasks_result(),
    passkey_result(),
  ]


def test_write_outputs_and_determinism(tmp_path):
  for i, r in enumerate(_all_results()):
    save(tmp_path / "in" / r["run"] / f"{i}.json", r)
  (tmp_path / "in" / "rope" / "config.json").write_text("{}")  # a run's other JSON: skipped
  results = report.load(tmp_path / "in")
  assert [(r["run"], r["variant"], r["kind"]) for r in results] == [
    ("copy", "none", "tasks"),
    ("nope", "none", "lengths"),
    ("rope", "none", "lengths"),
    ("rope", "none", "passkey"),
    ("rope", "yarn@4", "lengths"),
  ]
  written = report.write(results, str(tmp_path / "out"), title="Toy")
  assert set(written) == {
    "report",
    "csv",
    "perplexity",
    "loss_by_position",
    "variants",
    "tasks",
    "passkey",
  }
  for key in set(written) - {"report", "csv"}:  # task_errors: its test has error rates
    assert open(written[key], "rb").read(8) == PNG, key
  md = open(written["report"]).read()
  assert md.startswith("# Toy\n")
  for heading in (
    "## Perplexity by evaluation length",
    "## Bits per byte by evaluation length",
    "## Variants by evaluation length, per run",
    "## Loss by position",
    "## Task exact match by size",
    "## Passkey retrieval",
    "## Results",
  ):
    assert heading in md
  assert "![perplexity](perplexity.png)" in md and "![passkey](passkey.png)" in md
  assert (
    "| rope | yarn@4  | lengths |  600 | rope   | none  |           64 | windows/stream |" in md
  )
  with open(written["csv"]) as f:
    rows = list(csv.DictReader(f))
  # per lengths result: 3 lengths x (loss, ppl, bpb) + position buckets 1 + 2 + 3 = 15;
  # tasks: 2 buckets x (accuracy, token_accuracy) + 1 skipped = 5; passkey: 6 cells.
  assert len(rows) == 3 * 15 + 5 + 6
  yarn_ppl = [r for r in rows if r["variant"] == "yarn@4" and r["metric"] == "perplexity"]
  assert [r["length"] for r in yarn_ppl] == ["64", "128", "256"]
  assert float(yarn_ppl[0]["ci_lo"]) == pytest.approx(math.exp(1.98))
  assert yarn_ppl[0]["protocol"] == "windows" and yarn_ppl[0]["documents"] == "stream"
  assert yarn_ppl[0]["tokens"] == "4096" and yarn_ppl[0]["num_documents"] == "12"
  first = (open(written["report"], "rb").read(), open(written["csv"], "rb").read())
  again = report.write(report.load(tmp_path / "in"), str(tmp_path / "out"), title="Toy")
  assert (open(again["report"], "rb").read(), open(again["csv"], "rb").read()) == first


def test_only_plots_with_data_are_written(tmp_path):
  written = report.write([tasks_result()], str(tmp_path))
  assert set(written) == {"report", "csv", "tasks"}
  assert not (tmp_path / "perplexity.png").exists()
  assert "![tasks](tasks.png)" in open(written["report"]).read()


def test_no_results_still_make_a_report(tmp_path):
  written = report.write([], str(tmp_path), title="Empty")
  assert set(written) == {"report", "csv"}
  assert open(written["report"]).read() == (
    "# Empty\n\n0 results (schema `lcx.eval/1`), "
    "rendered by `python -m lcx.tools.report`. Cells: value "
    "[95% CI].\n\nNo results yet.\n"
  )
  assert open(written["csv"]).read() == ",".join(report.CSV_COLUMNS) + "\n"
