"""experiments/gpu_tree.sh: a device call sends the code, not the committed outputs, and the
tree comes back exactly as it was."""

import subprocess

from lcx.run import provenance
from tests.helpers import ROOT, committed_repo, git

SCRIPT = str(ROOT / "experiments" / "gpu_tree.sh")
FILES = {
  "lcx/model.py": "x = 1\n",
  "experiments/toy/sweep.py": "RUNS = {}\n",
  "experiments/toy/results/a/none.json": "{}\n",
  "experiments/toy/report.md": "# toy\n",
  "experiments/toy/results.csv": "run\n",
  "experiments/toy/plot.png": "png",
  "README.md": "# readme\n",
}


def _tree(tmp_path):
  return committed_repo(tmp_path / "repo", FILES)


def _run(repo, mode: str):
  return subprocess.run(["bash", SCRIPT, mode], cwd=repo, capture_output=True, text=True)


def _travels(repo) -> set[str]:
  """What a device call sends: tracked files and the untracked ones git does not ignore."""
  tracked = git(repo, "ls-files").split()
  untracked = git(repo, "ls-files", "--others", "--exclude-standard").split()
  return set(tracked) | set(untracked)


def test_slim_sends_the_code_alone_with_a_clean_commit_and_restore_puts_the_tree_back(tmp_path):
  repo = _tree(tmp_path)
  exclude = (repo / ".git" / "info" / "exclude").read_text()
  done = _run(repo, "slim")
  assert done.returncode == 0, done.stderr
  assert _travels(repo) == {"lcx/model.py", "experiments/toy/sweep.py"}
  assert all((repo / path).read_text() == text for path, text in FILES.items())  # on disk
  assert provenance.source(str(repo))["dirty"] is False  # results written there stay clean
  (repo / "lcx" / "model.py").write_text("x = 2\n")  # while code changes still count
  assert provenance.source(str(repo))["dirty"] is True
  (repo / "lcx" / "model.py").write_text("x = 1\n")

  done = _run(repo, "restore")
  assert done.returncode == 0, done.stderr
  assert _travels(repo) == set(FILES)
  assert git(repo, "status", "--porcelain") == ""
  assert (repo / ".git" / "info" / "exclude").read_text() == exclude


def test_slim_refuses_a_staged_index_and_a_second_slim_and_restore_an_unslimmed_tree(tmp_path):
  repo = _tree(tmp_path)
  (repo / "lcx" / "new.py").write_text("y = 1\n")
  git(repo, "add", "lcx/new.py")
  done = _run(repo, "slim")
  assert (done.returncode, done.stderr.splitlines()) == (
    2,
    ["error: the index has staged changes; commit or unstage them first"],
  )
  assert "lcx/new.py" in git(repo, "diff", "--cached", "--name-only")  # left as it was
  git(repo, "reset", "-q")
  assert _run(repo, "slim").returncode == 0
  done = _run(repo, "slim")
  assert (done.returncode, done.stderr.strip()) == (
    2,
    "error: the tree is slim already; run experiments/gpu_tree.sh restore",
  )
  assert _run(repo, "restore").returncode == 0
  done = _run(repo, "restore")
  assert (done.returncode, done.stderr.strip()) == (
    2,
    "error: the tree is not slim; nothing to restore",
  )
  done = _run(repo, "shrink")
  assert (done.returncode, done.stderr.strip()) == (
    2,
    "error: mode='shrink' is not allowed; allowed: slim, restore",
  )
