"""A result kind is one record: registering a toy kind is all it takes for load to accept it
and for report.md, results.csv, the plots and the index table to show it."""

import csv
import json

import pytest

from lcx.tools import report
from lcx.tools.report import kinds, tables
from tests.tools.report.results import common_fields, lengths_result, save, tasks_result


def _toy_check(result, where):
  if not 0 <= result["score"] <= 1:
    raise ValueError(f"{where}: score={result['score']!r} is not in [0, 1]")


def _toy_table(results, baseline, tolerance):
  del baseline, tolerance
  rows = [[report.label(r), f"{r['score']:.2f}"] for r in results]
  return report.markdown_table(["run/variant", "score"], rows) if rows else ""


def _toy_rows(result):
  return [tables.row(tables.row_base(result), metric="score", value=result["score"])]


def _toy_plot(results, path):
  with open(path, "w") as f:
    f.write(json.dumps([r["score"] for r in results]))
  return path


TOY = kinds.Kind(
  name="toy",
  keys=("score",),
  check=_toy_check,
  sections=(kinds.Section("Toy scores", _toy_table, "toy"),),
  rows=_toy_rows,
  describe=lambda r: "toy protocol",
  plots=(kinds.Plot("toy", "toy.json", _toy_plot),),
)


def _toy(run, score):
  return {**common_fields("toy", run, "none", 64), "score": score}


def test_a_toy_kind_is_one_record_seen_in_load_tables_csv_and_plots(tmp_path, monkeypatch):
  save(tmp_path / "in" / "rope.json", _toy("rope", 0.25))
  with pytest.raises(
    ValueError, match=r"kind='toy' is not allowed; allowed: lengths, tasks, passkey$"
  ):
    report.load(tmp_path / "in")
  monkeypatch.setitem(kinds.KINDS, "toy", TOY)
  save(tmp_path / "in" / "alibi.json", _toy("alibi", 0.5))
  save(tmp_path / "in" / "nope.json", lengths_result("nope"))
  results = report.load(tmp_path / "in")
  assert [(r["run"], r["kind"]) for r in results] == [
    ("alibi", "toy"),
    ("nope", "lengths"),
    ("rope", "toy"),
  ]
  text = report.format_tables(results)
  assert text.index("## Perplexity by evaluation length") < text.index(
    "## Toy scores"
  )  # KINDS order
  assert "## Toy scores\n\n| run/variant | score |\n|:------------|------:|\n" in text
  assert "| alibi/none  |  0.50 |\n| rope/none   |  0.25 |" in text
  rows = list(csv.DictReader(report.format_csv(results).splitlines()))
  toy_rows = [(r["run"], r["kind"], r["metric"], r["value"]) for r in rows if r["kind"] == "toy"]
  assert toy_rows == [("alibi", "toy", "score", "0.5"), ("rope", "toy", "score", "0.25")]
  assert len(rows) == 2 + 15  # and the lengths result's own rows, untouched
  written = report.write(results, str(tmp_path / "out"))
  assert json.loads(open(written["toy"]).read()) == [0.5, 0.25]  # only its kind's results
  md = open(written["report"]).read()
  assert "![toy](toy.json)" in md
  assert "| rope  | none    | toy     |  600 | rope   | none  |           64 | toy protocol" in md


def test_a_kind_names_what_its_results_lack_and_what_its_check_refuses(tmp_path, monkeypatch):
  monkeypatch.setitem(kinds.KINDS, "toy", TOY)
  lacking = {k: v for k, v in _toy("rope", 0.5).items() if k != "score"}
  path = save(tmp_path / "a" / "rope.json", lacking)
  with pytest.raises(ValueError, match=rf"^{path}: kind 'toy' result lacks score$"):
    report.load(tmp_path / "a")
  path = save(tmp_path / "b" / "rope.json", _toy("rope", 2.0))
  with pytest.raises(ValueError, match=rf"^{path}: score=2.0 is not in \[0, 1\]$"):
    report.load(tmp_path / "b")


def test_each_kinds_sections_take_any_mix_of_results():
  """write hands each record its own results, but the notebooks call the public tables with
  whatever load returned: a tasks result beside a lengths one changes neither's tables."""
  mixed = [lengths_result("rope"), tasks_result("copy")]
  for kind in kinds.KINDS.values():
    alone = [r for r in mixed if r["kind"] == kind.name]
    for section in kind.sections:
      assert section.build(mixed, "", 0.1) == section.build(alone, "", 0.1), section.heading
