"""The `lcx` console command and `pip install .`: the same subcommands as launch.sh, and a
wheel that carries the configs, so an installed lcx needs no checkout."""

import os
import re
import subprocess
import sys
import tomllib

import pytest

from lcx import command
from tests.helpers import ROOT


def test_lcx_subcommands_are_launch_sh_subcommands():
  launch = (ROOT / "launch.sh").read_text()
  dispatched = dict(
    re.findall(r'^  (\w+)\) exec "\$PY" -m ([\w.]+(?: --mode=\w+)?) "\$@"', launch, re.M)
  )
  assert dispatched == {
    name: " ".join([module, *first]) for name, (module, first) in command.COMMANDS.items()
  }


def test_every_subpackage_is_packaged():
  setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
  found = {
    os.path.relpath(d, ROOT).replace(os.sep, ".")
    for d, _, files in os.walk(ROOT / "lcx")
    if "__init__.py" in files
  }
  assert sorted(setup["packages"]) == sorted(found | {"lcx.configs"})
  assert setup["package-dir"] == {"lcx.configs": "configs"}


def _run(args, cwd, env=None):
  return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_unknown_subcommand_is_one_error_line(tmp_path):
  proc = _run(
    [sys.executable, "-m", "lcx.command", "trian"], tmp_path, dict(os.environ, PYTHONPATH=str(ROOT))
  )
  assert proc.returncode == 2
  assert (
    proc.stderr == "error: unknown command 'trian'; allowed: " + ", ".join(command.COMMANDS) + "\n"
  )


@pytest.mark.slow  # builds and installs a wheel (10-20 s)
def test_installed_wheel_runs_lcx_with_its_own_configs(tmp_path):
  wheels, site = tmp_path / "wheels", tmp_path / "site"
  pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
  subprocess.run(
    [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", wheels, ROOT],
    check=True,
    cwd=tmp_path,
  )
  (wheel,) = wheels.glob("lcx-*.whl")
  subprocess.run([*pip, "install", "--no-deps", "--target", site, wheel], check=True)
  assert (site / "lcx" / "configs" / "base.py").is_file()
  job = tmp_path / "job"
  job.mkdir()
  env = dict(os.environ, PYTHONPATH=str(site))
  proc = _run(
    [site / "bin" / "lcx", "data", "--config=configs/base.py", "--config.data.name=wikipedia"],
    job,
    env,
  )
  assert proc.returncode == 2, proc.stderr  # the config was found: its value is what's refused
  assert proc.stderr.startswith("error: data.name='wikipedia' is not allowed; allowed: stdlib")
  where = _run([sys.executable, "-c", "import lcx; print(lcx.__file__)"], job, env).stdout
  assert where.startswith(str(site))
  assert os.listdir(job) == []


def test_constraints_pin_every_dependency_within_pyproject_ranges():
  """constraints.txt (what launch.sh installs) pins each package of the base install and the
  test, bench and notebooks extras to one version, inside pyproject's range."""
  from packaging.requirements import Requirement

  project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
  extras = project["optional-dependencies"]
  wanted = [*project["dependencies"], *extras["test"], *extras["bench"], *extras["notebooks"]]
  pins = {}
  for line in (ROOT / "constraints.txt").read_text().splitlines():
    if line.strip() and not line.startswith("#"):
      name, version = line.split("==")
      pins[re.sub(r"[-_.]+", "-", name).lower()] = version
  for text in wanted:
    requirement = Requirement(text)
    name = re.sub(r"[-_.]+", "-", requirement.name).lower()
    assert name in pins, f"{name} is not pinned in constraints.txt"
    assert requirement.specifier.contains(pins[name], prereleases=True), (text, pins[name])
