"""launch.sh: help and unknown commands answer at once without a venv; installs are per-command
extras, reused when the venv already has a superset; commands run with glibc's malloc on
transparent huge pages, which cuts XLA:CPU's per-step page faults. A stub `python` records what
would run."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.helpers import ROOT

STUB_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$STUB_LOG"
echo "$PWD" >> "$STUB_LOG.cwd"
echo "${PYTHONPATH-unset}" > "$STUB_LOG.pythonpath"
echo "${GLIBC_TUNABLES-unset}" > "$STUB_LOG.env"
if [[ "$1 $2" == "-m venv" ]]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; fi
if [[ "$1 $2 $3" == "-m pip install" ]]; then sleep 1; fi  # long enough for a race to show
"""


@pytest.fixture
def checkout(tmp_path):
  """launch.sh and pyproject.toml copied to tmp_path: the repository's .venv is never touched."""
  for name in ("launch.sh", "pyproject.toml", "constraints.txt"):
    shutil.copy2(ROOT / name, tmp_path / name)
  stub = tmp_path / "stub_python"
  stub.write_text(STUB_PYTHON)
  stub.chmod(0o755)
  return tmp_path


def _start(checkout, *args, extras=None, env=None, cwd=None):
  """extras=None leaves LCX_EXTRAS unset, as on a fresh machine (launch.sh runs under set -u)."""
  env = {
    "PATH": "/usr/bin:/bin",
    "PYTHON": str(checkout / "stub_python"),
    "STUB_LOG": str(checkout / "calls.log"),
    **(env or {}),
  }
  if extras is not None:
    env["LCX_EXTRAS"] = extras
  return subprocess.Popen(
    ["bash", str(checkout / "launch.sh"), *args],
    env=env,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
    cwd=cwd,
  )


def _calls(checkout):
  """The stub's calls since the last look."""
  log = checkout / "calls.log"
  calls = log.read_text().splitlines() if log.exists() else []
  log.unlink(missing_ok=True)
  return calls


def _launch(checkout, *args, extras=None, env=None, cwd=None):
  proc = _start(checkout, *args, extras=extras, env=env, cwd=cwd)
  out, err = proc.communicate(timeout=30)
  return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), _calls(checkout)


def test_help_prints_usage_without_a_venv(checkout):
  proc, calls = _launch(checkout, "help")
  assert proc.returncode == 0
  assert proc.stdout.startswith("usage: ./launch.sh COMMAND [FLAGS...]")
  assert "--distributed=auto" in proc.stdout
  assert "  generate     python -m lcx.tools.generate --workdir=DIR --prompt=TEXT" in proc.stdout
  assert "(sinusoidal, rope, alibi, t5, nope)" in proc.stdout  # what quickstart trains
  assert (
    "  config       python -m lcx.config.listing [--config=...]: every config field" in proc.stdout
  )
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
  assert calls[0] == f"-m venv {checkout / '.venv'}"
  assert _installs(calls) == ["."]  # train needs no torch
  assert "pip install --quiet --disable-pip-version-check -c constraints.txt -e ." in calls[1]
  assert calls[-1] == "-m lcx.main --mode=train --workdir=w"
  assert pip("test") == [".[test]"]
  assert pip("bench") == [".[test,bench]"]  # the union: test's packages stay
  assert pip("test") == [] and pip("bench") == [] and pip("eval") == [] and pip("data") == []
  assert _launch(checkout, "report", "r", "--out=o")[1] == ["-m lcx.tools.report r --out=o"]
  assert _launch(checkout, "config", "--config=c.py")[1] == ["-m lcx.config.listing --config=c.py"]
  assert _launch(checkout, "sweep", "experiments/x")[1] == ["-m lcx.tools.sweep experiments/x"]
  assert _launch(checkout, "longrope", "--workdir=w")[1] == ["-m lcx.tools.longrope --workdir=w"]
  assert _launch(checkout, "generate", "--workdir=w", "--prompt=a b")[1] == [
    "-m lcx.tools.generate --workdir=w --prompt=a b"
  ]  # the base install
  assert pip("train", extras="gpu") == [".[test,bench,gpu]"]
  with open(checkout / "pyproject.toml", "a") as f:
    f.write("\n# changed\n")
  assert pip("quickstart") == ["."]  # a new pyproject.toml: install afresh
  with open(checkout / "constraints.txt", "a") as f:
    f.write("# changed\n")
  assert pip("quickstart") == ["."]  # new pins: install afresh
  proc, calls = _launch(checkout, "train", env={"LCX_CONSTRAINTS": ""})
  assert _installs(calls) == ["."] and " -c " not in calls[0]  # pyproject's ranges


@pytest.mark.slow  # the launcher in a subprocess, several times
def test_concurrent_launches_install_once(checkout):
  procs = [_start(checkout, "test") for _ in range(3)]  # srun starts every task at once
  for proc in procs:
    proc.communicate(timeout=30)
    assert proc.returncode == 0
  calls = _calls(checkout)
  assert _installs(calls) == [".[test]"]
  assert calls.count(f"-m venv {checkout / '.venv'}") == 1


def test_commands_run_in_the_callers_directory(checkout):
  """Launched from elsewhere (a SLURM script's directory), the venv and its install stay in the
  checkout, but the command runs where the user is: --workdir=runs/x lands there."""
  elsewhere = checkout / "jobs"
  elsewhere.mkdir()
  proc, calls = _launch(checkout, "train", "--workdir=runs/x", cwd=elsewhere)
  assert proc.returncode == 0, proc.stderr
  cwds = (checkout / "calls.log.cwd").read_text().splitlines()
  assert [c.split()[:3] for c in calls] == [["-m", "venv", str(checkout / ".venv")]] + [
    ["-m", "pip", "install"],
    ["-m", "lcx.main", "--mode=train"],
  ]
  assert cwds == [str(checkout), str(checkout), str(elsewhere)]  # venv, pip: in the checkout
  assert not (elsewhere / ".venv").exists()
  assert (checkout / "calls.log.pythonpath").read_text().strip() == str(checkout)  # its own lcx
  (checkout / "calls.log.cwd").unlink()
  assert _launch(checkout, "test", "-q", cwd=elsewhere)[0].returncode == 0
  assert (checkout / "calls.log.cwd").read_text().splitlines()[-1] == str(checkout)


def _default_tunables():
  return re.search(r"^LCX_GLIBC_TUNABLES=(\S+)$", (ROOT / "launch.sh").read_text(), re.M)[1]


def test_commands_run_with_malloc_tunables_unless_the_environment_has_its_own(checkout):
  assert _launch(checkout, "data")[0].returncode == 0
  assert (checkout / "calls.log.env").read_text().strip() == _default_tunables()
  _launch(checkout, "data", env={"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})
  assert (checkout / "calls.log.env").read_text().strip() == "glibc.malloc.arena_max=2"


# A jitted program whose temporaries (128 MB) XLA:CPU allocates as one buffer per call (glibc
# maps it afresh each time): the minor page faults of calls 4..8 (the first compiles). With the
# tunables they vary from run to run (800 to 6000 for the five calls, fewer after more warm-up
# calls), far below the 32k a call of 4 KB pages either way.
FAULTS = """
import resource, jax, jax.numpy as jnp
f = jax.jit(lambda x: jnp.sin(jnp.outer(x, x)).sum(0) + jnp.cos(jnp.outer(x, x)).sum(1))
x = jnp.arange(4096.0)
for _ in range(3):
  f(x).block_until_ready()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
  f(x).block_until_ready()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
PAGES_4K = 128 * 1024 // 4  # the temporaries' 4 KB pages: the faults of one call without THP


def _thp_mode():
  """The kernel's transparent huge page mode (always, madvise or never: the one in []), or
  None without Linux, glibc or THP."""
  thp = "/sys/kernel/mm/transparent_hugepage/enabled"
  if not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None:
    return None
  if not os.path.exists(thp):
    return None
  return re.search(r"\[(\w+)\]", open(thp).read())[1]


@pytest.mark.skipif(_thp_mode() in (None, "never"), reason="needs glibc and transparent huge pages")
def test_malloc_tunables_cut_the_per_call_page_faults():
  """With the launcher's tunables each call faults its 128 MB in 2 MB pages (64 a call, plus
  the noise of other allocations), whatever the kernel's mode. Without them, under `madvise`
  glibc never asks for huge pages: 4 KB pages, 32k faults a call. Under `always` the kernel
  may give huge pages unasked, so there only the tunables' own count is asserted (the contrast
  is the kernel's doing, not the launcher's)."""

  def faults(tunables):
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    env.update({"GLIBC_TUNABLES": tunables} if tunables else {})
    out = subprocess.run(
      [sys.executable, "-c", FAULTS], env=env, capture_output=True, text=True, check=True
    )
    return int(out.stdout.split()[-1])

  assert faults(_default_tunables()) < 5 * PAGES_4K // 8
  if _thp_mode() == "madvise":
    assert faults(None) > 5 * PAGES_4K // 2


def test_notebook_runs_as_root_with_allow_root(checkout):
  """JupyterLab refuses root without --allow-root; root is the default in GPU containers."""
  proc, calls = _launch(checkout, "notebook", "--no-browser")
  assert proc.returncode == 0, proc.stderr
  flags = calls[-1].split()
  assert flags[:3] == [
    "-m",
    "jupyterlab",
    f"--notebook-dir={checkout / 'experiments' / 'notebooks'}",
  ]
  assert ("--allow-root" in flags) == (os.geteuid() == 0) and flags[-1] == "--no-browser"


def test_tensorboard_installs_its_extra_and_views_the_directory(checkout):
  proc, calls = _launch(checkout, "tensorboard", "runs/x", "--port=6007")
  assert proc.returncode == 0, proc.stderr
  assert _installs(calls) == [".[tensorboard]"]
  assert calls[-1] == "-m tensorboard.main --logdir runs/x --port=6007"
