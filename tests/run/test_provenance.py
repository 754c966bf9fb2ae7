"""A result's source: the commit, and dirty only where code or configs differ from it."""

from lcx.run import provenance
from tests.helpers import committed_repo, git


def test_dirty_is_code_that_differs_not_the_results_a_sweep_rewrites(tmp_path):
  files = {
    "lcx/model.py": "x = 1\n",
    "configs/base.py": "y = 2\n",
    "experiments/e/sweep.py": "z = 3\n",
    "experiments/e/results/run/none.json": "{}\n",
    "experiments/e/full/results/run/none.json": "{}\n",
    "experiments/e/report.md": "table\n",
    "experiments/e/results.csv": "a,b\n",
    "experiments/e/perplexity.png": "png\n",
    "README.md": "text\n",
  }
  committed_repo(tmp_path, files)
  where = str(tmp_path / "lcx")  # lcx asks from inside its package
  clean = provenance.source(where)
  assert len(clean["commit"]) == 40 and clean["dirty"] is False
  for path in files:
    if path.endswith((".json", ".md", ".csv", ".png")):
      (tmp_path / path).write_text("rewritten\n")
  (tmp_path / "notes.txt").write_text("untracked\n")
  assert provenance.source(where)["dirty"] is False
  for path in ("lcx/model.py", "configs/base.py", "experiments/e/sweep.py"):
    (tmp_path / path).write_text("changed = True\n")
    assert provenance.source(where)["dirty"] is True, path
    git(tmp_path, "checkout", "--", path)


def test_outside_git_the_source_is_unknown(tmp_path):
  assert provenance.source(str(tmp_path)) == {"commit": None, "dirty": None}
