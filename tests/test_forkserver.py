"""A forked run is the run `python -m` makes: same output, status, directory, arguments,
environment, devices and exit, and timeouts that leave the server serving."""

import os
import subprocess
import sys

import pytest

from tests import helpers

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the fork server is Linux's")

PROBE = """
import atexit, os, sys
import jax

atexit.register(lambda: print("atexit ran"))
print(__name__, sys.argv[1:], os.getcwd(), sys.path[0] == os.getcwd())
print(os.environ["PROBE"], jax.device_count(), "serve" in globals())
print("to stderr", file=sys.stderr)
if sys.argv[1] == "raise":
  raise ValueError("probe")
if sys.argv[1] == "interrupt":
  raise KeyboardInterrupt
if sys.argv[1] == "text":
  sys.exit("error: probe")
if sys.argv[1] == "sleep":
  import time
  time.sleep(60)
sys.exit(int(sys.argv[1]))
"""


@pytest.fixture
def probe_dir(tmp_path):
  (tmp_path / "probe.py").write_text(PROBE)
  return tmp_path


def _both(probe_dir, arg):
  env = dict(helpers.fake_devices(3), PROBE="seen")
  server = helpers._forkserver(dict(os.environ, **helpers.BASE_ENV, **env))
  runs = server.runs
  forked = helpers.run_lcx([arg], module="probe", cwd=probe_dir, env=env, check=False)
  plain = subprocess.run(
    [sys.executable, "-m", "probe", arg],
    cwd=probe_dir,
    env=dict(os.environ, **helpers.BASE_ENV, **env),
    capture_output=True,
    text=True,
  )
  assert server.runs == runs + 1  # it was forked
  return forked, plain


@pytest.mark.parametrize("arg", ["0", "3"])
def test_a_forked_run_prints_and_exits_as_python_dash_m(probe_dir, arg):
  forked, plain = _both(probe_dir, arg)
  assert (forked.returncode, forked.stdout, forked.stderr) == (
    plain.returncode,
    plain.stdout,
    plain.stderr,
  )
  assert forked.returncode == int(arg)
  assert forked.stdout.splitlines()[1:] == ["seen 3 False", "atexit ran"]
  assert f"__main__ ['{arg}'] {probe_dir} True" == forked.stdout.splitlines()[0]


@pytest.mark.parametrize(
  "arg, status, last_line",
  [
    ("raise", 1, "ValueError: probe"),
    ("interrupt", -2, "KeyboardInterrupt"),
    ("text", 1, "error: probe"),
  ],
)
def test_an_uncaught_exception_or_a_text_exit_ends_as_in_python(probe_dir, arg, status, last_line):
  forked, plain = _both(probe_dir, arg)
  assert forked.returncode == plain.returncode == status
  assert forked.stderr.splitlines()[-1] == plain.stderr.splitlines()[-1]
  assert forked.stderr.splitlines()[-1] == last_line
  assert forked.stdout == plain.stdout


def test_a_timeout_kills_the_run_and_the_server_serves_on(probe_dir):
  with pytest.raises(subprocess.TimeoutExpired):
    helpers.run_lcx(["sleep"], module="probe", cwd=probe_dir, env={"PROBE": "x"}, timeout=2)
  again = helpers.run_lcx(["0"], module="probe", cwd=probe_dir, env={"PROBE": "x"})
  assert again.stdout.splitlines()[1] == "x 1 False"


def test_what_imports_read_at_start_runs_a_real_process():
  server = helpers._forkserver(dict(os.environ, **helpers.BASE_ENV))
  base = dict(server.env)
  assert server.accepts(dict(base, XLA_FLAGS="--xla_force_host_platform_device_count=2"))
  assert server.accepts(dict(base, JAX_PLATFORMS="cpu"))
  for changed in ("JAX_ENABLE_X64", "PYTHONPROFILEIMPORTTIME", "PYTHONPATH", "GLIBC_TUNABLES"):
    assert not server.accepts(dict(base, **{changed: "other"})), changed


def test_a_forked_run_collects_garbage_as_the_test_process_does(tmp_path):
  """The server applies the tests' collector settings before it forks (`collect_garbage_less`)."""
  import gc

  (tmp_path / "gc_probe.py").write_text(
    "import gc\nprint(*gc.get_threshold(), gc.get_freeze_count() > 0)\n"
  )
  forked = helpers.run_lcx([], module="gc_probe", cwd=tmp_path)
  assert forked.stdout.split() == [*map(str, gc.get_threshold()), "True"]
  assert gc.get_threshold() != (700, 10, 10)  # not Python's defaults: conftest set them
