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
    ["bash", str(ROOT / "experiments" / "gpu_shards.sh"), "experiments/toy", "2", "0", "1", "120"],
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
