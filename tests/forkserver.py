"""`python -m MODULE ARGS` for tests, forked from a process that has already imported the heavy
libraries (jax, flax, optax, orbax, tensorflow_datasets, grain): a tiny training run 2.5 s instead
of 5.3, and the suite runs about 150 command lines. Each run is still a process of its own, started
in its own directory with its own environment and arguments, run as `__main__` by the same function
`python -m` uses, and ended as the interpreter ends one (threads joined, `atexit` run).

What a fork cannot change is what those imports read at import time: the interpreter's flags
and `sys.path` (`PYTHON*` variables), jax's environment-variable defaults (`JAX_*`) and the C
allocator's settings. A run whose environment differs from the server's in any of them runs
as a plain subprocess (`helpers.run_lcx` decides). XLA reads `XLA_FLAGS`, and jax its
platforms, when the backend starts, in the run, so fake devices work here too; the server never
starts a backend (a fork after one would copy XLA's threads' locks).

The server is this module run as `python -m tests.forkserver`, one per test process. It reads
one JSON request a line on stdin and answers two lines on stdout: the child's pid, then its
exit status."""

from __future__ import annotations

import atexit
import gc
import json
import os
import select
import signal
import subprocess
import sys
import threading

PRELOAD = (
  "jax",
  "jax.numpy",
  "flax.nnx",
  "optax",
  "orbax.checkpoint",
  "tensorflow_datasets",
  "grain",
  "ml_collections",
  "absl.app",
  "numpy",
)
# What the imports above read when they start (a fork keeps their values).
IMPORT_TIME_PREFIXES = ("PYTHON", "JAX_", "TF", "GLIBC_", "MALLOC_", "LD_")


def collect_garbage_less() -> None:
  """Python's cyclic garbage collector, told to skip what is already imported (`gc.freeze`)
  and to run about a thirtieth as often: tracing and lowering make container objects by the
  million, and at the default thresholds (700, 10, 10) every 70,000 of them set off a full
  collection over every object jax, flax and lcx made at import (a tenth of a compile-heavy
  test module's CPU time)."""
  gc.freeze()
  gc.set_threshold(20_000, 50, 100)


def _child(request: dict, private: tuple) -> None:
  """Becomes `python -m MODULE ARGS` in the request's directory, environment and files, and
  never returns."""
  import io
  import runpy
  import types

  for file in private:
    file.close()
  os.chdir(request["cwd"])
  os.environ.clear()
  os.environ.update(request["env"])
  os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
  for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
    os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
  unbuffered = bool(request["env"].get("PYTHONUNBUFFERED"))

  def stream(fd: int, stderr: bool):
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(
      raw if unbuffered else io.BufferedWriter(raw),
      encoding="utf-8",
      errors="backslashreplace" if stderr else "strict",
      line_buffering=stderr and not unbuffered,
      write_through=unbuffered,
    )

  sys.stdout, sys.stderr = stream(1, False), stream(2, True)
  sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
  sys.path[0] = request["cwd"]  # as `python -m` starts: the working directory first
  sys.argv = ["-m", *request["args"]]
  sys.modules["__main__"] = types.ModuleType("__main__")  # not the server's globals
  import jax  # its platforms are read when the backend starts, so a run may choose them

  jax.config.update("jax_platforms", request["env"].get("JAX_PLATFORMS"))
  try:
    runpy._run_module_as_main(request["module"])  # what `python -m` calls
    code = 0
  except SystemExit as exit:
    code = _exit_status(exit.code)
  except BaseException as error:  # noqa: BLE001 - the interpreter's own last resort
    sys.excepthook(type(error), error, error.__traceback__)
    code = -signal.SIGINT if isinstance(error, KeyboardInterrupt) else 1
  _end(code)


def _exit_status(code) -> int:
  """`SystemExit.code` as the interpreter turns it into a status."""
  if code is None or isinstance(code, int):
    return code or 0
  print(code, file=sys.stderr)
  return 1


def _end(code: int) -> None:
  """Ends the child as the interpreter ends a program (threads joined, `atexit` run, streams
  flushed), then leaves without tearing the preloaded modules down one by one: that takes 0.4 s
  and nobody sees it."""
  threading._shutdown()
  atexit._run_exitfuncs()
  for stream in (sys.stdout, sys.stderr):
    stream.flush()
  if code == -signal.SIGINT:  # as Python reports an uncaught KeyboardInterrupt
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
  os._exit(code)


def serve() -> None:
  """The server's loop: fork a child a request, answer its pid, wait, answer its status."""
  for name in PRELOAD:
    __import__(name)
  assert threading.active_count() == 1, "an import started a thread: forking would copy it"
  collect_garbage_less()  # the children run as the tests' own process does (conftest)
  requests = os.fdopen(os.dup(0), "r")
  answers = os.fdopen(os.dup(1), "w", buffering=1)
  os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
  os.dup2(2, 1)  # a stray print must not reach the answers
  for line in requests:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
      _child(request, (requests, answers))
    print(pid, file=answers)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), file=answers)  # -N: signal N


class Server:
  """The client side: starts the server once, runs requests one at a time."""

  def __init__(self, root: str, env: dict[str, str]):
    self.env = env
    self.runs = 0
    self.proc = subprocess.Popen(
      [sys.executable, "-m", "tests.forkserver"],
      cwd=root,
      env=env,
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      bufsize=0,  # unbuffered: `select` sees every answer line
    )
    atexit.register(self.close)

  def accepts(self, env: dict[str, str]) -> bool:
    """Whether a run in `env` would see what a fresh interpreter sees: every variable read at
    import time the same as the server's."""
    keys = {k for k in {*env, *self.env} if k.startswith(IMPORT_TIME_PREFIXES)}
    keys -= {"PYTHONUNBUFFERED", "JAX_PLATFORMS"}  # the child sets these itself
    return all(env.get(k) == self.env.get(k) for k in keys)

  def run(self, module, args, *, env, cwd, stdout, stderr, timeout) -> int:
    """Runs one request; returns its exit code, or raises subprocess.TimeoutExpired."""
    request = dict(
      module=module, args=list(args), env=env, cwd=str(cwd), stdout=str(stdout), stderr=str(stderr)
    )
    self.proc.stdin.write((json.dumps(request) + "\n").encode())
    self.proc.stdin.flush()
    pid = int(self._line(60))
    self.runs += 1
    try:
      return int(self._line(timeout))
    except subprocess.TimeoutExpired:
      os.kill(pid, signal.SIGKILL)
      self._line(60)
      raise subprocess.TimeoutExpired([module, *args], timeout) from None

  def _line(self, timeout: float) -> str:
    out = self.proc.stdout
    if not select.select([out], [], [], timeout)[0]:
      raise subprocess.TimeoutExpired("forkserver", timeout)
    line = out.readline()
    if not line:
      raise RuntimeError(f"the fork server exited ({self.proc.poll()})")
    return line.decode()

  def close(self) -> None:
    if self.proc.poll() is None:
      self.proc.stdin.close()
      self.proc.wait(timeout=30)


if __name__ == "__main__":
  serve()
