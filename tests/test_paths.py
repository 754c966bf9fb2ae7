"""Relative paths mean what they mean where the user ran the command (a SLURM script's
directory, not the checkout): workdirs, --out, --runs_dir and data paths land there, while
configs/... and experiments/... not found there fall back to lcx's own."""

import json
import os
import struct

import pytest

from lcx import cli
from tests.helpers import ROOT, TINY_FLAGS, run_lcx


def test_shipped_prefers_the_callers_file_then_lcx_own(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert cli.shipped("configs/base.py") == str(ROOT / "configs" / "base.py")
  assert cli.shipped("experiments/alibi_table") == str(ROOT / "experiments" / "alibi_table")
  (tmp_path / "configs").mkdir()
  (tmp_path / "configs" / "base.py").write_text("")
  assert cli.shipped("configs/base.py") == "configs/base.py"  # the caller's own wins
  assert cli.shipped("configs/nothing.py") == "configs/nothing.py"  # the error names it as given
  assert cli.with_shipped_config(["p", "--config=configs/extrapolation.py:pos=rope", "--x"]) == [
    "p",
    f"--config={ROOT / 'configs' / 'extrapolation.py'}:pos=rope",
    "--x",
  ]


def _tensorboard_scalars(directory) -> dict:
  """{(tag, step): value} from the TFRecord-framed event files (length, crc, event, crc)."""
  from tensorboardX.proto import event_pb2

  out = {}
  for path in sorted(directory.glob("events.out.tfevents.*")):
    data, i = path.read_bytes(), 0
    while i < len(data):
      (n,) = struct.unpack("<Q", data[i : i + 8])
      event = event_pb2.Event.FromString(data[i + 12 : i + 12 + n])
      out.update({(v.tag, event.step): v.simple_value for v in event.summary.value})
      i += 12 + n + 4
  return out


def test_train_eval_and_report_from_another_directory_write_there(tmp_path):
  elsewhere = tmp_path / "job"
  elsewhere.mkdir()
  (elsewhere / "corpus").mkdir()
  for i in range(20):  # enough held-out text for a 2048-token evaluation
    (elsewhere / "corpus" / f"{i}.txt").write_text(f"{i} the quick brown fox jumps\n" * 200)
  run_lcx(
    [
      *TINY_FLAGS,
      "--mode=train_and_eval",
      "--workdir=runs/x",
      "--config.train.steps=2",
      "--config.data.name=text_files",
      "--config.data.text_files=corpus",
      "--config.data.data_dir=data",
      "--config.eval.multipliers=(1,)",
    ],
    cwd=elsewhere,
  )
  run = elsewhere / "runs" / "x"
  assert json.loads((run / "config.json").read_text())["data"]["text_files"] == "corpus"
  assert (elsewhere / "data").is_dir() and not (ROOT / "data").exists()
  assert not (ROOT / "runs" / "x").exists()
  result = json.loads((run / "eval" / "none.json").read_text())
  assert result["corpus"].startswith("text_files_")  # the corpus's fingerprint
  scalars = _tensorboard_scalars(run / "tensorboard")  # the final evaluation beside training's
  assert scalars[("eval_final/none/ppl_32", 2)] == pytest.approx(
    result["lengths"]["32"]["perplexity"]
  )
  assert scalars[("eval_final/none/loss_32", 2)] == pytest.approx(result["lengths"]["32"]["loss"])
  run_lcx(["runs/x/eval", "--out=rep"], module="lcx.tools.report", cwd=elsewhere)
  assert (elsewhere / "rep" / "report.md").is_file()


def test_sweep_finds_lcx_experiments_and_puts_runs_in_the_callers_directory(tmp_path):
  proc = run_lcx(
    ["experiments/alibi_table", "--dry_run", "--runs_dir=myruns"],
    module="lcx.tools.sweep",
    cwd=tmp_path,
  )
  assert f"--workdir={tmp_path / 'myruns' / 'alibi_table'}" in proc.stdout
  assert not os.path.exists(tmp_path / "myruns")  # a dry run writes nothing
