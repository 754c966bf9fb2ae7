"""Plots from results files."""

from lcx import report


def test_length_sweep_plot_is_written(tmp_path):
  results = {"rope": {"train_len": 64, "lengths": {
      "64": {"perplexity": 8.0}, "128": {"perplexity": 9.0}}}}
  path = report.plot_length_sweep(results, str(tmp_path / "sweep.png"))
  assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
