"""Exact resume across processes, SIGKILL and SIGTERM (no evaluation after it), partial
checkpoints, notebook restore."""

import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from lcx.run import checkpoint
from tests.helpers import ROOT, TINY_FLAGS, fake_devices, read_metrics, run_lcx


def _flags(workdir, *extra):
  return [*TINY_FLAGS, f"--workdir={workdir}", *extra]


def _assert_same_run(a, b, steps):
  ma, mb = read_metrics(a), read_metrics(b)
  for step in range(1, steps + 1):
    assert ma[step]["loss"] == mb[step]["loss"], step  # bitwise on CPU
  pa, _ = checkpoint.restore_params(str(a))
  pb, _ = checkpoint.restore_params(str(b))
  for x, y in zip(jax.tree.leaves(pa), jax.tree.leaves(pb), strict=True):
    np.testing.assert_array_equal(x, y)


@pytest.mark.slow
def test_exact_resume_after_process_exit(tmp_path):
  straight, resumed = tmp_path / "straight", tmp_path / "resumed"
  run_lcx(_flags(straight, "--config.train.steps=12"))
  run_lcx(_flags(resumed, "--config.train.steps=12", "--config.train.stop_after=6"))
  assert checkpoint.Checkpointer(str(resumed), every=1, keep=3).latest_step() == 6
  out = run_lcx(_flags(resumed, "--config.train.steps=12"))
  assert "resumed from step 6" in out.stderr
  _assert_same_run(straight, resumed, 12)


def _wait_for(predicate, proc, timeout=120):
  deadline = time.time() + timeout
  while not predicate():
    assert proc.poll() is None, proc.communicate()
    assert time.time() < deadline, "timed out"
    time.sleep(0.05)


def _start(workdir, *extra):
  return subprocess.Popen(
    [sys.executable, "-m", "lcx.main", *_flags(workdir, *extra)],
    cwd=ROOT,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )


def _steps_logged(workdir):
  path = workdir / "metrics.jsonl"
  return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.slow
def test_sigkill_resumes_from_last_complete_checkpoint(tmp_path):
  steps = 150
  straight, killed = tmp_path / "straight", tmp_path / "killed"
  flags = (f"--config.train.steps={steps}", "--config.train.checkpoint_every=20")
  run_lcx(_flags(straight, *flags))
  proc = _start(killed, *flags)
  _wait_for(lambda: _steps_logged(killed) >= 45, proc)
  proc.kill()
  proc.wait()
  ckpts = killed / "checkpoints"
  complete = checkpoint.Checkpointer(str(killed), every=1, keep=3).latest_step()
  assert complete is not None and complete < steps
  # A save killed mid-way leaves a tmp folder; plant one past the last complete step.
  partial = ckpts / f"{complete + 20}.orbax-checkpoint-tmp-1234"
  shutil.copytree(ckpts / str(complete), partial)
  shutil.rmtree(partial / "state")
  out = run_lcx(_flags(killed, *flags))
  assert f"resumed from step {complete}" in out.stderr
  _assert_same_run(straight, killed, steps)


@pytest.mark.slow
def test_sigterm_saves_current_step_and_exits_zero(tmp_path):
  proc = _start(tmp_path, "--config.train.steps=100000", "--config.train.checkpoint_every=5000")
  _wait_for(lambda: _steps_logged(tmp_path) >= 5, proc)
  proc.send_signal(signal.SIGTERM)
  _, stderr = proc.communicate(timeout=120)
  assert proc.returncode == 0, stderr[-3000:]
  saved = checkpoint.Checkpointer(str(tmp_path), every=1, keep=3).latest_step()
  logged = max(read_metrics(tmp_path))
  assert saved is not None and 5 <= saved < 5000
  assert logged == saved  # the checkpoint is at the step the run had reached
  assert "SIGTERM" in stderr


@pytest.mark.slow
def test_train_and_eval_skips_evaluation_after_sigterm(tmp_path):
  proc = _start(
    tmp_path,
    "--mode=train_and_eval",
    "--config.train.steps=100000",
    "--config.train.checkpoint_every=5000",
  )
  _wait_for(lambda: _steps_logged(tmp_path) >= 3, proc)
  proc.send_signal(signal.SIGTERM)
  _, stderr = proc.communicate(timeout=120)
  assert proc.returncode == 0, stderr[-3000:]
  assert "training stopped early (SIGTERM or preemption): skipping evaluation" in stderr
  assert checkpoint.Checkpointer(str(tmp_path), every=1, keep=3).latest_step() is not None
  assert not (tmp_path / "eval").exists()


@pytest.mark.slow
def test_restore_params_on_another_device_layout(tmp_path):
  run_lcx(
    _flags(tmp_path, "--config.train.steps=4", "--config.train.checkpoint_every=2"),
    env=fake_devices(2),
  )
  params, meta = checkpoint.restore_params(str(tmp_path))
  assert meta["step"] == 4 and meta["tokenizer"]["vocab_size"] == 259
  leaves = jax.tree.leaves(params)
  assert leaves and all(isinstance(x, np.ndarray) for x in leaves)
  assert params["embed"].shape == (259, 64)


class _Iterator:
  def get_state(self):
    return {"position": 0}


def test_a_reader_waits_at_no_barrier_across_processes(tmp_path, monkeypatch, caplog):
  """Each process opens a Reader when it sees checkpoints/, which one process may make before
  another looks: a barrier in the Reader would be met by one process only and hang the run.
  Orbax calls its barriers anyway; one among this process alone returns at once."""
  from orbax.checkpoint._src.multihost import multihost

  barriers, sync = [], multihost.sync_global_processes

  def record(name, **kw):
    barriers.append((name.split(":")[-1], kw.get("processes")))
    return sync(name, **kw)

  monkeypatch.setattr(multihost, "sync_global_processes", record)
  writer = checkpoint.Checkpointer(str(tmp_path), every=1, keep=1, async_save=False)
  writer.save(1, {"params": {"w": np.ones(3, np.float32)}}, _Iterator(), {"note": "x"}, force=True)
  writer.close()
  assert ("create_directory", None) in barriers  # a writer's: across every process
  barriers.clear()
  with checkpoint.Reader(str(tmp_path)) as reader:
    assert reader.latest == 1 and reader.meta(1)["note"] == "x"
    assert reader.param_shapes(1) == {"w": (3,)}
  assert barriers and all(processes == {jax.process_index()} for _, processes in barriers)
  assert "read only" not in caplog.text  # Orbax's warning on opening one, dropped


def _tree(directory) -> dict[str, bytes]:
  """Every file under `directory`, by relative path, with its bytes."""
  return {
    str(path.relative_to(directory)): path.read_bytes()
    for path in sorted(directory.rglob("*"))
    if path.is_file()
  }


def _save_steps(workdir, steps, note):
  writer = checkpoint.Checkpointer(str(workdir), every=1, keep=10, async_save=False)
  for step in steps:
    state = {"params": {"w": np.full(3, step, np.float32)}}
    writer.save(step, state, _Iterator(), {"note": note}, force=True)
  return writer


def test_a_second_set_aside_keeps_the_first_beside_it(tmp_path):
  """train.resume_step twice over the same step number: the step set aside first keeps its
  folder and files; the later one is kept beside it under the next free name."""
  aside = tmp_path / checkpoint.SET_ASIDE
  writer = _save_steps(tmp_path, [1, 2], "first")
  moved = [writer.set_aside_after(1)]
  writer.close()
  first = _tree(aside / "2")
  writer = _save_steps(tmp_path, [2, 3], "second")  # retrained from step 1
  second = _tree(tmp_path / "checkpoints" / "2")
  assert second != first
  moved.append(writer.set_aside_after(1))
  writer.close()
  assert sorted(p.name for p in aside.iterdir()) == ["2", "2.1", "3"]
  assert _tree(aside / "2") == first and _tree(aside / "2.1") == second
  assert moved == [{2: "2"}, {2: "2.1", 3: "3"}]
  assert checkpoint.latest_step(str(tmp_path)) == 1
