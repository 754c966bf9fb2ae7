"""launch.sh: help and unknown commands answer at once without a venv; installs are per-command
extras, reused when the venv already has a superset. A stub `python` records what would run."""

import shutil
import subprocess

import pytest

from tests.helpers import ROOT

STUB_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$STUB_LOG"
if [[ "$1 $2" == "-m venv" ]]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; fi
if [[ "$1 $2 $3" == "-m pip install" ]]; then sleep 1; fi  # long enough for a race to show
"""


@pytest.fixture
def checkout(tmp_path):
  """launch.sh and pyproject.toml copied to tmp_path: the repository's .venv is never touched."""
  for name in ("launch.sh", "pyproject.toml"):
    shutil.copy2(ROOT / name, tmp_path / name)
  stub = tmp_path / "stub_python"
  stub.write_text(STUB_PYTHON)
  stub.chmod(0o755)
  return tmp_path


def _start(checkout, *args, extras=None):
  """extras=None leaves LCX_EXTRAS unset, as on a fresh machine (launch.sh runs under set -u)."""
  env = {
    "PATH": "/usr/bin:/bin",
    "PYTHON": str(checkout / "stub_python"),
    "STUB_LOG": str(checkout / "calls.log"),
  }
  if extras is not None:
    env["LCX_EXTRAS"] = extras
  return subprocess.Popen(
    ["bash", str(checkout / "launch.sh"), *args],
    env=env,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )


def _calls(checkout):
  """The stub's calls since the last look."""
  log = checkout / "calls.log"
  calls = log.read_text().splitlines() if log.exists() else []
  log.unlink(missing_ok=True)
  return calls


def _launch(checkout, *args, extras=None):
  proc = _start(checkout, *args, extras=extras)
  out, err = proc.communicate(timeout=30)
  return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), _calls(checkout)


def test_help_prints_usage_without_a_venv(checkout):
  proc, calls = _launch(checkout, "help")
  assert proc.returncode == 0
  assert proc.stdout.startswith("usage: ./launch.sh COMMAND [FLAGS...]")
  assert "--distributed=auto" in proc.stdout
  assert "  generate     python -m lcx.generate --workdir=DIR --prompt=TEXT" in proc.stdout
  assert calls == [] and not (checkout / ".venv").exists()


def test_unknown_command_exits_2_with_usage(checkout):
  proc, calls = _launch(checkout, "frobnicate")
  assert proc.returncode == 2
  assert proc.stderr.startswith("unknown command: frobnicate\nusage: ./launch.sh COMMAND")
  assert calls == [] and not (checkout / ".venv").exists()


def _installs(calls):
  return [c.split(" -e ")[1] for c in calls if "pip install" in c]


@pytest.mark.slow  # the launcher in a subprocess, several times
def test_each_command_installs_its_extras_once(checkout):
  def pip(*args, extras=None):
    return _installs(_launch(checkout, *args, extras=extras)[1])

  proc, calls = _launch(checkout, "train", "--workdir=w")
  assert proc.returncode == 0, proc.stderr
  assert calls[0] == "-m venv .venv"
  assert _installs(calls) == ["."]  # train needs no torch
  assert calls[-1] == "-m lcx.main --mode=train --workdir=w"
  assert pip("test") == [".[test]"]
  assert pip("bench") == [".[test,bench]"]  # the union: test's packages stay
  assert pip("test") == [] and pip("bench") == [] and pip("eval") == [] and pip("data") == []
  assert _launch(checkout, "report", "r", "--out=o")[1] == ["-m lcx.report r --out=o"]
  assert _launch(checkout, "sweep", "experiments/x")[1] == ["-m lcx.sweep experiments/x"]
  assert _launch(checkout, "longrope", "--workdir=w")[1] == ["-m lcx.longrope --workdir=w"]
  assert _launch(checkout, "generate", "--workdir=w", "--prompt=a b")[1] == [
    "-m lcx.generate --workdir=w --prompt=a b"
  ]  # the base install
  assert pip("train", extras="gpu") == [".[test,bench,gpu]"]
  with open(checkout / "pyproject.toml", "a") as f:
    f.write("\n# changed\n")
  assert pip("quickstart") == ["."]  # a new pyproject.toml: install afresh


@pytest.mark.slow  # the launcher in a subprocess, several times
def test_concurrent_launches_install_once(checkout):
  procs = [_start(checkout, "test") for _ in range(3)]  # srun starts every task at once
  for proc in procs:
    proc.communicate(timeout=30)
    assert proc.returncode == 0
  calls = _calls(checkout)
  assert _installs(calls) == [".[test]"]
  assert calls.count("-m venv .venv") == 1
