"""Running a sweep's runs: each as a child process that dies with the sweep, one at a time or up
to `--jobs` side by side, a signal passed on to them, and the lines the sweep says of each."""

from __future__ import annotations

import ctypes
import datetime
import os
import shlex
import signal
import subprocess
import sys
import threading
import time

from lcx.run import progress
from lcx.tools.sweep import plan
from lcx.tools.sweep.markers import (
  MARKER,
  STARTED,
  _read_record,
  _write_json,
  changed_since_done,
  done,
  record,
)
from lcx.tools.sweep.plan import Sweep, _shown


class _Signals:
  """SIGTERM while runs train is passed on to them (lcx.main saves a checkpoint and exits 0) and
  they are not marked done; SIGINT (Ctrl-C reaches the whole process group) stops the sweep
  after the runs going. Either way the sweep then exits 128 + the signal number."""

  def __init__(self):
    self.children, self.received = set(), None
    self.ended_before = set()  # children that had exited (0 means finished) when SIGTERM came

  def __enter__(self):
    self.previous = {s: signal.signal(s, self._handle) for s in (signal.SIGTERM, signal.SIGINT)}
    return self

  def __exit__(self, *exc):
    for s, handler in self.previous.items():
      signal.signal(s, handler)

  def _handle(self, signum, frame):
    del frame
    self.received = signum
    for child in list(self.children) if signum == signal.SIGTERM else ():
      if child.poll() is None:
        child.send_signal(signum)  # lcx.main's handler only sets a flag: twice is harmless
      else:
        self.ended_before.add(child)


def to_run(sweep: Sweep, run: str, force_eval: bool) -> list[str] | None:
  """The command this call runs for `run`: None when it is done (skipped); with force_eval an
  evaluating run gets --force, and a done one is evaluated again (--mode=eval)."""
  command = sweep.command(run)
  if not (force_eval and sweep.runs[run].mode not in ("train", "longrope")):
    return None if done(sweep, run) else command
  if done(sweep, run):
    command = ["--mode=eval" if c.startswith("--mode=") else c for c in command]
  return command + ["--force"]


def stopped_line(sweep: Sweep, run: str, signum: int) -> str:
  """What the sweep says when a signal stops it during `run`: whether the run is marked done
  (it may finish on its own while the signal reached the sweep alone, `kill PID`), and how to
  go on."""
  state = "it finished and is marked done" if done(sweep, run) else "it is not marked done"
  return (
    f"[sweep] {signal.Signals(signum).name} during {sweep.name}/{run}: stopped; {state}, run "
    "the same command to resume"
  )


def skipped_line(sweep: Sweep, run: str) -> str:
  return f"done earlier ({os.path.join(_shown(sweep.workdir(run)), MARKER)}): skipped"


def again_line(sweep: Sweep, run: str, why: list[str], doing: str) -> str:
  """What the sweep says of a run it marked done that runs again: what changed since."""
  return f"[sweep] {sweep.name}/{run}: {'; '.join(why)} since it finished: {doing} again"


def start_line(head: str, done: int, total: int, durations: list[float]) -> str:
  """A run's first line; once a run has finished in this call, with the runs done/total and an
  ETA from the finished runs' mean duration (runs skipped as done earlier cost nothing)."""
  if not durations:
    return head
  return f"{head} runs {progress.progress_text(done, total, sum(durations) / len(durations))}"


def launch(
  sweep: Sweep, run: str, command: list[str], signals: _Signals, env: dict | None = None, **popen
):
  """Starts `run` (its launch recorded, a stale marker removed) as a child `signals` knows;
  `env`: defaults for variables the environment does not set."""
  why = changed_since_done(sweep, run)
  if why:
    print(again_line(sweep, run, why, "running"), flush=True)
    os.remove(os.path.join(sweep.workdir(run), MARKER))
  _write_json(os.path.join(sweep.workdir(run), STARTED), record(sweep, run))
  print("$ python " + shlex.join(command), flush=True)
  child = subprocess.Popen(
    [sys.executable, *command],
    cwd=plan.ROOT,
    env={**(env or {}), **os.environ, "PYTHONUNBUFFERED": "1"},
    preexec_fn=_dies_with(os.getpid()),
    **popen,
  )
  signals.children.add(child)
  if signals.received == signal.SIGTERM and child.poll() is None:  # it came during the start
    child.send_signal(signal.SIGTERM)
  return child


def finish(sweep: Sweep, run: str, child, signals: _Signals) -> int:
  """The exit status of `run`'s child; 0 (not after SIGTERM, where 0 means "saved") marks it
  done with its command."""
  status = child.wait()
  signals.children.discard(child)
  if status == 0 and (signals.received != signal.SIGTERM or child in signals.ended_before):
    # the launch's record says what ran (a config edited meanwhile did not); made now if lost
    launched = _read_record(os.path.join(sweep.workdir(run), STARTED))
    if launched is None or launched["command"] != sweep.command(run):
      launched = record(sweep, run)
    finished = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    _write_json(os.path.join(sweep.workdir(run), MARKER), {**launched, "finished": finished})
  return status


def run_one(sweep: Sweep, run: str, command: list[str], signals: _Signals) -> int:
  return finish(sweep, run, launch(sweep, run, command, signals), signals)


# A child's output through a pipe, read as text whatever bytes it holds: a thread that stopped
# reading would leave the child blocked on a full pipe.
PIPED = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
# Side by side, each run allocates GPU memory as it needs it (JAX's default takes 75% at once).
SIDE_BY_SIDE_ENV = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def _prefixed(stream, prefix: str):
  """A thread copying a child's output to ours line by line, each line led by its run's name;
  it reads to the end even when writing fails."""

  def copy():
    for line in stream:
      try:
        sys.stdout.write(prefix + line if line.endswith("\n") else prefix + line + "\n")
        sys.stdout.flush()
      except (OSError, ValueError):
        pass

  thread = threading.Thread(target=copy, daemon=True)
  thread.start()
  return thread


def ready(sweep: Sweep, waiting: list[str], going) -> list[str]:
  """The waiting runs `--jobs` may start now, in order: none of their needs waiting or going,
  and no run going in their workdir."""
  return [
    r
    for r in waiting
    if not any(n in waiting or n in going for n in sweep.runs[r].needs)
    and all(sweep.target(g) != sweep.target(r) for g in going)
  ]


def run_side_by_side(
  sweep: Sweep, chosen: list[str], jobs: int, force_eval: bool, signals: _Signals
) -> tuple[list[tuple[str, int]], list[str]]:
  """Runs `chosen` with up to `jobs` at once (`--jobs`), each as soon as its needs are done and
  no other run works in its workdir (runs `on` the same base take turns); output lines carry
  their run's name. Stops starting runs after a failure or a signal and waits for those going.
  Returns (failed runs with their exit status, runs that were going when a signal came)."""
  waiting, going, failed, interrupted = list(chosen), {}, [], []
  while waiting or going:
    while signals.received is None and not failed and len(going) < jobs:
      startable = ready(sweep, waiting, going)
      if not startable:
        break
      run = startable[0]
      waiting.remove(run)
      head = f"[sweep {sweep.name}/{run} {len(chosen) - len(waiting)}/{len(chosen)}]"
      command = to_run(sweep, run, force_eval)
      if command is None:
        print(f"{head} {skipped_line(sweep, run)}", flush=True)
        continue
      print(f"{head} starting beside {len(going)} other runs", flush=True)
      child = launch(sweep, run, command, signals, env=SIDE_BY_SIDE_ENV, **PIPED)
      going[run] = (child, _prefixed(child.stdout, f"[{run}] "), time.perf_counter())
    if not going:
      if waiting and not failed and signals.received is None:  # select() rules this out
        raise RuntimeError(f"runs {', '.join(waiting)} can never start: their needs are not run")
      break
    time.sleep(0.2)
    for run, (child, thread, started) in list(going.items()):
      if child.poll() is None:
        continue
      thread.join()
      del going[run]
      status = finish(sweep, run, child, signals)
      if signals.received is not None:
        interrupted.append(run)
      elif status != 0:
        failed.append((run, status))
      else:
        seconds = time.perf_counter() - started
        print(f"[sweep {sweep.name}/{run}] finished in {seconds:.0f} s", flush=True)
  return failed, interrupted


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _dies_with(parent: int):
  """A run's preexec_fn: the kernel sends it SIGTERM (lcx.main saves a checkpoint and exits)
  when the sweep dies, even by SIGKILL, so no training outlives its sweep and overlaps a
  re-run. Linux only; elsewhere a no-op. Until exec the child still holds the sweep's Python
  SIGTERM handler, which would take a SIGTERM arriving then and lose it at exec (the run then
  trained on, orphaned): SIGTERM goes back to the default, death, first."""

  def arm():
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
      ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
    except (OSError, AttributeError):
      return
    if os.getppid() != parent:  # the sweep died before prctl took effect
      os.kill(os.getpid(), signal.SIGTERM)

  return arm
