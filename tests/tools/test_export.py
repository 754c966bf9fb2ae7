"""`./launch.sh export`: safetensors plus a JSON config that read back equal to the checkpoint;
bad input is one error line; restoring logs no Orbax metadata warning. Nothing is lost: an --out
holding what export did not write (notes, the run itself) is refused, an earlier export of the
same run is replaced in one step, and a damaged checkpoint or a full disk writes nothing."""

import json
import logging
import os
import shutil
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from safetensors import SafetensorError

from lcx import errors
from lcx.run import checkpoint, metrics
from lcx.tools import export
from tests.helpers import TINY_FLAGS, run_lcx


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("export") / "run"
  run_lcx(
    [*TINY_FLAGS, f"--workdir={workdir}", "--config.train.steps=4"]
    + ["--config.train.checkpoint_every=2", "--config.train.keep_checkpoints=3"]
  )
  return workdir


def test_export_reads_back_equal_to_the_checkpoint(run):
  proc = run_lcx([f"--workdir={run}"], module="lcx.tools.export")
  assert proc.stdout.startswith("exported step 4: ")
  tensors, record = export.load(str(run / "export"))
  params, meta = checkpoint.restore_params(str(run))
  expected = export.flatten(params)
  assert sorted(tensors) == sorted(expected) and tensors["embed"].shape == (259, 64)
  for name, array in expected.items():
    assert tensors[name].dtype == array.dtype, name
    np.testing.assert_array_equal(tensors[name], array, err_msg=name)
  assert record["step"] == 4 == meta["step"]
  assert record["config"] == json.loads((run / "config.json").read_text())
  assert record["tokenizer"] == meta["tokenizer"]


def test_export_of_an_earlier_step_and_to_another_directory(run, tmp_path):
  run_lcx([f"--workdir={run}", "--step=2", f"--out={tmp_path / 'x'}"], module="lcx.tools.export")
  tensors, record = export.load(str(tmp_path / "x"))
  params, _ = checkpoint.restore_params(str(run), 2)
  assert record["step"] == 2
  np.testing.assert_array_equal(tensors["embed"], export.flatten(params)["embed"])
  assert os.listdir(tmp_path) == ["x"]  # no temporary folder left beside it


@pytest.mark.parametrize(
  "args, message",
  [
    (["--step=3"], "error: --step=3 has no checkpoint in {run}; allowed: 1, 2, 4"),
    (["--workdir=/nonexistent"], "error: --workdir=/nonexistent: no config.json there"),
  ],
)
def test_export_bad_input_is_one_error_line(run, args, message):
  proc = run_lcx([f"--workdir={run}", *args], module="lcx.tools.export", check=False)
  assert proc.returncode == 2
  assert proc.stderr.startswith(message.format(run=run)), proc.stderr
  assert proc.stderr.count("\n") == 1


def test_restore_params_logs_no_metadata_warning(run, caplog):
  with caplog.at_level(logging.WARNING):
    checkpoint.restore_params(str(run))
  assert not [r for r in caplog.records if "Metadata file does not exist" in r.getMessage()]


def _files(directory) -> dict[str, bytes]:
  """{relative path: content} of every file under `directory` (a file: itself)."""
  if os.path.isfile(directory):
    return {".": open(directory, "rb").read()}
  return {
    os.path.relpath(os.path.join(root, name), directory): open(
      os.path.join(root, name), "rb"
    ).read()
    for root, _, names in os.walk(directory)
    for name in names
  }


def _export(workdir, *args, check=True):
  return run_lcx([f"--workdir={workdir}", *args], module="lcx.tools.export", check=check)


def _one_error_line(proc) -> str:
  assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-3000:]
  assert proc.stderr.startswith("error: "), proc.stderr
  return proc.stderr.strip()


def _notes(where):
  where.mkdir()
  (where / "notes.txt").write_text("mine")


def _another_runs_export(where):
  where.mkdir()
  (where / "model.safetensors").write_bytes(b"theirs")
  (where / "lcx_export.json").write_text(json.dumps({"workdir": "/elsewhere/run", "step": 7}))


def _unmarked_export(where):  # as lcx wrote one before it recorded the run
  where.mkdir()
  (where / "model.safetensors").write_bytes(b"weights")
  (where / "config.json").write_text("{}")


ALLOWED = "allowed: a new or empty directory, or an earlier export of the same run"


@pytest.mark.parametrize(
  "out, make, reason",
  [
    ("notes", _notes, "holds files export did not write (notes.txt)"),
    ("run", None, "is the run directory itself"),
    (".", None, "contains the run directory {tmp}/run"),
    ("run/checkpoints", None, "is inside the run's checkpoints/"),
    ("run/checkpoints/9", None, "is inside the run's checkpoints/"),
    ("run/config.json", None, "is a file, not a directory"),
    ("run/config.json/x", None, "is inside {tmp}/run/config.json, a file"),
    ("theirs", _another_runs_export, "is an export of another run (/elsewhere/run, step 7)"),
    (
      "older",
      _unmarked_export,
      "holds an export without lcx_export.json (an older lcx's): remove it or pick another --out",
    ),
  ],
)
def test_an_out_holding_what_export_did_not_write_is_refused(run, tmp_path, out, make, reason):
  workdir = tmp_path / "run"
  shutil.copytree(run, workdir)  # a copy: the refused export must not wipe the shared run
  if make:
    make(tmp_path / out)
  before = _files(tmp_path)
  proc = _export(workdir, f"--out={tmp_path / out}", check=False)
  expected = f"error: --out={tmp_path / out} {reason.format(tmp=tmp_path)}; {ALLOWED}"
  assert _one_error_line(proc) == expected
  assert _files(tmp_path) == before  # nothing deleted, nothing written (no temporary folder)


def test_an_earlier_export_of_the_same_run_is_replaced_and_nothing_else(run, tmp_path):
  out = tmp_path / "out"
  _export(run, "--step=2", f"--out={out}")
  assert json.loads((out / "lcx_export.json").read_text())["step"] == 2
  proc = _export(run, f"--out={out}")
  assert proc.stdout.startswith("exported step 4: ")
  assert sorted(os.listdir(out)) == ["config.json", "lcx_export.json", "model.safetensors"]
  source = json.loads((out / "lcx_export.json").read_text())
  _, meta = checkpoint.restore_params(str(run))
  assert source == {
    "workdir": os.path.realpath(run),
    "step": 4,
    "fingerprint": checkpoint.fingerprint(str(run), 4, meta),
  }
  assert export.load(str(out))[1]["step"] == 4 and os.listdir(tmp_path) == ["out"]
  (out / "notes.txt").write_text("mine")  # the user's file in the export: not replaced now
  before = _files(out)
  proc = _export(run, "--step=2", f"--out={out}", check=False)
  assert _one_error_line(proc) == (
    f"error: --out={out} holds files besides an earlier export (notes.txt); {ALLOWED}"
  )
  assert _files(out) == before and os.listdir(tmp_path) == ["out"]


@pytest.mark.parametrize("exchange", ["renameat2", "two renames"])
def test_exchange_swaps_two_folders(tmp_path, monkeypatch, exchange):
  if exchange == "two renames":  # a system without renameat2
    monkeypatch.setattr(export.ctypes, "CDLL", lambda *a, **k: object())
  (tmp_path / "new").mkdir()
  (tmp_path / "new" / "a").write_text("new")
  (tmp_path / "old").mkdir()
  (tmp_path / "old" / "b").write_text("old")
  export._exchange(str(tmp_path / "new"), str(tmp_path / "old"))
  assert _files(tmp_path) == {"new/b": b"old", "old/a": b"new"}


def test_a_damaged_checkpoint_is_one_error_line_and_writes_nothing(run, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(run, workdir)
  data = [p for p in (workdir / "checkpoints" / "4").rglob("*") if p.parent.name == "d"]
  assert data
  for path in data:  # truncated to half: a disk fault, a torn copy
    with open(path, "r+b") as f:
      f.truncate(path.stat().st_size // 2)
  proc = _export(workdir, f"--out={tmp_path / 'x'}", check=False)
  line = _one_error_line(proc)  # no traceback, nor Orbax's closed event loop echoing it
  assert line.startswith(f"error: checkpoint step 4 in {workdir}/checkpoints is unreadable (")
  assert line.endswith("; the previous checkpoint is step 2: export it with --step=2"), line
  assert sorted(os.listdir(tmp_path)) == ["run"]


def test_a_full_disk_keeps_the_earlier_export_and_leaves_no_partial_one(run, tmp_path, monkeypatch):
  out = tmp_path / "x"
  export.export(str(run), str(out), step=2)
  before = _files(out)

  def full_disk(tensors, path, metadata):
    with open(path, "wb") as f:
      f.write(b"half a file")
    raise SafetensorError(
      "Error while serializing: I/O error: No space left on device (os error 28)"
    )

  monkeypatch.setattr(export.safetensors_numpy, "save_file", full_disk)
  with pytest.raises(errors.RunFault) as fault:
    export.export(str(run), str(out))
  assert str(fault.value) == (
    f"no space left on the device of {tmp_path} while exporting step 4; removed the partial "
    f"export, {out} is as it was. Free space, then run the same command"
  )
  assert _files(out) == before and os.listdir(tmp_path) == ["x"]


def test_only_a_closed_event_loops_echo_of_a_failed_read_is_dropped(monkeypatch):
  """TensorStore completes a failed read's futures after Orbax closed its event loop: Python
  would print each RuntimeError as a traceback beside the one error line."""
  seen = []
  monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(str(u.exc_value)))
  metrics.drop_closed_loop_echoes()
  hook = sys.unraisablehook
  metrics.drop_closed_loop_echoes()  # every read calls it: installed once
  assert sys.unraisablehook is hook
  for message in ("Event loop is closed", "something else"):
    sys.unraisablehook(SimpleNamespace(exc_value=RuntimeError(message), object=None))
  assert seen == ["something else"]
