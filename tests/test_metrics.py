"""Metric logging: window means, the compile step kept out of throughput, files written."""

import json
import pathlib
import re
import subprocess
import sys

import pytest

from lcx import metrics, progress, train
from tests.helpers import tiny_config

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_logged_values_are_window_means_and_skip_compile_time(tmp_path, monkeypatch):
  clock = iter([0.0, 10.0, 11.0, 12.0, 13.0])  # init, step 1 (compiles), steps 2-4: 1 s each
  monkeypatch.setattr(metrics.time, "perf_counter", lambda: next(clock))
  writer = metrics.MetricWriter(str(tmp_path), total=4, tokens_per_step=100)
  assert writer.step_done(1, {"loss": 4.0, "grad_norm": 1.0, "lr": 0.1}, log=False) == {}
  writer.step_done(2, {"loss": 3.0, "grad_norm": 1.0, "lr": 0.2}, log=False)
  writer.step_done(3, {"loss": 2.0, "grad_norm": 1.0, "lr": 0.3}, log=False)
  logged = writer.step_done(4, {"loss": 1.0, "grad_norm": 3.0, "lr": 0.4}, log=True)
  writer.close()
  assert logged["loss"] == pytest.approx(2.5) and logged["grad_norm"] == pytest.approx(1.5)
  assert logged["lr"] == 0.4  # the current rate, not a mean
  assert logged["step_time"] == pytest.approx(1.0)  # 3 timed steps in 3 s
  assert logged["tokens_per_sec"] == pytest.approx(100.0)
  line = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
  assert line["step"] == 4 and line["loss"] == pytest.approx(2.5)


def test_progress_text_gives_done_total_tokens_per_second_and_eta():
  assert progress.eta_text(0.4) == "ETA 0s" and progress.eta_text(59.6) == "ETA 1m00s"
  assert progress.eta_text(185) == "ETA 3m05s" and progress.eta_text(7620) == "ETA 2h07m"
  assert progress.eta_text(-3) == "ETA 0s"  # a pace measured after the last item: nothing left
  assert progress.progress_text(50, 200, 1.3, 1234.4) == "50/200, 1234 tok/s, ETA 3m15s"
  assert progress.progress_text(1, 3, 60.0) == "1/3, ETA 2m00s"


def test_a_log_line_leads_with_step_total_tokens_per_second_and_eta(tmp_path, monkeypatch, capsys):
  clock = iter([0.0, 10.0, 12.0])  # init, step 1 (compiles), step 2: 2 s
  monkeypatch.setattr(metrics.time, "perf_counter", lambda: next(clock))
  writer = metrics.MetricWriter(str(tmp_path), total=32, tokens_per_step=100)
  writer.step_done(1, {"loss": 4.0, "grad_norm": 1.0, "lr": 0.1}, log=False)
  writer.step_done(2, {"loss": 3.0, "grad_norm": 1.0, "lr": 0.2}, log=True)
  writer.write(3, {"eval/ppl@64": 7.5})
  writer.close()
  out = capsys.readouterr().out.splitlines()
  assert out[0].startswith("step 2/32, 50 tok/s, ETA 1m00s: loss 3.5000 ppl 33.12 ")  # means
  assert out[0].endswith(" 2000 ms/step")
  assert out[1] == "step 3/32: eval ppl@64 7.500"


def test_a_tiny_training_run_logs_every_step_with_its_total_and_eta(tmp_path, capsys):
  train.train(tiny_config(steps=6, log_every=2), str(tmp_path))
  out = capsys.readouterr().out
  shown = re.findall(r"^step (\d+)/6, (\d+) tok/s, ETA (\d+)s: loss [\d.]+ ", out, re.M)
  assert [int(step) for step, _, _ in shown] == [2, 4, 6]
  assert all(int(rate) > 0 for _, rate, _ in shown) and shown[-1][2] == "0"


@pytest.mark.slow  # a subprocess
def test_entry_points_import_without_torch_and_the_writer_still_logs(tmp_path):
  """tensorboardX would import torch (seconds) on every command; lcx keeps it out, and the
  TensorBoard writer made on first use writes scalars, with torch importable afterwards."""
  code = (
    "import sys; import lcx.main\n"
    "assert 'torch' not in sys.modules and 'tensorboardX' not in sys.modules, 'imported early'\n"
    "from lcx import metrics\n"
    f"w = metrics.summary_writer({str(tmp_path)!r}); w.add_scalar('loss', 1.5, 3); w.close()\n"
    "assert 'torch' not in sys.modules\n"
    "import importlib.util; assert importlib.util.find_spec('torch') is not None\n"
    "import torch; assert torch.ones(2).sum().item() == 2\n"
  )
  subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
  (events,) = tmp_path.glob("events.out.tfevents.*")
  assert b"loss" in events.read_bytes()
