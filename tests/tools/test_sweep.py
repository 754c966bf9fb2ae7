"""The sweep runner: commands, dependency order, shards, skip/resume markers, results copied and
reported. The end-to-end runs train two tiny models (TINY_FLAGS) for a few steps."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import time

import pytest

from lcx.tools import sweep
from tests.helpers import ROOT, TINY_FLAGS, run_lcx

# TINY_FLAGS as Run overrides ({"data.seq_len": "32", ...}); the config spec comes from Run.
TINY = {
  flag.split("=", 1)[0][len("--config.") :]: flag.split("=", 1)[1]
  for flag in TINY_FLAGS
  if flag.startswith("--config.")
}
CONFIG = TINY_FLAGS[0].split("=", 1)[1]  # configs/base.py:size=tiny


def _experiment(tmp_path, runs: str, name="toy"):
  """experiments/NAME/sweep.py under tmp_path whose get_runs returns the dict `runs` (source)."""
  directory = tmp_path / "experiments" / name
  directory.mkdir(parents=True)
  (directory / "sweep.py").write_text(
    textwrap.dedent(f"""\
      from lcx.tools.sweep import Run

      TINY = {TINY!r}
      CONFIG = {CONFIG!r}

      def get_runs(arg):
        return {runs}
      """)
  )
  return directory


TWO_RUNS = (
  "{'b': Run(CONFIG, dict(TINY, seed=2, **{'train.steps': STEPS_B, "
  "'eval.multipliers': (1, 2), 'train.checkpoint_every': 100}), needs=('a',)), "
  "'a': Run(CONFIG, dict(TINY, seed=1, **{'train.steps': 10, "
  "'eval.multipliers': (1, 2)}))}"
)


def _two_runs(tmp_path, steps_b=10):
  return _experiment(tmp_path, TWO_RUNS.replace("STEPS_B", str(steps_b)))


def _sweep(*args, popen=False):
  args = [str(a) for a in args]
  if popen:  # its own process group, so a test can kill the sweep and its run together
    return subprocess.Popen(
      [sys.executable, "-m", "lcx.tools.sweep", *args],
      cwd=ROOT,
      env=dict(os.environ, PYTHONUNBUFFERED="1", JAX_PLATFORMS="cpu"),
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
      start_new_session=True,
    )
  return run_lcx(args, module="lcx.tools.sweep", env={"JAX_PLATFORMS": "cpu"}, check=False)


def test_dry_run_prints_commands_in_dependency_order_and_writes_nothing(tmp_path):
  experiment = _experiment(
    tmp_path,
    "{'ft': Run(CONFIG, {'train.init_from': '{runs}/base', "
    "'eval.multipliers': (1, 2)}, needs=('base',)), "
    "'base': Run(CONFIG, {'seed': 3, 'model.x': True})}",
  )
  runs = tmp_path / "runs"
  proc = _sweep(experiment, "--dry_run", f"--runs_dir={runs}")
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.splitlines() == [
    "[sweep toy/base 1/2]",
    f"$ python -m lcx.main --mode=train_and_eval --config={CONFIG} "
    f"--workdir={runs}/toy/base --config.seed=3 --config.model.x=true",
    "[sweep toy/ft 2/2]",
    f"$ python -m lcx.main --mode=train_and_eval --config={CONFIG} "
    f"--workdir={runs}/toy/ft --config.train.init_from={runs}/toy/base "
    "'--config.eval.multipliers=(1,2)'",
  ]
  assert not runs.exists()
  assert sorted(os.listdir(experiment)) == ["sweep.py"]


def test_an_edited_sweep_file_is_read_as_it_is_now(tmp_path, monkeypatch):
  """Not from a cached .pyc: one keyed by the file's mtime in seconds and its size outlives an
  edit of the same length within the second (and litters experiments/NAME/)."""
  monkeypatch.setattr(sys, "dont_write_bytecode", False)
  experiment = _experiment(tmp_path, "{'a': Run(CONFIG, {'train.steps': 11})}")
  assert "--config.train.steps=11" in sweep.load(str(experiment)).command("a")
  path = experiment / "sweep.py"
  stat = path.stat()
  path.write_text(path.read_text().replace("11", "22"))
  os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the same second, the same size
  assert "--config.train.steps=22" in sweep.load(str(experiment)).command("a")
  assert sorted(p.name for p in experiment.iterdir()) == ["sweep.py"]


def test_a_sweep_file_may_declare_dataclasses(tmp_path):
  """A dataclass looks its module up in sys.modules while its class body is made: the loader
  puts the sweep's module there, as an import would (else AttributeError on NoneType)."""
  experiment = _experiment(tmp_path, "{'a': Run(CONFIG, {'train.steps': Row().steps})}")
  path = experiment / "sweep.py"
  path.write_text(
    "import dataclasses\n\n@dataclasses.dataclass(frozen=True)\nclass Row:\n  steps: int = 7\n\n"
    + path.read_text()
  )
  assert "--config.train.steps=7" in sweep.load(str(experiment)).command("a")


def test_full_argument_gets_its_own_runs_and_results(tmp_path):
  experiment = _experiment(
    tmp_path, "{'a': Run(CONFIG, {'train.steps': 1000 if arg == 'full' else 10})}"
  )
  loaded = sweep.load(f"{experiment}:full", str(tmp_path / "runs"))
  assert loaded.arg == "full" and loaded.runs_dir == str(tmp_path / "runs" / "toy_full")
  assert loaded.out_dir == str(experiment / "full")
  assert "--config.train.steps=1000" in loaded.command("a")


def test_done_runs_are_skipped_until_their_command_changes(tmp_path):
  experiment = _two_runs(tmp_path)
  runs = tmp_path / "runs"
  loaded = sweep.load(str(experiment), str(runs))
  (runs / "toy" / "a").mkdir(parents=True)
  marker = runs / "toy" / "a" / "sweep_done.json"
  marker.write_text(json.dumps({"command": loaded.command("a")}))
  proc = _sweep(experiment, "--dry_run", f"--runs_dir={runs}")
  assert proc.stdout.splitlines()[0] == (f"[sweep toy/a 1/2] done earlier ({marker}): skipped")
  assert proc.stdout.splitlines()[1] == "[sweep toy/b 2/2]"
  proc = _sweep(experiment, "--dry_run", f"--runs_dir={runs}", "--force_eval")
  lines = proc.stdout.splitlines()
  assert lines[0] == "[sweep toy/a 1/2]"
  assert lines[1].startswith(f"$ python -m lcx.main --mode=eval --config={CONFIG} ")
  assert lines[1].endswith(" --force") and lines[3].endswith(" --force")
  assert "--mode=train_and_eval" in lines[3]  # b is not done: it trains, then evaluates
  marker.write_text(json.dumps({"command": loaded.command("a")[:-1]}))  # one flag fewer
  proc = _sweep(experiment, "--dry_run", f"--runs_dir={runs}")
  assert proc.stdout.splitlines()[0] == "[sweep toy/a 1/2]"


def test_a_signal_says_whether_the_run_it_stopped_at_is_marked_done(tmp_path):
  """A run that finished while SIGINT reached the sweep alone is marked done, and the sweep's
  last line says so (it used to say "not marked done" either way)."""
  experiment = _two_runs(tmp_path)
  runs = tmp_path / "runs"
  loaded = sweep.load(str(experiment), str(runs))
  assert sweep.stopped_line(loaded, "a", signal.SIGINT) == (
    "[sweep] SIGINT during toy/a: stopped; it is not marked done, run the same command to resume"
  )
  (runs / "toy" / "a").mkdir(parents=True)
  (runs / "toy" / "a" / "sweep_done.json").write_text(json.dumps({"command": loaded.command("a")}))
  assert "stopped; it finished and is marked done, run" in sweep.stopped_line(
    loaded, "a", signal.SIGINT
  )


def test_a_run_starts_with_runs_done_and_an_eta_from_the_finished_runs():
  assert sweep.start_line("[sweep toy/a 1/3]", 0, 3, []) == "[sweep toy/a 1/3]"
  head = "[sweep toy/c 3/4]"  # b took 30 s, c 90 s: 60 s each for the two left
  assert sweep.start_line(head, 2, 4, [30.0, 90.0]) == f"{head} runs 2/4, ETA 2m00s"


def test_shards_keep_runs_with_what_they_need():
  run = sweep.Run("configs/base.py")
  runs = {
    "a": run,
    "c": run,
    "b": sweep.Run("configs/base.py", needs=("a",)),
    "d": sweep.Run("configs/base.py", needs=("c",)),
    "e": run,
  }
  assert sweep.shards(runs, 2) == [["a", "b", "e"], ["c", "d"]]
  assert sweep.shards(runs, 1) == [["a", "c", "b", "d", "e"]]
  assert sweep.shards(runs, 4) == [["a", "b"], ["c", "d"], ["e"], []]
  assert sweep.dependency_order({"b": runs["b"], "a": run}) == ["a", "b"]


def test_only_and_shard_select_runs(tmp_path):
  experiment = _experiment(tmp_path, "{'a': Run(CONFIG), 'b': Run(CONFIG), 'c': Run(CONFIG)}")
  runs = tmp_path / "runs"
  proc = _sweep(experiment, "--dry_run", f"--runs_dir={runs}", "--shard=1/2")
  assert [line for line in proc.stdout.splitlines() if line.startswith("[")] == [
    "[sweep toy/b 1/1]"
  ]
  proc = _sweep(experiment, "--dry_run", f"--runs_dir={runs}", "--only=c,a")
  assert [line for line in proc.stdout.splitlines() if line.startswith("[")] == [
    "[sweep toy/a 1/2]",
    "[sweep toy/c 2/2]",
  ]


@pytest.mark.parametrize(
  "runs, args, message",
  [
    (None, ["{exp}/../missing"], "no experiment directory"),
    ("{'a': Run(CONFIG)}", ["{exp}/.."], "sweep.py (it defines get_runs(arg)"),
    ("{'a': Run(CONFIG)}", ["{exp}", "--only=a,zz"], "--only=a,zz: unknown run(s) zz; runs: a"),
    (
      "{'a': Run(CONFIG)}",
      ["{exp}", "--shard=1/1"],
      "--shard='1/1' is not allowed; allowed: i/n with 0 <= i < n",
    ),
    ("{'a': Run(CONFIG)}", ["{exp}", "--shard=one"], "--shard='one' is not allowed; allowed: i/n"),
    ("{'a': Run(CONFIG, needs=('x',))}", ["{exp}"], "run 'a' needs unknown run(s) x; runs: a"),
    (
      "{'a': Run(CONFIG, needs=('b',)), 'b': Run(CONFIG, needs=('a',))}",
      ["{exp}"],
      "runs need each other in a cycle: a -> b -> a",
    ),
    (
      "{'a': Run('configs/missing.py')}",
      ["{exp}"],
      "run 'a': config file configs/missing.py not found",
    ),
    (
      "{'a': Run(CONFIG, mode='serve')}",
      ["{exp}"],
      "run 'a': mode='serve' is not allowed; allowed: train, eval, train_and_eval",
    ),
    ("{'a/b': Run(CONFIG)}", ["{exp}"], "run name 'a/b' must match"),
    (
      "{'a': Run(CONFIG), 'b': Run(CONFIG, needs=('a',))}",
      ["{exp}", "--only=b"],
      "run b needs a, which is neither selected nor done",
    ),
    ("{'a': {'config': CONFIG}}", ["{exp}"], "run 'a' is a dict; use lcx.tools.sweep.Run"),
    ("[]", ["{exp}"], "get_runs must return a non-empty dict"),
    ("{}", ["{exp}:full:x"], "no experiment directory"),
    ("{}", [], "give one experiment"),
  ],
)
def test_bad_input_is_one_error_line_before_anything_runs(tmp_path, runs, args, message):
  experiment = _experiment(tmp_path, runs) if runs else tmp_path / "experiments" / "toy"
  proc = _sweep(*[a.format(exp=experiment) for a in args], f"--runs_dir={tmp_path / 'runs'}")
  assert proc.returncode == 2, proc.stdout + proc.stderr
  assert proc.stderr.splitlines()[-1].startswith("error: ") and message in proc.stderr, proc.stderr
  assert "Traceback" not in proc.stderr and proc.stdout == ""
  assert not (tmp_path / "runs").exists()


def test_help_prints_the_usage_the_package_documents():
  """absl's --help prints the main module's docstring: `python -m lcx.tools.sweep` runs the
  package's __main__, which must show the package's usage, not its own one-line docstring."""
  proc = _sweep("--help")
  assert proc.stdout.startswith(sweep.__doc__.strip() + "\n"), proc.stdout[:300]
  assert "python -m lcx.tools.sweep experiments/NAME[:ARG] [--dry_run]" in sweep.__doc__
  assert "--[no]dry_run: Print each run's command; run and write nothing." in proc.stdout


def test_missing_get_runs_is_an_error(tmp_path):
  (tmp_path / "exp").mkdir()
  (tmp_path / "exp" / "sweep.py").write_text("RUNS = {}\n")
  proc = _sweep(tmp_path / "exp", "--dry_run")
  assert proc.returncode == 2
  assert (
    proc.stderr.strip() == f"error: {tmp_path}/exp/sweep.py defines no get_runs(arg) -> "
    "{name: Run}"
  )


@pytest.mark.slow
def test_a_failing_run_stops_the_sweep_naming_it(tmp_path):
  experiment = _experiment(
    tmp_path, "{'bad': Run(CONFIG, {'train.steps': -1}), 'never': Run(CONFIG)}"
  )
  runs = tmp_path / "runs"
  proc = _sweep(experiment, f"--runs_dir={runs}")
  assert proc.returncode == 1, proc.stdout + proc.stderr
  assert proc.stderr.splitlines()[-1].startswith(
    "error: run toy/bad failed with exit status 2; the sweep stopped"
  )
  assert "[sweep toy/never" not in proc.stdout
  assert not (runs / "toy" / "bad" / "sweep_done.json").exists()
  assert not (experiment / "report.md").exists()


def _copied(experiment, runs, run):
  """The run's eval/*.json and the sweep's copies, as {name: text} each."""
  source = {
    p: open(runs / "toy" / run / "eval" / p).read()
    for p in os.listdir(runs / "toy" / run / "eval")
    if p.endswith(".json")
  }
  copies = {
    p: open(experiment / "results" / run / p).read()
    for p in os.listdir(experiment / "results" / run)
  }
  return source, copies


def _committed_checkpoint(workdir) -> bool:
  directory = workdir / "checkpoints"
  return directory.is_dir() and any(
    (directory / d / "commit_success.txt").exists() for d in os.listdir(directory) if d.isdigit()
  )


@pytest.mark.slow
def test_sweep_runs_in_order_resumes_after_a_kill_reports_then_skips(tmp_path):
  """Killed while run b trains: the rerun skips a, resumes b from its checkpoint, copies every
  eval JSON, writes the report; a third call only skips."""
  experiment, runs = _two_runs(tmp_path, steps_b=300), tmp_path / "runs"
  proc = _sweep(experiment, f"--runs_dir={runs}", popen=True)
  deadline = time.time() + 120
  while not _committed_checkpoint(runs / "toy" / "b"):
    assert proc.poll() is None, proc.stdout.read()[-3000:]
    assert time.time() < deadline, "run b never saved a checkpoint"
    time.sleep(0.05)
  os.killpg(proc.pid, signal.SIGKILL)  # the sweep and the run it started, no chance to clean up
  proc.wait(timeout=30)
  first = proc.stdout.read()
  proc.stdout.close()
  assert first.index("[sweep toy/a 1/2]") < first.index("[sweep toy/b 2/2]")
  marker = json.loads((runs / "toy" / "a" / "sweep_done.json").read_text())
  assert marker["command"] == sweep.load(str(experiment), str(runs)).command("a")
  assert not (runs / "toy" / "b" / "sweep_done.json").exists()
  assert not (experiment / "report.md").exists()

  again = _sweep(experiment, f"--runs_dir={runs}")
  assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
  assert f"[sweep toy/a 1/2] done earlier ({runs}/toy/a/sweep_done.json): skipped" in again.stdout
  assert "[sweep toy/b 2/2]\n$ python -m lcx.main" in again.stdout
  assert "resumed from step" in again.stderr
  assert (runs / "toy" / "b" / "sweep_done.json").exists()
  for run in ("a", "b"):
    source, copies = _copied(experiment, runs, run)
    assert source and copies == source
  assert (experiment / "report.md").read_text().startswith("# toy\n")
  assert (experiment / "results.csv").read_text().startswith("run,variant,step,kind")
  assert not [d for d, _, _ in os.walk(experiment) if "checkpoints" in d]

  start = time.perf_counter()
  third = _sweep(experiment, f"--runs_dir={runs}")
  assert third.returncode == 0, third.stderr
  assert time.perf_counter() - start < 20  # nothing trained
  assert f"[sweep toy/b 2/2] done earlier ({runs}/toy/b/sweep_done.json): skipped" in third.stdout
  assert "lcx.main" not in third.stdout


def test_runs_on_another_runs_checkpoint_use_its_workdir(tmp_path):
  experiment = _experiment(
    tmp_path,
    "{'rope': Run(CONFIG, {}), "
    "'search': Run('', {'eval.longrope.target_len': 128}, "
    "needs=('rope',), mode='longrope', on='rope'), "
    "'variants': Run('', {'eval.variants': 'none,yarn@4'}, "
    "needs=('rope', 'search'), mode='eval', on='rope')}",
  )
  loaded = sweep.load(str(experiment), str(tmp_path / "runs"))
  rope = loaded.workdir("rope")
  assert loaded.command("search")[:2] == ["-m", "lcx.tools.longrope"]
  assert loaded.target("search") == loaded.target("variants") == rope
  assert not any(c.startswith("--config=") for c in loaded.command("variants"))
  assert loaded.workdir("variants") != rope  # its marker lives apart
  bad = _experiment(tmp_path, "{'a': Run(CONFIG), 'b': Run('', mode='eval', on='a')}", "bad")
  with pytest.raises(ValueError, match=r"run 'b': on='a' must be one of its needs"):
    sweep.load(str(bad), str(tmp_path / "runs"))


def _finished(experiment, runs, names):
  """Runs marked done with their current command and one eval JSON each, as a sweep leaves
  them; nothing trains."""
  from tests.tools.report.results import lengths_result

  loaded = sweep.load(str(experiment), str(runs))
  for name in names:
    workdir = runs / "toy" / name
    (workdir / "eval").mkdir(parents=True)
    (workdir / "eval" / "none.json").write_text(json.dumps(lengths_result(name)))
    (workdir / sweep.MARKER).write_text(json.dumps({"command": loaded.command(name)}))
  return loaded


def test_each_shard_packs_its_results_into_one_archive_and_leaves_the_report_alone(tmp_path):
  experiment = _experiment(tmp_path, "{'a': Run(CONFIG, TINY), 'b': Run(CONFIG, TINY)}")
  runs = tmp_path / "runs"
  _finished(experiment, runs, ["a", "b"])
  (experiment / "report.md").write_text("# the committed report\n")
  for i, run in enumerate(["a", "b"]):
    proc = _sweep(experiment, f"--runs_dir={runs}", f"--shard={i}/2")
    assert proc.returncode == 0, proc.stderr
    archive = experiment / "shards" / f"shard-{i}-of-2.tar.gz"
    assert f"packed 1 result files into {archive}" in proc.stdout
    with tarfile.open(archive) as tar:
      assert tar.getnames() == [f"results/{run}/none.json"]
      assert tar.extractfile(tar.getmember(f"results/{run}/none.json")).read() == (
        (runs / "toy" / run / "eval" / "none.json").read_bytes()
      )
  assert (experiment / "report.md").read_text() == "# the committed report\n"
  assert not (experiment / "results").exists()
  first = (experiment / "shards" / "shard-0-of-2.tar.gz").read_bytes()
  assert _sweep(experiment, f"--runs_dir={runs}", "--shard=0/2").returncode == 0
  assert (experiment / "shards" / "shard-0-of-2.tar.gz").read_bytes() == first  # no times

  merged = _sweep(experiment, f"--runs_dir={tmp_path / 'elsewhere'}", "--merge_shards")
  assert merged.returncode == 0, merged.stderr
  assert "unpacked 2 result files" in merged.stdout and "lcx.main" not in merged.stdout
  assert "[sweep] all 2 shards merged" in merged.stdout
  for run in ("a", "b"):
    assert (experiment / "results" / run / "none.json").read_bytes() == (
      (runs / "toy" / run / "eval" / "none.json").read_bytes()
    )
  assert "| a/none " in (experiment / "report.md").read_text()


def test_a_shard_that_stops_early_packs_the_runs_it_finished(tmp_path):
  """b fails (a bad field): the shard still brings back a, as a partial archive, which the whole
  shard's archive replaces once b runs."""
  experiment = _experiment(
    tmp_path, "{'a': Run(CONFIG, TINY), 'b': Run(CONFIG, dict(TINY, bogus=1), needs=('a',))}"
  )
  runs = tmp_path / "runs"
  loaded = _finished(experiment, runs, ["a"])
  proc = _sweep(experiment, f"--runs_dir={runs}", "--shard=0/2")
  assert proc.returncode == 1 and "run toy/b failed with exit status 2" in proc.stderr
  partial = experiment / "shards" / "shard-0-of-2-partial.tar.gz"
  assert f"(stopped early, 1 finished runs): packed 1 result files into {partial}" in proc.stderr
  with tarfile.open(partial) as tar:
    assert tar.getnames() == ["results/a/none.json"]
  assert not (experiment / "shards" / "shard-0-of-2.tar.gz").exists()

  _finished(experiment, runs, ["b"])
  assert sweep.done(loaded, "b")
  proc = _sweep(experiment, f"--runs_dir={runs}", "--shard=0/2")
  assert proc.returncode == 0, proc.stderr
  assert sorted(os.listdir(experiment / "shards")) == ["shard-0-of-2.tar.gz"]


def test_an_archive_over_the_limit_is_refused_and_nothing_is_written(tmp_path, monkeypatch):
  experiment = _experiment(tmp_path, "{'a': Run(CONFIG, TINY)}")
  loaded = _finished(experiment, tmp_path / "runs", ["a"])
  path = sweep.archive_path(loaded, (0, 2))
  assert sweep.pack(loaded, ["a"], path) == ["results/a/none.json"]
  size = os.path.getsize(path)
  os.remove(path)
  monkeypatch.setattr(sweep.archive, "MAX_ARCHIVE_BYTES", size - 1)
  with pytest.raises(ValueError, match=r"over the 0 MiB one shard may bring back; split the"):
    sweep.pack(loaded, ["a"], path)
  assert not os.listdir(os.path.dirname(path))


def test_a_merge_names_the_shards_it_lacks(tmp_path):
  """A report merged from some shards (a lent machine's time ran out) says which are partial or
  missing, so nobody reads it as the whole sweep."""
  loaded = sweep.load(str(_experiment(tmp_path, "{'a': Run(CONFIG, TINY)}")), str(tmp_path))
  shards = tmp_path / "experiments" / "toy" / "shards"
  shards.mkdir()
  for name in ("shard-0-of-4.tar.gz", "shard-1-of-4-partial.tar.gz", "shard-3-of-4.tar.gz"):
    (shards / name).write_bytes(b"")
  assert sweep.coverage(loaded) == (
    "[sweep] 2 of 4 shards merged whole; partial: 1; missing: 2: the report covers their "
    "finished runs only"
  )
  (shards / "shard-1-of-4.tar.gz").write_bytes(b"")  # the whole shard supersedes its partial
  (shards / "shard-2-of-4.tar.gz").write_bytes(b"")
  assert sweep.coverage(loaded) == "[sweep] all 4 shards merged"
  (shards / "shard-0-of-2.tar.gz").write_bytes(b"")
  assert sweep.coverage(loaded) == "[sweep] shard archives of 2 different splits: [2, 4]"
  with pytest.raises(ValueError, match=r"archives of 2 splits \(of 2, 4\) in .*: remove the stale"):
    sweep.unpack(loaded)
  for path in shards.iterdir():
    path.unlink()
  (shards / "notes.tar.gz").write_bytes(b"")
  assert "no archive named shard-i-of-n" in sweep.coverage(loaded)


def test_merge_refuses_foreign_members_and_missing_archives(tmp_path):
  experiment = _experiment(tmp_path, "{'a': Run(CONFIG, TINY)}")
  proc = _sweep(experiment, "--merge_shards")
  assert proc.returncode == 2 and "error: --merge_shards: no shard archive" in proc.stderr
  (experiment / "shards").mkdir()
  with tarfile.open(experiment / "shards" / "shard-0-of-2.tar.gz", "w:gz") as tar:
    tar.add(__file__, arcname="results/../../evil.json")
  proc = _sweep(experiment, "--merge_shards")
  assert proc.returncode == 2 and "member 'results/../../evil.json' is not" in proc.stderr
  assert not (experiment / "results").exists() and not (experiment / "report.md").exists()
  proc = _sweep(experiment, "--merge_shards", "--shard=0/2")
  assert proc.returncode == 2 and "--merge_shards runs nothing" in proc.stderr


class _FakeChild:
  """A run that ends after `polls` polls with `status`, logging what ran at once."""

  def __init__(self, run, polls, status, log, going):
    self.run, self.polls, self.status, self.log, self.going = run, polls, status, log, going
    self.stdout = iter([f"{run} says hello\n"])
    going.add(run)
    log.append(("start", run, frozenset(going)))

  def poll(self):
    self.polls -= 1
    if self.polls > 0:
      return None
    self.going.discard(self.run)
    return self.status

  def wait(self):
    return self.status


def _side_by_side(tmp_path, monkeypatch, runs: str, jobs: int, polls=None, status=None):
  """run_side_by_side over fake children: the start log (each start with the runs going then)
  and what it returns."""
  loaded = sweep.load(str(_experiment(tmp_path, runs)), str(tmp_path / "runs"))
  log, going = [], set()

  def launch(sweep_, run, command, signals, **popen):
    del sweep_, command, popen
    child = _FakeChild(run, (polls or {}).get(run, 2), (status or {}).get(run, 0), log, going)
    signals.children.add(child)
    return child

  monkeypatch.setattr(sweep.runner, "launch", launch)  # what run_side_by_side calls
  monkeypatch.setattr(sweep.runner.time, "sleep", lambda s: None)
  signals = sweep._Signals()
  got = sweep.run_side_by_side(loaded, list(loaded.runs), jobs, False, signals)
  return log, got, loaded


def test_jobs_start_each_run_once_its_needs_are_done_and_at_most_n_at_once(tmp_path, monkeypatch):
  runs = (
    "{'a': Run(CONFIG), 'b': Run(CONFIG), 'c': Run(CONFIG, needs=('a',)), "
    "'d': Run(CONFIG, needs=('a',)), 'e': Run(CONFIG, needs=('c', 'd'))}"
  )
  log, (failed, interrupted), loaded = _side_by_side(
    tmp_path, monkeypatch, runs, jobs=2, polls={"a": 2, "b": 9}
  )
  assert (failed, interrupted) == ([], [])
  starts = {run: going for _, run, going in log}
  assert starts["b"] == {"a", "b"}  # a and b at once
  assert "a" not in starts["c"] and "a" not in starts["d"]  # c and d after a
  assert [run for _, run, _ in log].index("e") == 4  # e last, after c and d
  assert max(len(going) for going in starts.values()) == 2
  assert all(sweep.done(loaded, r) for r in loaded.runs)  # each marked done as it ended


def test_jobs_let_runs_on_one_workdir_take_turns(tmp_path, monkeypatch):
  """Two evaluations `on` the same base never run at once: they would write one workdir."""
  runs = (
    "{'base': Run(CONFIG), "
    "'x': Run('', {'eval.variants': 'yarn'}, needs=('base',), mode='eval', on='base'), "
    "'y': Run('', {'eval.variants': 'ntk'}, needs=('base',), mode='eval', on='base'), "
    "'ft': Run(CONFIG, needs=('base',))}"
  )
  log, (failed, _), _ = _side_by_side(tmp_path, monkeypatch, runs, jobs=3, polls={"x": 5})
  starts = {run: going for _, run, going in log}
  assert failed == [] and starts["ft"] == {"x", "ft"}  # the fine-tune beside the evaluation
  assert "x" not in starts["y"]


def test_jobs_stop_starting_runs_after_a_failure(tmp_path, monkeypatch):
  runs = "{'a': Run(CONFIG), 'b': Run(CONFIG), 'c': Run(CONFIG, needs=('b',))}"
  log, (failed, _), loaded = _side_by_side(
    tmp_path, monkeypatch, runs, jobs=2, polls={"a": 6}, status={"b": 2}
  )
  assert failed == [("b", 2)] and [run for _, run, _ in log] == ["a", "b"]  # c never starts
  assert sweep.done(loaded, "a") and not sweep.done(loaded, "b")  # a, beside, ended and counts


def test_jobs_on_the_command_line_prefix_lines_and_name_the_failed_run(tmp_path):
  """a trains while b fails at its config check; the sweep waits for a, marks it done and names
  b; c, which needs b, never starts. --jobs=0 is one error line."""
  experiment = _experiment(
    tmp_path,
    "{'a': Run(CONFIG, dict(TINY, **{'train.steps': 10})), "
    "'b': Run(CONFIG, {'bogus': 1}), 'c': Run(CONFIG, TINY, needs=('b',))}",
  )
  runs = tmp_path / "runs"
  proc = _sweep(experiment, f"--runs_dir={runs}", "--jobs=0")
  assert proc.returncode == 2 and "error: --jobs=0: runs at once, at least 1" in proc.stderr
  proc = _sweep(experiment, f"--runs_dir={runs}", "--jobs=2")
  assert proc.returncode == 1
  assert "[sweep toy/b 2/3] starting beside 1 other runs" in proc.stdout
  assert "error: run toy/b failed with exit status 2; the sweep stopped once the runs" in (
    proc.stderr
  )
  assert "1 of 3 runs done" in proc.stderr
  lines = proc.stdout.splitlines()
  assert any(line.startswith("[a] ") and "step 10/10" in line for line in lines)
  assert any(line.startswith("[b] error:") for line in lines)
  assert (runs / "toy" / "a" / sweep.MARKER).exists() and not (runs / "toy" / "c").exists()


@pytest.mark.slow
def test_jobs_pass_sigterm_to_every_run_going(tmp_path):
  """SIGTERM to the sweep alone (a lent machine's deadline): both runs going save a checkpoint
  and stop unmarked, each named in a line, and the sweep exits 143."""
  steps = {"train.steps": 2000, "train.checkpoint_every": 20}
  experiment = _experiment(
    tmp_path,
    f"{{'a': Run(CONFIG, dict(TINY, **{steps})), 'b': Run(CONFIG, dict(TINY, **{steps}))}}",
  )
  runs = tmp_path / "runs"
  proc = _sweep(experiment, f"--runs_dir={runs}", "--jobs=2", popen=True)
  deadline = time.time() + 120
  while not all(_committed_checkpoint(runs / "toy" / r) for r in "ab"):
    assert proc.poll() is None, proc.stdout.read()[-3000:]
    assert time.time() < deadline, "a run never saved a checkpoint"
    time.sleep(0.05)
  proc.send_signal(signal.SIGTERM)
  out = proc.communicate(timeout=120)[0]
  assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
  for run in "ab":
    assert f"[sweep] SIGTERM during toy/{run}: stopped; it is not marked done" in out
    assert f"[{run}] [lcx] stopped at step" in out, out[-3000:]  # after saving a checkpoint
    assert not (runs / "toy" / run / sweep.MARKER).exists()


def test_a_childs_undecodable_output_neither_stops_its_reader_nor_blocks_it(capfd):
  """A byte that is not UTF-8, then more than a pipe holds: the reader goes on to the end (a
  reader that died would leave the child blocked on a full pipe, the sweep waiting forever)."""
  code = "import sys; sys.stdout.buffer.write(b'\\xff\\n' + b'x' * 200000 + b'\\nlast')"
  child = subprocess.Popen([sys.executable, "-c", code], **sweep.PIPED)
  thread = sweep._prefixed(child.stdout, "[a] ")
  assert child.wait(timeout=60) == 0
  thread.join(timeout=60)
  out = capfd.readouterr().out.splitlines()
  assert out[0] == "[a] \ufffd" and out[1] == "[a] " + "x" * 200000 and out[2] == "[a] last"


def test_sigterm_during_a_start_reaches_the_child_and_one_that_had_finished_is_done(tmp_path):
  """The signal can land after a run's start was decided but before its child is known: the
  child gets it at once. A child that had already exited 0 when SIGTERM came finished: it is
  marked done."""
  loaded = sweep.load(
    str(_experiment(tmp_path, "{'a': Run(CONFIG), 'b': Run(CONFIG)}")), str(tmp_path)
  )
  signals = sweep._Signals()
  signals.received = signal.SIGTERM
  child = sweep.launch(loaded, "a", ["-c", "import time; time.sleep(60)"], signals)
  assert child.wait(timeout=30) == -signal.SIGTERM
  assert sweep.finish(loaded, "a", child, signals) != 0 and not sweep.done(loaded, "a")

  signals = sweep._Signals()
  child = sweep.launch(loaded, "b", ["-c", "pass"], signals)
  os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet collected
  signals._handle(signal.SIGTERM, None)
  assert sweep.finish(loaded, "b", child, signals) == 0 and sweep.done(loaded, "b")
  assert not sweep.done(loaded, "a")


def test_jobs_skip_a_run_done_earlier_and_start_what_needs_it(tmp_path, monkeypatch, capsys):
  runs = "{'a': Run(CONFIG), 'b': Run(CONFIG, needs=('a',))}"
  (tmp_path / "x").mkdir()  # the same sweep elsewhere: its command for a, before the real one
  loaded = sweep.load(str(_experiment(tmp_path / "x", runs)), str(tmp_path / "runs"))
  (tmp_path / "runs" / "toy" / "a").mkdir(parents=True)
  (tmp_path / "runs" / "toy" / "a" / sweep.MARKER).write_text(
    json.dumps({"command": loaded.command("a")})
  )
  log, (failed, _), _ = _side_by_side(tmp_path, monkeypatch, runs, jobs=2)
  assert failed == [] and [run for _, run, _ in log] == ["b"]
  assert "[sweep toy/a 1/2] done earlier (" in capsys.readouterr().out


def _checkpoint(workdir, step: int, fingerprint: str) -> None:
  """A checkpoint folder as Orbax leaves it, as far as the sweep reads one: the step's folder and
  the metadata JSON with the fingerprint written at save time."""
  meta = workdir / "checkpoints" / str(step) / "meta"
  meta.mkdir(parents=True)
  (meta / "metadata").write_text(json.dumps({"fingerprint": fingerprint}))


ON_A = (
  "{'a': Run(CONFIG, TINY), "
  "'b': Run('', {'eval.variants': 'yarn@2'}, needs=('a',), mode='eval', on='a')}"
)


def _trained_a(tmp_path, fingerprint: str):
  """The sweep ON_A with run a trained (config.json, a checkpoint) and marked done."""
  experiment = _experiment(tmp_path, ON_A)
  loaded = sweep.load(str(experiment), str(tmp_path / "runs"))
  workdir = tmp_path / "runs" / "toy" / "a"
  workdir.mkdir(parents=True)
  (workdir / "config.json").write_text(json.dumps(_saved_config(loaded, "a")))
  _checkpoint(workdir, 10, fingerprint)
  (workdir / sweep.MARKER).write_text(json.dumps(sweep.record(loaded, "a")))
  return experiment, loaded, workdir


def _saved_config(loaded, run) -> dict:
  """The resolved config run `run`'s flags give lcx.main, nested as its config.json holds it."""
  nested: dict = {}
  for field, value in sweep.resolved_config(loaded, run).items():
    *parents, leaf = field.split(".")
    node = nested
    for key in parents:
      node = node.setdefault(key, {})
    node[leaf] = value
  return nested


def test_a_run_on_a_retrained_checkpoint_is_done_again_saying_why(tmp_path, capsys):
  """b evaluated a's checkpoint; a is removed and retrained (as the sweep advises for a changed
  run): b's marker names the checkpoint it read, so b runs again, and says why."""
  experiment, loaded, workdir = _trained_a(tmp_path, "old0000000000000")
  b = tmp_path / "runs" / "toy" / "b"
  b.mkdir(parents=True)
  (b / sweep.MARKER).write_text(json.dumps(sweep.record(loaded, "b")))
  assert json.loads((b / sweep.MARKER).read_text())["checkpoint"] == "step 10 old0000000000000"
  assert sweep.done(loaded, "b")

  shutil.rmtree(workdir / "checkpoints")  # retrained to the same step: a new fingerprint
  _checkpoint(workdir, 10, "new1111111111111")
  assert sweep.done(loaded, "a") and not sweep.done(loaded, "b")
  why = (
    "[sweep] toy/b: the checkpoint of toy/a it read changed (step 10 old0000000000000 -> step 10 "
    "new1111111111111) since it finished:"
  )
  proc = _sweep(experiment, "--dry_run", f"--runs_dir={tmp_path / 'runs'}")
  assert proc.stdout.splitlines()[1:3] == ["[sweep toy/b 2/2]", f"{why} would run again"]

  child = sweep.launch(loaded, "b", ["-c", "pass"], sweep._Signals())
  assert child.wait(timeout=60) == 0
  assert f"{why} running again" in capsys.readouterr().out
  assert sweep.finish(loaded, "b", child, sweep._Signals()) == 0 and sweep.done(loaded, "b")


def test_a_marker_from_before_checkpoints_were_recorded_counts_a_later_checkpoint(tmp_path):
  """A marker that holds only the command (written before the sweep recorded checkpoints): a
  checkpoint saved after it is a retrained one."""
  _, loaded, workdir = _trained_a(tmp_path, "old0000000000000")
  marker = tmp_path / "runs" / "toy" / "b" / sweep.MARKER
  marker.parent.mkdir(parents=True)
  marker.write_text(json.dumps({"command": loaded.command("b")}))
  checkpoint = workdir / "checkpoints" / "10"
  os.utime(checkpoint, (time.time() - 60, time.time() - 60))
  assert sweep.done(loaded, "b")
  os.utime(checkpoint, (time.time() + 60, time.time() + 60))
  assert sweep.changed_since_done(loaded, "b") == [
    "toy/a saved its checkpoint (step 10 old0000000000000) after it ran"
  ]


def _config_file(path, lr: float, layers: int) -> None:
  path.parent.mkdir(exist_ok=True)
  path.write_text(
    textwrap.dedent(f"""\
      from lcx.config import defaults

      def get_config(arg=None):
        config = defaults.get_config(arg)
        config.train.lr = {lr}
        config.model.num_layers = {layers}
        return config
      """)
  )


def test_an_edited_config_file_is_a_changed_run(tmp_path, monkeypatch):
  """The command names a config file, whose edits the command does not show: the marker holds
  the resolved config's digest and fields, so an edit reruns a run without checkpoints, and
  refuses a trained one, naming the fields, as a changed command does."""
  monkeypatch.setattr(sweep.plan, "ROOT", tmp_path)  # config paths are relative to it
  config_file = tmp_path / "configs" / "mine.py"
  _config_file(config_file, 0.001, 2)
  experiment = _experiment(tmp_path, "{'a': Run('configs/mine.py:size=tiny', TINY)}")
  loaded = sweep.load(str(experiment), str(tmp_path / "runs"))
  workdir = tmp_path / "runs" / "toy" / "a"
  workdir.mkdir(parents=True)
  (workdir / sweep.MARKER).write_text(json.dumps(sweep.record(loaded, "a")))
  assert sweep.done(loaded, "a")

  _config_file(config_file, 0.0025, 3)  # another size: no stale bytecode cache is read
  assert sweep.changed_since_done(loaded, "a") == [
    "its config changed: model.num_layers 2 -> 3, train.lr 0.001 -> 0.0025"
  ]
  assert sweep.select(loaded, [], (0, 1)) == ["a"]  # no checkpoint: it runs again
  _checkpoint(workdir, 10, "f" * 16)
  with pytest.raises(ValueError) as error:
    sweep.select(loaded, [], (0, 1))
  assert str(error.value) == (
    "run toy/a changed since it trained: its config's model.num_layers 2 -> 3, train.lr 0.001 "
    "-> 0.0025, and runs/toy/a holds the old settings' checkpoints; remove that directory to "
    "train it again, or restore the old settings"
  )


def test_a_fine_tune_of_a_retrained_base_is_refused_while_it_holds_checkpoints(tmp_path):
  """ft started from base's checkpoint (train.init_from): base retrained, ft's weights come
  from the old one, so a trained ft is refused naming the checkpoint, and one without
  checkpoints trains again."""
  experiment = _experiment(
    tmp_path,
    "{'base': Run(CONFIG, TINY), "
    "'ft': Run(CONFIG, dict(TINY, **{'train.init_from': '{runs}/base@10'}), "
    "needs=('base',))}",
  )
  loaded = sweep.load(str(experiment), str(tmp_path / "runs"))
  base, ft = tmp_path / "runs" / "toy" / "base", tmp_path / "runs" / "toy" / "ft"
  _checkpoint(base, 10, "old0000000000000")
  _checkpoint(base, 20, "later00000000000")  # not the step ft starts from
  ft.mkdir(parents=True)
  (ft / sweep.MARKER).write_text(json.dumps(sweep.record(loaded, "ft")))
  assert json.loads((ft / sweep.MARKER).read_text())["checkpoint"] == "step 10 old0000000000000"
  _checkpoint(ft, 5, "ft00000000000000")
  assert sweep.select(loaded, [], (0, 1)) == ["base", "ft"] and sweep.done(loaded, "ft")

  shutil.rmtree(base / "checkpoints" / "10")
  _checkpoint(base, 10, "new1111111111111")
  why = (
    "the checkpoint of toy/base it read changed (step 10 old0000000000000 -> step 10 "
    "new1111111111111)"
  )
  with pytest.raises(ValueError) as error:
    sweep.select(loaded, [], (0, 1))
  assert str(error.value) == (
    f"run toy/ft changed since it trained: {why}, and {ft} holds the old settings' checkpoints; "
    "remove that directory to train it again, or restore the old settings"
  )
  shutil.rmtree(ft / "checkpoints")
  assert sweep.select(loaded, [], (0, 1)) == ["base", "ft"]
  assert sweep.changed_since_done(loaded, "ft") == [why]


def test_collect_sets_aside_results_of_other_weights_the_run_no_longer_writes(tmp_path, capsys):
  """A retrained run's copy overwrites its same-named results; one of the old weights that the
  new evaluation does not write (another variant name) would be read beside the new ones by
  every report: it moves to results/RUN/history/ (never over a file there), while a leftover of
  the same checkpoint stays."""
  from lcx.tools.sweep import archive

  experiment = _experiment(tmp_path, "{'a': Run(CONFIG, TINY)}")
  plan = sweep.load(str(experiment), str(tmp_path / "runs"))
  evaluated = tmp_path / "runs" / "toy" / "a" / "eval"
  evaluated.mkdir(parents=True)
  (evaluated / "none.json").write_text(json.dumps({"checkpoint": "new", "v": 2}))
  results = experiment / "results" / "a"
  (results / "history").mkdir(parents=True)
  (results / "none.json").write_text(json.dumps({"checkpoint": "old", "v": 1}))
  (results / "yarn@4.json").write_text(json.dumps({"checkpoint": "old"}))
  (results / "ntk@4.json").write_text(json.dumps({"checkpoint": "new"}))
  (results / "history" / "yarn@4.json").write_text("an earlier set-aside")
  assert archive.collect(plan) == [str(results / "none.json")]
  assert json.loads((results / "none.json").read_text()) == {"checkpoint": "new", "v": 2}
  assert sorted(os.listdir(results)) == ["history", "none.json", "ntk@4.json"]
  assert (results / "history" / "yarn@4.json").read_text() == "an earlier set-aside"
  assert json.loads((results / "history" / "yarn@4.2.json").read_text()) == {"checkpoint": "old"}
  err = capsys.readouterr().err
  assert f"{results / 'yarn@4.json'}: scored checkpoint old, not the run's new: moved to " in err


def test_a_merge_sets_aside_results_of_other_weights_no_archive_holds(tmp_path, capsys):
  """A merge of shards trained again (new weights) over results an earlier merge wrote: a result
  no archive holds that scored other weights moves to history/, as collect does; one that scored
  the archive's weights stays."""
  experiment = _experiment(tmp_path, "{'a': Run(CONFIG, TINY)}")
  plan = sweep.load(str(experiment), str(tmp_path / "runs"))
  (experiment / "shards").mkdir()
  member = tmp_path / "none.json"
  member.write_text(json.dumps({"checkpoint": "new"}))
  with tarfile.open(experiment / "shards" / "shard-0-of-1.tar.gz", "w:gz") as tar:
    tar.add(member, arcname="results/a/none.json")
  results = experiment / "results" / "a"
  results.mkdir(parents=True)
  (results / "none.json").write_text(json.dumps({"checkpoint": "old"}))
  (results / "yarn@4.json").write_text(json.dumps({"checkpoint": "old"}))
  (results / "ntk@4.json").write_text(json.dumps({"checkpoint": "new"}))
  assert sweep.unpack(plan) == [str(results / "none.json")]
  assert sorted(os.listdir(results)) == ["history", "none.json", "ntk@4.json"]
  assert json.loads((results / "none.json").read_text()) == {"checkpoint": "new"}
  assert json.loads((results / "history" / "yarn@4.json").read_text()) == {"checkpoint": "old"}
  assert "scored checkpoint old, not the run's new: moved to" in capsys.readouterr().err
