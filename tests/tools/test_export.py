"""`./launch.sh export`: safetensors plus a JSON config that read back equal to the checkpoint;
bad input is one error line; restoring logs no Orbax metadata warning."""

import json
import logging

import numpy as np
import pytest

from lcx.run import checkpoint
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
  assert not (tmp_path / "x.tmp").exists()


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
