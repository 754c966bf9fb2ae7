"""experiments/gpu_list.py and gpu_runs.sh: an experiment's runs on a lent accelerator, several
at a time, a deadline, and every finished run's eval JSONs brought back."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "experiments"))
import gpu_list  # noqa: E402


def test_the_list_has_every_run_not_done_with_a_rows_seeds_together():
  # scale_invariant:full: its committed results (all 24 runs since the CPU ran them) and a
  # skipped run are left out.
  committed = ROOT / "experiments" / "scale_invariant" / "full" / "results"
  run_here = {p.name for p in committed.iterdir()} if committed.is_dir() else set()
  names = [
    line.split()[1] for line in gpu_list.lines("scale_invariant:full", "/tmp/r", {"nope-s1"})
  ]
  left_out = run_here | {"nope-s1"}
  assert len(names) == 24 - len(left_out) and not left_out & set(names)  # 8 rows x 3 seeds
  # schemes:full, none of it run: every run listed, a row's seeds together, in seed order.
  lines = gpu_list.lines("schemes:full", "/tmp/r", skip={"nope-s1"})
  names = [line.split()[1] for line in lines]
  assert len(names) == 25 * 3 - 1 and "nope-s1" not in names and "nope-s2" in names
  stems = [name.rsplit("-s", 1)[0] for name in names]
  for stem in set(stems):
    at = [i for i, s in enumerate(stems) if s == stem]
    assert at == list(range(at[0], at[0] + len(at)))
    assert [names[i] for i in at] == sorted(names[i] for i in at)
  exp, run, *cmd = lines[0].split()
  assert (exp, run) == ("schemes/full", names[0])
  assert cmd[:3] == ["python3", "-m", "lcx.main"]
  assert f"--workdir=/tmp/r/schemes_full/{run}" in cmd and "steps=600" in lines[0]
  done = set((ROOT / "experiments" / "schemes" / "results").iterdir())
  assert done and not {p.name for p in done} & {
    line.split()[1] for line in gpu_list.lines("schemes", "/tmp/r", set())
  }  # runs with committed results are not listed


def test_runs_go_jobs_at_a_time_and_only_finished_ones_come_back(tmp_path):
  def fake(run, seconds, code=0):  # writes its eval JSON, then sleeps, then exits with `code`
    work = tmp_path / "runs" / run
    script = (
      f"import os, time; os.makedirs('{work}/eval'); open('{work}/eval/none.json', 'w')"
      f".write('{{}}'); time.sleep({seconds}); raise SystemExit({code})"
    )
    return f'exp {run} python3 -c "{script}" --workdir={work}'

  listing = tmp_path / "list.txt"
  listing.write_text(
    "\n".join([fake("a", 0), fake("b", 0, code=3), fake("c", 30), fake("d", 0)]) + "\n"
  )
  archive = tmp_path / "runs.tar.gz"
  done = subprocess.run(
    ["bash", str(ROOT / "experiments" / "gpu_runs.sh"), str(listing), "2", "4", str(archive)],
    capture_output=True,
    text=True,
    timeout=60,
  )
  assert done.returncode == 0, done.stderr
  out = tmp_path / "out"
  with tarfile.open(archive) as tar:  # one file comes back from the machine
    tar.extractall(out, filter="data")
  status = {line.split("\t")[1]: line.split("\t")[2] for line in (out / "status.tsv").open()}
  # job 0 runs a then c (stopped at the deadline: 124); job 1 runs b (fails) then d
  assert status == {"a": "0", "b": "3", "c": "124", "d": "0"}
  assert sorted(p.parent.name for p in (out / "results" / "exp").glob("*/none.json")) == ["a", "d"]
  assert json.loads((out / "results" / "exp" / "a" / "none.json").read_text()) == {}
  assert (out / "logs" / "exp" / "c.log").exists() and "2 of 4 runs finished" in done.stdout
