"""Metric logging: window means, the compile step kept out of throughput, files written."""

import json

import pytest

from lcx import metrics


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
