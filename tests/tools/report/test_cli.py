"""`python -m lcx.tools.report`: prints and writes, never imports jax; bad input is one error
line."""

import os
import subprocess
import sys

import pytest

from lcx.tools import report
from tests.helpers import ROOT, run_lcx
from tests.tools.report.results import lengths_result, save, tasks_result, with_documents


def _cli(*args):
  return run_lcx([str(a) for a in args], module="lcx.tools.report", check=False, timeout=120)


def test_cli_prints_tables_and_never_imports_jax(tmp_path):
  save(tmp_path / "in" / "rope.json", lengths_result())
  save(tmp_path / "in" / "copy.json", tasks_result())
  proc = _cli(tmp_path / "in", f"--out={tmp_path / 'out'}", "--title=CLI")
  assert proc.returncode == 0, proc.stderr
  assert "## Perplexity by evaluation length" in proc.stdout
  assert "| rope/none   | 7.39 [7.24, 7.54] |" in proc.stdout
  assert f"  {tmp_path / 'out' / 'report.md'}" in proc.stdout
  assert open(tmp_path / "out" / "report.md").read().startswith("# CLI\n")
  code = (
    "import runpy, sys; sys.argv = ['lcx.tools.report', sys.argv[1], '--out=' + sys.argv[2]]\n"
    "try:\n  runpy.run_module('lcx.tools.report', run_name='__main__')\n"
    "except SystemExit as e:\n  assert not e.code, e.code\n"
    "bad = [m for m in ('jax', 'flax', 'lcx.model.decoder') if m in sys.modules]\n"
    "assert not bad, bad\nprint('clean')"
  )
  proc = subprocess.run(
    [sys.executable, "-c", code, str(tmp_path / "in"), str(tmp_path / "o2")],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == 0 and proc.stdout.endswith("clean\n"), proc.stderr


def test_a_full_disk_is_one_line_and_keeps_the_earlier_report(tmp_path):
  """report.md and results.csv went through their own PATH.tmp copy: an OSError traceback and
  the .tmp left behind; now lcx.files' RunFault, one line."""
  save(tmp_path / "in" / "rope.json", lengths_result())
  out = tmp_path / "out"
  assert _cli(tmp_path / "in", f"--out={out}", "--title=Earlier").returncode == 0
  earlier = (out / "report.md").read_bytes()
  os.symlink("/dev/full", out / "report.md.tmp")  # its write meets ENOSPC, as on a full disk
  proc = _cli(tmp_path / "in", f"--out={out}", "--title=Later")
  assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == (
    f"error: no space left on the device of {out} while writing {out / 'report.md'}; removed "
    "its partial copy. Free space, then run the same command again"
  )
  assert (out / "report.md").read_bytes() == earlier
  assert not [f for f in os.listdir(out) if f.endswith(".tmp")]


@pytest.mark.parametrize(
  "make_args, message",
  [
    (
      lambda d: [d / "missing.json", f"--out={d / 'out'}"],
      "missing.json: no such file or directory",
    ),
    (
      lambda d: [save(d / "x.json", {"schema": "other"}), f"--out={d / 'out'}"],
      "x.json: not an lcx result: schema='other'",
    ),
    (lambda d: [f"--out={d / 'out'}"], "give at least one PATH"),
    (
      lambda d: [save(d / "r.json", lengths_result())],
      "flag --out=None: Flag --out must have a value other than None.",
    ),
  ],
)
def test_cli_bad_input_is_one_line_and_writes_nothing(tmp_path, make_args, message):
  proc = _cli(*make_args(tmp_path))
  assert proc.returncode == 2, proc.stderr
  assert proc.stderr.strip().splitlines()[-1].startswith("error: "), proc.stderr
  assert message in proc.stderr and "Traceback" not in proc.stderr
  assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
  "result, flag, error",
  [
    (
      with_documents(lengths_result()),
      "--baseline=nope/none",
      "error: --baseline='nope/none' is not allowed; allowed: rope/none",
    ),
    (
      lengths_result(),
      "--effective_tolerance=-0.1",
      "error: --effective_tolerance=-0.1 is not allowed; allowed: >= 0 (nats/token)",
    ),
  ],
  ids=["unknown_baseline", "negative_effective_tolerance"],
)
def test_cli_refuses_a_bad_flag_naming_the_allowed(tmp_path, result, flag, error):
  save(tmp_path / "in" / "rope.json", result)
  proc = _cli(tmp_path / "in", f"--out={tmp_path / 'out'}", flag)
  assert proc.returncode == 2 and "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == error
  assert not (tmp_path / "out").exists()


def test_cli_warns_when_the_results_come_from_different_corpora(tmp_path):
  a, b, old = lengths_result("rope"), lengths_result("alibi"), lengths_result("nope")
  a["corpus"], b["corpus"] = "stdlib_py3.11.7_val0.1", "stdlib_py3.12.3_val0.1"
  for name, result in (("a", a), ("b", b), ("old", old)):  # old: written before `corpus`
    save(tmp_path / "in" / f"{name}.json", result)
  proc = _cli(tmp_path / "in", f"--out={tmp_path / 'out'}")
  assert proc.returncode == 0, proc.stderr
  assert proc.stderr == (
    "warning: the results compared come from different corpora, so their numbers do not "
    "compare: stdlib_py3.11.7_val0.1 (rope); stdlib_py3.12.3_val0.1 (alibi)\n"
  )
  b["corpus"] = a["corpus"]
  assert report.corpus_warning([a, b, old]) is None


def test_cli_warns_when_a_runs_results_come_from_different_checkpoints(tmp_path):
  """a retrained while its yarn@2 result (an evaluation `on` it) was kept: a/none from the new
  weights beside a/yarn@2 from the old ones."""
  new, old = lengths_result("a"), lengths_result("a", "yarn@2")
  new["checkpoint"], old["checkpoint"] = "f" * 32, "0" * 32
  unrecorded = lengths_result("a", "ntk@2")  # written before `checkpoint`
  for result in (new, old, unrecorded, {**lengths_result("b"), "checkpoint": "1" * 32}):
    save(tmp_path / "in" / f"{result['run']}-{result['variant']}.json", result)
  proc = _cli(tmp_path / "in", f"--out={tmp_path / 'out'}")
  assert proc.returncode == 0, proc.stderr
  assert proc.stderr == (
    "warning: a run's results come from different checkpoints, so its rows do not compare "
    f"(evaluate it again: lcx.main --mode=eval): a: yarn@2 (step 600 {'0' * 32}); none (step "
    f"600 {'f' * 32})\n"
  )
  old["checkpoint"] = new["checkpoint"]
  assert report.checkpoint_warning([new, old, unrecorded]) is None
