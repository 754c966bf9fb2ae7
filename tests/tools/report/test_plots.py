"""The plots: which are drawn, older results, crowded panels."""

import math
import os

import pytest

from lcx import errors
from lcx.tools import report
from tests.tools.report.results import PNG, lengths_result, tasks_result


def test_error_rates_at_the_trained_sizes_get_their_plot(tmp_path):
  results = []
  for seed in (0, 1):
    r = tasks_result(run=f"flip-rope-s{seed}")
    r["buckets"]["1-16"].update(error_rate=0.1 * seed, error_rate_ci=[0.0, 0.2])
    results.append(r)
  written = report.write(results, str(tmp_path))
  assert set(written) == {"report", "csv", "tasks", "task_errors"}
  assert (tmp_path / "task_errors.png").read_bytes().startswith(b"\x89PNG")
  assert "![task errors](task_errors.png)" in open(written["report"]).read()
  beyond = tasks_result(run="flip-rope-s0")  # error rates past the trained sizes only: no plot
  beyond["buckets"]["17-32"].update(error_rate=0.5, error_rate_ci=[0.4, 0.6])
  assert report.plot_task_errors([beyond], str(tmp_path / "none.png")) is None


def test_many_tasks_and_stems_wrap_the_error_plot_into_rows_of_one_scale(monkeypatch):
  """13 tasks x 10 systems (nope_tasks with its matched rows) drew one panel 80 inches wide with
  a color per task and system (130): now a color per system, rows of 4 tasks, every row 4
  columns wide, at most 18 inches, the legend beside the first row."""
  figures = []
  monkeypatch.setattr(report.plots, "_save", lambda fig, path: figures.append(fig) or path)
  results = []
  for t in range(13):
    for stem in range(10):
      r = tasks_result(run=f"task{t:02d}-scheme{stem}-s0")
      r["task"] = f"task{t:02d}"
      r["buckets"]["1-16"].update(error_rate=0.1, error_rate_ci=[0.05, 0.15])
      results.append(r)
  report.plot_task_errors(results, "task_errors.png")
  (fig,) = figures
  axes = [a for a in fig.axes if a.get_visible()]
  assert len(axes) == 4 and fig.get_size_inches()[0] <= 18
  assert [len(a.get_xticklabels()) for a in axes] == [4, 4, 4, 1]
  assert all(a.get_xlim() == (-0.5, 3.5) for a in axes)  # one scale
  legend = axes[0].get_legend()
  assert [t.get_text() for t in legend.get_texts()] == [f"scheme{i}" for i in range(10)]
  assert legend.get_window_extent().x0 >= axes[0].get_window_extent().x1
  figures.clear()
  report.plot_task_errors(
    [r for r in results if r["run"].endswith(("scheme0-s0", "scheme1-s0"))], "t.png"
  )
  assert len([a for a in figures[0].axes if a.get_visible()]) == 2  # 8 tasks a row, few stems
  figures.clear()
  for t in range(2):  # 12 systems: 12 colors, not the default 10 over again
    for stem in (10, 11):
      r = tasks_result(run=f"task{t:02d}-scheme{stem}-s0")
      r["task"] = f"task{t:02d}"
      r["buckets"]["1-16"].update(error_rate=0.2, error_rate_ci=[0.1, 0.3])
      results.append(r)
  report.plot_task_errors(results, "task_errors.png")
  handles = figures[0].axes[0].get_legend().legend_handles
  assert len({tuple(h.get_color()) for h in handles}) == len(handles) == 12


def test_plot_length_sweep_takes_older_results(tmp_path):
  results = {
    "rope": {"train_len": 64, "lengths": {"64": {"perplexity": 8.0}, "128": {"perplexity": 9.0}}}
  }
  path = report.plot_length_sweep(results, str(tmp_path / "sweep.png"))
  assert open(path, "rb").read(8) == PNG


def test_variants_plot_with_many_variants_keeps_one_band_and_the_legend_outside(monkeypatch):
  figures = []
  monkeypatch.setattr(report.plots, "_save", lambda fig, path: figures.append(fig) or path)
  names = ["none", "linear@4", "ntk@4", "yarn@4", "dynamic@4", "rerope@64"]
  report.plot_variants([lengths_result(variant=v) for v in names], "variants.png")
  (ax,) = [a for a in figures[0].axes if a.get_visible()]
  assert len(ax.collections) == 1  # the band of "none" only: five more would be one blob
  legend = ax.get_legend().get_window_extent()
  assert legend.x0 >= ax.get_window_extent().x1  # right of the axes, not over the lines
  figures.clear()
  report.plot_variants([lengths_result(variant=v) for v in names[:3]], "variants.png")
  (ax,) = [a for a in figures[0].axes if a.get_visible()]
  assert len(ax.collections) == 3  # few variants: each its band


def test_task_lines_are_one_per_stem_across_seeds_and_one_per_single_result():
  from lcx.tools.report import plots

  results = []
  for seed, beyond in ((0, 0.2), (1, 0.5), (2, 0.3)):
    r = tasks_result(run=f"copy-rope-s{seed}")
    r["buckets"]["17-32"]["accuracy"] = beyond
    results.append(r)
  results.append(tasks_result(run="copy-alibi-s0"))
  buckets = ["1-16", "17-32", "33-64"]
  lines = {label: rest for label, *rest in plots.task_lines(results, buckets)}
  assert set(lines) == {"copy-rope/none (seeds 0,1,2)", "copy-alibi-s0/none"}
  xs, ys, lo, hi = lines["copy-rope/none (seeds 0,1,2)"]
  assert xs == [0, 1]  # 33-64 skipped in every seed
  assert ys == pytest.approx([0.953, (0.2 + 0.5 + 0.3) / 3])
  assert [y - d for y, d in zip(ys, lo)] == pytest.approx([0.953, 0.2])  # the lowest seed
  assert [y + d for y, d in zip(ys, hi)] == pytest.approx([0.953, 0.5])  # the highest
  xs, ys, lo, hi = lines["copy-alibi-s0/none"]
  assert (ys[0] - lo[0], ys[0] + hi[0]) == pytest.approx((0.931, 0.972))  # its own 95% CI


def test_seeds_with_one_value_draw_bars_of_zero_and_the_plot_is_written(tmp_path):
  """Three seeds at 0.1: their float mean, 0.10000000000000002, is above every seed; the bars
  are 0, not a hair below (which matplotlib refuses, and the report with it)."""
  from lcx.tools.report import plots

  results = []
  for seed in (0, 1, 2):
    r = tasks_result(run=f"copy-rope-s{seed}")
    r["buckets"]["17-32"]["accuracy"] = 0.1
    results.append(r)
  ((label, xs, ys, lo, hi),) = plots.task_lines(results, ["1-16", "17-32"])
  assert ys[1] > 0.1 and lo[1] >= 0 and hi[1] == 0
  assert open(report.plot_tasks(results, str(tmp_path / "t.png")), "rb").read(8) == PNG


def test_length_lines_fold_seeds_into_one_line_and_the_plot_draws_a_line_per_stem(tmp_path):
  from lcx.tools.report import plots

  results = [
    lengths_result(f"rope-s{seed}", losses={1: 2.0 + 0.1 * seed, 4: 2.5 + 0.1 * seed})
    for seed in (0, 1, 2)
  ] + [lengths_result("alibi-s0", losses={1: 2.1, 4: 2.1})]
  lines = {label: rest for label, *rest in plots.length_lines(results)}
  assert set(lines) == {"rope/none (seeds 0,1,2)", "alibi-s0/none"}
  xs, ys, lo, hi = lines["rope/none (seeds 0,1,2)"]
  mean = sum(math.exp(2.5 + 0.1 * s) for s in (0, 1, 2)) / 3
  assert xs == [64, 256] and ys[1] == pytest.approx(mean)
  assert (ys[1] - lo[1], ys[1] + hi[1]) == pytest.approx((math.exp(2.5), math.exp(2.7)))
  xs, ys, lo, hi = lines["alibi-s0/none"]
  assert (ys[0] - lo[0], ys[0] + hi[0]) == pytest.approx((math.exp(2.08), math.exp(2.12)))
  twice = [lengths_result("rope"), lengths_result("rope", losses={1: 3.0, 2: 3.0, 4: 3.0})]
  assert [ys for _, _, ys, _, _ in plots.length_lines(twice)][1] == [math.exp(3.0)] * 3  # apart
  figures = []
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or path)
    plots.plot_perplexity(results, str(tmp_path / "p.png"))
  (ax,) = [a for a in figures[0].axes if a.get_visible()]
  labels = ax.get_legend_handles_labels()[1]
  assert labels == ["train length 64", "rope/none (seeds 0,1,2)", "alibi-s0/none"]


def test_length_ticks_shorten_whole_kilotokens_so_neighbours_do_not_run_together(tmp_path):
  from lcx.tools.report import plots

  assert [plots.length_tick(n) for n in (64, 256, 1024, 1536, 4096, 65536)] == [
    "64", "256", "1k", "1536", "4k", "64k",
  ]  # fmt: skip
  results = [lengths_result("rope", train_len=512)]  # 1x, 2x, 4x: 512, 1024, 2048
  figures = []
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or path)
    plots.plot_perplexity(results, str(tmp_path / "p.png"))
  (ax,) = [a for a in figures[0].axes if a.get_visible()]
  assert [t.get_text() for t in ax.get_xticklabels()] == ["512", "1k", "2k"]


def test_a_plot_is_written_whole_or_not_at_all(tmp_path):
  """savefig wrote into the PNG itself: a kill or a full disk mid-write left a truncated plot."""
  path = tmp_path / "t.png"
  results = [tasks_result()]
  report.plot_tasks(results, str(path))
  earlier = path.read_bytes()
  assert earlier[:8] == PNG and os.listdir(tmp_path) == ["t.png"]
  os.symlink("/dev/full", f"{path}.tmp")  # its write meets ENOSPC, as on a full disk
  with pytest.raises(errors.RunFault, match=rf"^no space left .* while writing {path}; "):
    report.plot_tasks(results, str(path))
  assert path.read_bytes() == earlier and os.listdir(tmp_path) == ["t.png"]
