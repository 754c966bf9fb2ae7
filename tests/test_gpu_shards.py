"""experiments/gpu_shards.sh: shards of a sweep on a lent accelerator, the first alone, a
deadline, and every shard's archive (partial where it stopped early) in one tar and the logs
in $OUT."""

import json
import os
import subprocess
import sys
import tarfile
import textwrap

from lcx.tools import sweep
from tests.helpers import ROOT, TINY_FLAGS
from tests.tools.report.results import lengths_result


def test_shards_bring_back_their_archives_a_partial_one_and_time_stamped_logs(tmp_path):
  """a and b finished earlier; c (a bad field) fails on a's shard, which still brings a back."""
  experiment = tmp_path / "experiments" / "toy"
  experiment.mkdir(parents=True)
  (experiment / "sweep.py").write_text(
    textwrap.dedent(f"""\
      from lcx.tools.sweep import Run

      CONFIG = {TINY_FLAGS[0].split("=", 1)[1]!r}

      def get_runs(arg):
        c = Run(CONFIG, {{"bogus": 1}}, needs=("a",))
        return {{"a": Run(CONFIG), "b": Run(CONFIG), "c": c}}
      """)
  )
  runs, out = tmp_path / "runs", tmp_path / "out"
  loaded = sweep.load(str(experiment), str(runs))
  for name in ("a", "b"):
    (runs / "toy" / name / "eval").mkdir(parents=True)
    (runs / "toy" / name / "eval" / "none.json").write_text(json.dumps(lengths_result(name)))
    (runs / "toy" / name / sweep.MARKER).write_text(json.dumps({"command": loaded.command(name)}))
  env = dict(
    os.environ,
    OUT=str(out),
    GPU_SHARDS_RUNS=str(runs),
    JAX_PLATFORMS="cpu",
    PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
  )
  done = subprocess.run(
    ["bash", str(ROOT / "experiments" / "gpu_shards.sh"), "experiments/toy", "2", "0", "1", "400"],
    cwd=tmp_path,
    env=env,
    capture_output=True,
    text=True,
    timeout=200,
  )
  assert done.returncode == 0, done.stderr
  assert "0 runs finished" in done.stdout  # a and b were done before; c failed
  assert "archives: shard-0-of-2-partial.tar.gz shard-1-of-2.tar.gz" in done.stdout
  with tarfile.open(out / "shards.tar") as shards:  # one file: a lent machine sends back 8
    assert shards.getnames() == ["shard-0-of-2-partial.tar.gz", "shard-1-of-2.tar.gz"]
    for archive, member in (("shard-0-of-2-partial", "a"), ("shard-1-of-2", "b")):
      with tarfile.open(fileobj=shards.extractfile(f"{archive}.tar.gz")) as tar:
        assert tar.getnames() == [f"results/{member}/none.json"]
  with tarfile.open(out / "logs.tar.gz") as tar:
    names = set(tar.getnames())
    assert {"logs/shard-0.log", "logs/shard-1.log", "logs/machine.txt"} <= names
    log = tar.extractfile("logs/shard-0.log").read().decode()
  assert "run toy/c failed with exit status 2" in log
  assert all(line.split(" ", 1)[0].isdigit() for line in log.splitlines())  # UNIX times
  assert sorted(os.listdir(out)) == ["logs.tar.gz", "shards.tar"]


def _done_toy(tmp_path, names):
  """experiments/toy with runs `names`, each finished before (a result and its marker)."""
  experiment = tmp_path / "experiments" / "toy"
  experiment.mkdir(parents=True)
  runs = ", ".join(f"{n!r}: Run(CONFIG)" for n in names)
  (experiment / "sweep.py").write_text(
    textwrap.dedent(f"""\
      from lcx.tools.sweep import Run

      CONFIG = {TINY_FLAGS[0].split("=", 1)[1]!r}

      def get_runs(arg):
        return {{{runs}}}
      """)
  )
  loaded = sweep.load(str(experiment), str(tmp_path / "runs"))
  for name in names:
    (tmp_path / "runs" / "toy" / name / "eval").mkdir(parents=True)
    (tmp_path / "runs" / "toy" / name / "eval" / "none.json").write_text(
      json.dumps(lengths_result(name))
    )
    (tmp_path / "runs" / "toy" / name / sweep.MARKER).write_text(
      json.dumps({"command": loaded.command(name)})
    )


def _gpu_shards(tmp_path, out, *args, **env):
  return subprocess.run(
    ["bash", str(ROOT / "experiments" / "gpu_shards.sh"), "experiments/toy", *map(str, args)],
    cwd=tmp_path,
    env=dict(
      os.environ,
      OUT=str(out),
      GPU_SHARDS_RUNS=str(tmp_path / "runs"),
      JAX_PLATFORMS="cpu",
      PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
      **env,
    ),
    capture_output=True,
    text=True,
    timeout=200,
  )


def test_a_queue_of_shards_runs_k_at_a_time_and_starts_none_late(tmp_path):
  """GPU_SHARDS_AT_ONCE=1: each shard's log begins after the one before ends; every archive
  comes back. Queued with GPU_SHARDS_LATE_S over the deadline: only the first shard starts."""
  _done_toy(tmp_path, ["a", "b", "c", "d"])
  queued = _gpu_shards(
    tmp_path, tmp_path / "q", 4, 0, 3, 400, GPU_SHARDS_AT_ONCE="1", GPU_SHARDS_FIRST_ALONE="0"
  )
  assert queued.returncode == 0, queued.stderr
  with tarfile.open(tmp_path / "q" / "shards.tar") as shards:
    assert shards.getnames() == [f"shard-{i}-of-4.tar.gz" for i in range(4)]
  with tarfile.open(tmp_path / "q" / "logs.tar.gz") as tar:
    logs = [tar.extractfile(f"logs/shard-{i}.log").read().decode() for i in range(4)]
  stamps = [[int(line.split(" ", 1)[0]) for line in log.splitlines()] for log in logs]
  assert all(stamps[i][0] >= stamps[i - 1][-1] for i in range(1, 4))
  late = _gpu_shards(
    tmp_path, tmp_path / "l", 4, 0, 3, 400, GPU_SHARDS_AT_ONCE="2", GPU_SHARDS_LATE_S="500"
  )
  assert late.returncode == 0, late.stderr
  assert "[gpu_shards] shards 1..3 not started: under 500 s left before the deadline" in (
    late.stdout
  )
  with tarfile.open(tmp_path / "l" / "shards.tar") as shards:
    assert shards.getnames() == ["shard-0-of-4.tar.gz"]
