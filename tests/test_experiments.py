"""The committed experiments: every sweep loads in both sizes, and every README table is what
`./launch.sh report experiments/NAME/results` prints over the committed results, verbatim."""

import pathlib
import re

import pytest

from lcx import report, sweep
from tests.helpers import ROOT

EXPERIMENTS = sorted(p.parent for p in (ROOT / "experiments").glob("*/sweep.py"))


def _tables(markdown: str) -> list[str]:
  """The pipe tables of a markdown text, each as its lines joined."""
  tables, current = [], []
  for line in [*markdown.splitlines(), ""]:
    if line.startswith("|"):
      current.append(line)
    elif current:
      tables.append("\n".join(current))
      current = []
  return tables


def test_tables_finds_each_pipe_table():
  text = "intro\n| a | b |\n|:--|--:|\n| 1 | 2 |\n\ntext\n| c |\n|:--|"
  assert _tables(text) == ["| a | b |\n|:--|--:|\n| 1 | 2 |", "| c |\n|:--|"]


def test_every_reproduction_is_there():
  assert {p.name for p in EXPERIMENTS} >= {
    "alibi_table",
    "rope_extension",
    "nope_tasks",
    "prope",
    "drope",
  }


@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=lambda p: p.name)
@pytest.mark.parametrize("arg", ["", "full"])
def test_sweep_loads_with_runs_in_dependency_order(experiment, arg):
  loaded = sweep.load(str(experiment) + (f":{arg}" if arg else ""))
  assert loaded.runs
  seen = set()
  for name, run in loaded.runs.items():
    assert set(run.needs) <= seen, f"{name} runs before what it needs"
    seen.add(name)


@pytest.mark.parametrize(
  "experiment", [p for p in EXPERIMENTS if (p / "results").is_dir()], ids=lambda p: p.name
)
def test_readme_tables_are_the_report_of_the_committed_results(experiment: pathlib.Path):
  readme = (experiment / "README.md").read_text()
  # The effective context length (issue 32): every README reports it, with the tolerance its
  # command names, and its tables are that command's.
  (tolerance,) = re.findall(r"--effective_tolerance=([0-9.]+)", readme)
  printed = report.format_tables(
    report.load([str(experiment / "results")]), tolerance=float(tolerance)
  )
  tables = _tables(readme)
  assert tables, f"{experiment.name}/README.md has no table"
  missing = [t.splitlines()[0] for t in tables if t not in printed]
  assert not missing, f"{experiment.name}/README.md tables not in the report: {missing}"
  assert not list((experiment / "results").rglob("checkpoints")), "results hold checkpoints"
