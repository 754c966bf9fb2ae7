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
  assert len(clean["commit"]) == 40 and clean["dirty"] is False and clean["diff"] is None
  for path in files:
    if path.endswith((".json", ".md", ".csv", ".png")):
      (tmp_path / path).write_text("rewritten\n")
  (tmp_path / "notes.txt").write_text("untracked\n")
  assert provenance.source(where)["dirty"] is False
  for path in ("lcx/model.py", "configs/base.py", "experiments/e/sweep.py"):
    (tmp_path / path).write_text("changed = True\n")
    assert provenance.source(where)["dirty"] is True, path
    git(tmp_path, "checkout", "--", path)


def test_a_dirty_tree_is_named_by_a_digest_of_its_difference(tmp_path):
  """A result made on a copy of a working tree (a lent GPU) names the tree it ran: the same
  change gives the same digest, another change (or an untracked sweep file) another one."""
  committed_repo(tmp_path, {"lcx/model.py": "x = 1\n", "experiments/e/sweep.py": "z = 3\n"})
  where = str(tmp_path / "lcx")
  (tmp_path / "lcx/model.py").write_text("x = 2\n")
  first = provenance.source(where)
  assert first["dirty"] is True and len(first["diff"]) == 64
  assert provenance.source(where)["diff"] == first["diff"]
  (tmp_path / "lcx/model.py").write_text("x = 3\n")
  assert provenance.source(where)["diff"] != first["diff"]
  git(tmp_path, "checkout", "--", "lcx/model.py")
  (tmp_path / "experiments/f").mkdir()
  (tmp_path / "experiments/f/sweep.py").write_text("new = 1\n")
  untracked = provenance.source(where)
  assert untracked["dirty"] is True and untracked["diff"] not in (None, first["diff"])
  (tmp_path / "experiments/f/sweep.py").write_text("new = 2\n")
  assert provenance.source(where)["diff"] != untracked["diff"]


def test_outside_git_the_source_is_unknown(tmp_path):
  assert provenance.source(str(tmp_path)) == {"commit": None, "dirty": None, "diff": None}
