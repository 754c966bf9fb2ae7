"""The shared renderer and the tables built from long-form rows: seeds and ranks."""

import math

import pytest

from lcx.tools import report
from lcx.tools.report import tables
from tests.tools.report.results import lengths_result, row_cells, tasks_result, with_documents


def test_markdown_table_pads_and_aligns():
  assert report.markdown_table(["a", "bb"], [["x", "1"], ["yyy", "22"]]) == (
    "| a   | bb |\n|:----|---:|\n| x   |  1 |\n| yyy | 22 |"
  )


def test_seed_table_is_mean_and_range_over_seeds():
  results = [
    lengths_result(run=f"books-rope-s{seed}", losses={1: 2.0 + 0.1 * seed, 2: 2.5})
    for seed in (0, 1, 2)
  ] + [lengths_result(run="books-alibi-s0")]
  text = report.seed_tables(results)
  row = next(line for line in text.splitlines() if line.startswith("| books-rope/none"))
  cells = row_cells(row)
  ppl = [math.exp(2.0 + 0.1 * seed) for seed in (0, 1, 2)]
  assert cells[1] == "0,1,2"
  assert cells[2] == f"{sum(ppl) / 3:.2f} [{ppl[0]:.2f}, {ppl[2]:.2f}]"
  assert cells[3] == f"{math.exp(2.5):.2f} [{math.exp(2.5):.2f}, {math.exp(2.5):.2f}]"
  assert "books-alibi" not in text  # one seed: no spread to show
  assert report.seed_tables([lengths_result(run="rope")]) == ""


def _seeded(run, seed, variant="none", workdir=None):
  result = lengths_result(run=run, variant=variant, losses={1: 2.0 + 0.1 * seed, 2: 2.5})
  return {**result, "config": {"seed": seed}, "workdir": workdir or f"/runs/{run}"}


def test_a_seed_that_kept_its_first_name_joins_its_seeds_in_the_report():
  factors = "longrope@{}/longrope/factors.json"
  results = [
    _seeded("rope", 0),
    _seeded("rope", 0, factors.format("/runs/rope")),
    *(_seeded(f"rope-s{s}", s) for s in (1, 2)),
    *(_seeded(f"rope-s{s}", s, factors.format(f"/runs/rope-s{s}")) for s in (1, 2)),
    _seeded("alibi", 0),  # no seeded siblings: its name stays
    _seeded("nope", 1),  # its seed's name is taken: its name stays
    _seeded("nope-s1", 1),
    _seeded("nope-s2", 2),
  ]
  named = report.as_seeds(results)
  assert [r["run"] for r in named] == [
    "rope-s0", "rope-s0", "rope-s1", "rope-s2", "rope-s1", "rope-s2",
    "alibi", "nope", "nope-s1", "nope-s2",
  ]  # fmt: skip
  assert {r["variant"] for r in named} == {"none", "longrope@{workdir}/longrope/factors.json"}
  assert results[0]["run"] == "rope" and results[1]["variant"] == factors.format("/runs/rope")
  assert report.as_seeds(named) == named
  text = report.format_tables(results)
  across = text.split("## Perplexity across seeds")[1].split("\n## ")[0]
  seeds = {row_cells(line)[0]: row_cells(line)[1] for line in across.splitlines() if "|" in line}
  assert seeds["rope/none"] == seeds["rope/longrope@{workdir}/longrope/factors.json"] == "0,1,2"
  assert seeds["nope/none"] == "1,2" and "/runs/" not in text


def test_task_seed_table_is_mean_and_range_over_seeds():
  results = []
  for seed, accuracy in ((0, 0.2), (1, 0.5)):
    r = tasks_result(run=f"copy-rope-s{seed}")
    r["buckets"]["17-32"]["accuracy"] = accuracy
    results.append(r)
  results.append(tasks_result(run="copy-alibi-s0"))
  text = report.task_seed_tables(results)
  row = next(line for line in text.splitlines() if line.startswith("| copy-rope/none"))
  assert row_cells(row) == [
    "copy-rope/none",
    "0,1",
    "0.953 [0.953, 0.953]",
    "0.350 [0.200, 0.500]",
    "-",  # skipped in every seed
  ]
  assert "copy-alibi" not in text  # one seed: no spread to show
  assert report.task_seed_tables([tasks_result(run="copy")]) == ""
  assert "## Task exact match across seeds" in report.format_tables(results)


def test_task_error_rate_seed_table_is_mean_and_range_over_seeds():
  results = []
  for seed, error in ((0, 0.1), (1, 0.4), (2, 0.25)):
    r = tasks_result(run=f"flip-rope-s{seed}")
    r["buckets"]["1-16"].update(error_rate=error, error_rate_ci=[0.0, 1.0])
    results.append(r)
  results += [tasks_result(run=f"copy-rope-s{seed}") for seed in (0, 1)]  # no error rates
  text = report.task_seed_tables(results, "error_rate")
  assert text.startswith("Task copy: error rate on the scored answer tokens by task size")
  row = next(line for line in text.splitlines() if line.startswith("| flip-rope/none"))
  cells = row_cells(row)
  # 17-32 records no error rate (33-64 is skipped): each a column all the same, of "-".
  assert cells == ["flip-rope/none", "0,1,2", "0.250 [0.100, 0.400]", "-", "-"]
  header = next(line for line in text.splitlines() if line.startswith("| runs/variant"))
  assert row_cells(header)[2:] == ["1-16", "17-32", "33-64"]
  assert "copy-rope" not in text  # recorded before error rates: left out, not shown as "-"
  assert "## Task error rate across seeds" in report.format_tables(results)
  assert "## Task error rate across seeds" not in report.format_tables(results[3:])


def _task(task, system, seed, beyond, inside=None):
  """A task result of run TASK-SYSTEM-sSEED: exact match `beyond` past training (17-32), and
  `inside` at the training sizes (1-16) where given."""
  r = tasks_result(f"{task}-{system}-s{seed}")
  r["task"] = task
  r["buckets"]["17-32"]["accuracy"] = beyond
  if inside is not None:
    r["buckets"]["1-16"]["accuracy"] = inside
  return r


def test_mean_reciprocal_rank_across_tasks():
  # copy: nope 0.9 > alibi 0.5 > rope 0.1; sort: alibi 0.8 > nope = rope 0.2 (tie: rank 2)
  results = [
    _task("copy", "nope", 0, 0.8),
    _task("copy", "nope", 1, 1.0),
    _task("copy", "alibi", 0, 0.5),
    _task("copy", "rope", 0, 0.1),
    _task("sort", "alibi", 0, 0.8),
    _task("sort", "nope", 0, 0.2),
    _task("sort", "rope", 0, 0.2),
  ]
  table = report.rank_tables(results)
  rows = [line for line in table.splitlines() if line.startswith("| ") and "MRR" not in line]
  assert [row.split("|")[1].strip() for row in rows] == ["alibi", "nope", "rope"]
  mrr = {row.split("|")[1].strip(): float(row.split("|")[2]) for row in rows}
  assert mrr == pytest.approx(
    {"alibi": (1 / 2 + 1) / 2, "nope": (1 + 1 / 2) / 2, "rope": (1 / 3 + 1 / 2) / 2}, abs=1e-3
  )
  assert "0.900" in table  # nope on copy: the mean over its two seeds
  assert report.rank_tables(results[:4]) == ""  # one task: no ranking


def test_ranking_per_seed_ranks_each_seed_on_its_own():
  # seed 0: nope first on both tasks; seed 1: alibi first on copy, nope on sort
  results = [
    _task("copy", "nope", 0, 0.9),
    _task("copy", "alibi", 0, 0.5),
    _task("sort", "nope", 0, 0.8),
    _task("sort", "alibi", 0, 0.1),
    _task("copy", "nope", 1, 0.2),
    _task("copy", "alibi", 1, 0.7),
    _task("sort", "nope", 1, 0.6),
    _task("sort", "alibi", 1, 0.3),
  ]
  text = report.rank_seed_tables(results)
  rows = {row_cells(line)[0]: row_cells(line)[1:] for line in text.splitlines()[4:]}
  assert rows == {
    "nope": ["1.000 (1)", "0.750 (1)", "0.875"],  # seed 1: copy 1/2, sort 1
    "alibi": ["0.500 (2)", "0.750 (1)", "0.625"],  # tied with nope in seed 1: both rank 1
  }
  assert [line.split("|")[1].strip() for line in text.splitlines()[4:]] == ["nope", "alibi"]
  assert report.rank_seed_tables([r for r in results if r["run"].endswith("s0")]) == ""
  assert report.rank_seed_tables(results[:2] + results[4:6]) == ""  # one task: no ranking
  # seed 2: copy rope = alibi, sort rope = nope; alibi and nope lack a task each (count 0)
  seed_2 = [("copy", "rope"), ("copy", "alibi"), ("sort", "rope"), ("sort", "nope")]
  text = report.rank_seed_tables(results + [_task(t, s, 2, 0.4) for t, s in seed_2])
  rows = {row_cells(line)[0]: row_cells(line)[1:] for line in text.splitlines()[4:]}
  assert rows["rope"] == ["-", "-", "1.000 (1)", "0.333"]
  assert rows["nope"][2] == "0.500 (2)" and rows["alibi"][2] == "0.500 (2)"
  assert rows["nope"][3] == f"{(1 + 0.75 + 0.5) / 3:.3f}"
  assert report.rank_seed_tables(results + [_task("copy", "rope", 2, 0.4)]).count("seed 2") == 0
  assert "## Ranking per seed" in report.format_tables(results)


def test_a_task_no_system_learned_in_distribution_is_not_ranked_and_named_with_why():
  """Issue 27: past the training sizes, a task no system learned at them ranks noise."""

  learned = [
    _task("copy", "nope", 0, 0.8, inside=0.95),
    _task("copy", "rope", 0, 0.1, inside=0.5),  # one system learned copy: ranked
    _task("sort", "nope", 0, 0.2, inside=0.9),
    _task("sort", "rope", 0, 0.6, inside=0.9),
  ]
  unlearned = [
    _task("addition", "nope", 0, 0.0, inside=0.85),
    _task("addition", "nope", 1, 0.0, inside=0.97),  # mean over seeds 0.91: learned
    _task("parity", "nope", 0, 0.9, inside=0.6),  # nobody learned parity: its 0.9 past L is noise
    _task("parity", "rope", 0, 0.1, inside=0.7),
  ]
  text = report.rank_tables(learned + unlearned)
  header = next(line for line in text.splitlines() if line.startswith("| system"))
  assert [c.strip() for c in header.split("|")[3:-1]] == ["copy", "sort"]  # addition: 1 system
  assert text.endswith(
    "Not ranked: no system reaches exact match 0.9 at the training sizes (mean over seeds), "
    "so a ranking past them would rank noise: parity (best 0.700)."
  )
  assert report.rank_tables(unlearned[2:]) == ""  # one task: no ranking, so no note either
  assert report.rank_tables(unlearned[2:] + learned[:2]).startswith("Not ranked: ")


def _long(run, column, value, metric="score"):
  return {"run": run, "variant": "none", "bucket": column, "metric": metric, "value": value}


def test_seed_table_pivots_long_form_rows():
  rows = [
    _long("copy-s1", "1-8", 0.5),
    _long("copy-s1", "9-16", 0.25),
    _long("copy-s0", "1-8", 1.0),
    _long("copy-s0", "9-16", ""),  # not scored in seed 0: no mean across seeds
    _long("copy-s0", "17-32", 0.0, metric="other"),  # a column, but not this metric's value
    _long("sort-s0", "1-8", 0.75),  # one seed: no spread, left out
    _long("plain", "1-8", 0.75),  # no seed suffix
  ]
  columns, body = tables.seed_table(rows, "bucket", "score", tables.f3, order=len)
  assert columns == ["1-8", "9-16", "17-32"]
  assert body == [["copy/none", "0,1", "0.750 [0.500, 1.000]", "-", "-"]]
  assert tables.seed_table(rows[-2:], "bucket", "score", tables.f3) == ([], [])


def test_rank_table_is_the_mean_reciprocal_rank_of_the_means_over_seeds():
  rows = [
    {"task": "copy", "system": "a", "value": 0.2},
    {"task": "copy", "system": "a", "value": 0.6},  # mean 0.4: rank 2 after b
    {"task": "copy", "system": "b", "value": 0.5},
    {"task": "sort", "system": "a", "value": 0.9},
    {"task": "sort", "system": "b", "value": 0.9},  # a tie shares rank 1
    {"task": "sort", "system": "c", "value": 0.1},
    {"task": "solo", "system": "c", "value": 1.0},  # one system: not ranked
  ]
  tasks, body = tables.rank_table(rows)
  assert tasks == ["copy", "sort"]
  assert body == [
    ["b", "1.000", "0.500", "0.900"],
    ["a", "0.750", "0.400", "0.900"],
    # Rank 2 on sort (one distinct better mean), 0 for the copy it lacks: (1/2 + 0) / 2.
    ["c", "0.250", "-", "0.100"],
  ]
  assert tables.rank_table(rows[:3]) == ([], [])  # one task


def test_pivot_cells_read_one_results_long_form_rows():
  base = {"run": "rope", "variant": "none"}
  rows = [
    tables.row(base, length=64, metric="loss", value=2.0, ci=[1.9, 2.1]),
    tables.row(base, length=64, metric="perplexity", value=7.389),  # another metric
    tables.row(base, length=128, metric="loss", value=2.5),  # no interval
    tables.row(base, length=256, metric="skipped", note="max_len=128 < 256"),
    tables.row(base, length=512, metric="loss"),  # recorded without a value
  ]
  columns = [64, 128, 256, 512, 1024]
  assert tables.pivot_cells(rows, "length", columns, "loss", tables.f3) == [
    "2.000 [1.900, 2.100]",
    "2.500",
    "skipped",
    "-",
    "-",
  ]
  cells = tables.pivot_cells(rows, "length", columns, "loss", tables.f3, tables.f2, skipped=False)
  assert cells == ["2.000 [1.90, 2.10]", "2.500", "-", "-", "-"]


def test_runs_that_share_a_name_are_labelled_by_their_workdirs():
  """runs/toy/a and runs/other/a: two `a/none` rows with different numbers, and the baseline
  table subtracting one from the other, read as one run; they are toy/a and other/a."""
  toy = {**with_documents(lengths_result("a")), "workdir": "/x/runs/toy/a"}
  other = {**with_documents(lengths_result("a"), shift=1.0), "workdir": "/x/runs/other/a/"}
  alone = lengths_result("b")
  named = report.as_seeds([toy, other, alone])
  assert [r["run"] for r in named] == ["toy/a", "other/a", "b"]
  assert named[2] is alone and toy["run"] == "a"  # copies; a unique name stays
  assert report.as_seeds(named) == named
  text = report.format_tables([toy, other])
  table = text.split("## Perplexity by evaluation length")[1].split("\n## ")[0]
  labels = [row_cells(line)[0] for line in table.splitlines() if line.startswith("| ")]
  assert labels == ["run/variant", "toy/a/none", "other/a/none"]
  paired = text.split("Each result minus toy/a/none")[1].split("\n## ")[0]
  assert "| other/a/none " in paired and "| toy/a/none " not in paired
  deeper = [{**toy, "workdir": "/m1/runs/toy/a"}, {**toy, "workdir": "/m2/runs/toy/a"}]
  assert [r["run"] for r in report.as_seeds(deeper)] == ["m1/runs/toy/a", "m2/runs/toy/a"]
  assert [r["run"] for r in report.as_seeds([toy, {**toy, "workdir": "/x/runs/toy/a/"}])] == [
    "a",
    "a",
  ]  # one workdir, however written: one run
