"""Metric logging: window means, the compile step kept out of throughput, files written."""

import importlib.machinery
import json
import os
import pathlib
import re
import subprocess
import sys
import types

import pytest

from lcx import errors, main
from lcx.config import checks as config_lib
from lcx.run import metrics, progress, train
from lcx.tools import evaluate
from lcx.tools.evaluate import during_train
from tests.helpers import tiny_config

ROOT = pathlib.Path(__file__).resolve().parents[2]


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


def test_a_resumed_writer_drops_later_steps_whole_or_not_at_all(tmp_path):
  """metrics.jsonl, cut back to the resumed step, went through its own PATH.tmp copy: a full
  disk was an OSError traceback and left metrics.jsonl.tmp; now lcx.files' one RunFault."""
  path = tmp_path / "metrics.jsonl"
  earlier = '{"step": 1}\n{"step": 2}\n'
  path.write_text(earlier)
  os.symlink("/dev/full", f"{path}.tmp")  # its write meets ENOSPC, as on a full disk
  with pytest.raises(errors.RunFault, match=rf"^no space left .* while writing {path}; "):
    metrics.MetricWriter(str(tmp_path), total=4, initial=1, trackers="")
  assert path.read_text() == earlier and os.listdir(tmp_path) == ["metrics.jsonl"]
  metrics.MetricWriter(str(tmp_path), total=4, initial=1, trackers="").close()
  assert path.read_text() == '{"step": 1}\n'


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
    "from lcx.run import metrics\n"
    f"w = metrics.summary_writer({str(tmp_path)!r}); w.add_scalar('loss', 1.5, 3); w.close()\n"
    "assert 'torch' not in sys.modules\n"
    "import importlib.util; assert importlib.util.find_spec('torch') is not None\n"
    "import torch; assert torch.ones(2).sum().item() == 2\n"
  )
  subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
  (events,) = tmp_path.glob("events.out.tfevents.*")
  assert b"loss" in events.read_bytes()


class _FakeRun:
  """What lcx calls on a W&B run, recorded."""

  def __init__(self, **kwargs):
    self.kwargs, self.logged, self.step_metrics, self.finished = kwargs, [], [], False

  def define_metric(self, name, step_metric):
    self.step_metrics.append((name, step_metric))

  def log(self, values):
    assert not self.finished
    self.logged.append(dict(values))

  def finish(self):
    self.finished = True


@pytest.fixture
def fake_wandb(monkeypatch):
  """A stand-in `wandb` module (the package is an optional extra, absent from the test venv)
  whose `runs` are the runs lcx opened, in order."""
  module = types.ModuleType("wandb")
  module.__spec__ = importlib.machinery.ModuleSpec("wandb", None)
  module.runs = []
  module.init = lambda **kwargs: module.runs.append(_FakeRun(**kwargs)) or module.runs[-1]
  monkeypatch.setitem(sys.modules, "wandb", module)
  return module


def test_wandb_gets_training_and_final_evaluation_in_one_run(tmp_path, fake_wandb):
  config = tiny_config(steps=4, log_every=2, eval_every=4, trackers="tensorboard,wandb")
  config.eval.multipliers = config.eval.during_train = (1,)
  config.eval.during_train_tokens = 1024
  workdir = str(tmp_path / "run")
  train.train(config, workdir, evaluate_during_train=during_train.DuringTrain)
  (run,) = fake_wandb.runs
  run_id = (tmp_path / "run" / "wandb" / "lcx_run_id").read_text().strip()
  assert run.kwargs["id"] == run_id and run.kwargs["resume"] == "allow"
  assert run.kwargs["dir"] == workdir and run.kwargs["name"] == "run"
  assert run.kwargs["project"] == "lcx" and run.kwargs["config"]["train"]["steps"] == 4
  assert run.step_metrics == [("*", "step")] and run.finished
  lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
  assert run.logged == lines  # every logged step, the same values as metrics.jsonl
  assert [x["step"] for x in run.logged] == [2, 4]
  assert "eval/ppl@1x" in run.logged[1]  # evaluation during training too
  assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))  # both trackers
  result = evaluate.evaluate(config, workdir)["none"]
  evaluated = fake_wandb.runs[-1]
  assert len(fake_wandb.runs) == 2 and evaluated.kwargs["id"] == run_id  # the same W&B run
  assert evaluated.logged == [
    {
      "step": 4,
      "eval_final/none/ppl_32": result["lengths"]["32"]["perplexity"],
      "eval_final/none/loss_32": result["lengths"]["32"]["loss"],
    }
  ]
  assert evaluated.finished


def test_no_trackers_writes_metrics_jsonl_only(tmp_path, fake_wandb):
  writer = metrics.MetricWriter(str(tmp_path), total=2, trackers="")
  writer.write(1, {"eval/ppl@32": 7.5})
  writer.close()
  assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]
  assert fake_wandb.runs == []


def test_a_tracker_not_installed_is_one_error_naming_the_field_and_the_extra(
  tmp_path, monkeypatch, capsys
):
  monkeypatch.setitem(sys.modules, "wandb", None)  # not importable, installed or not
  with pytest.raises(SystemExit) as exit_info:
    main.run(tiny_config(trackers="tensorboard,wandb"), str(tmp_path / "run"), "train")
  assert exit_info.value.code == 2
  assert capsys.readouterr().err == (
    "error: train.trackers='tensorboard,wandb': wandb needs the wandb package, which is not "
    "installed: pip install 'lcx[wandb]' (launch.sh: LCX_EXTRAS=wandb), or leave wandb out of "
    "train.trackers\n"
  )
  assert not (tmp_path / "run").exists()  # refused before anything is written


def test_an_unknown_tracker_names_the_allowed_ones():
  with pytest.raises(ValueError) as error:
    config_lib.check_fields(tiny_config(trackers="tensorboard,mlflow"))
  assert str(error.value) == (
    "train.trackers='tensorboard,mlflow' is not allowed; allowed: comma-separated names from "
    "tensorboard, wandb, or '' (metrics.jsonl only)"
  )


@pytest.mark.slow  # the real package, where installed (pip install 'lcx[wandb]'): offline files
def test_the_real_wandb_writes_an_offline_run_under_the_workdir(tmp_path, monkeypatch):
  pytest.importorskip("wandb")
  monkeypatch.setenv("WANDB_MODE", "offline")
  monkeypatch.setenv("WANDB_SILENT", "true")
  writer = metrics.MetricWriter(str(tmp_path), total=2, trackers="wandb")
  writer.write(1, {"eval/ppl@32": 7.5})
  writer.close()
  run_id = (tmp_path / "wandb" / "lcx_run_id").read_text().strip()
  (log,) = (tmp_path / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb")
  assert b"eval/ppl@32" in log.read_bytes()


def test_a_full_disk_while_appending_a_record_is_one_run_fault(tmp_path):
  """An append that meets ENOSPC was an OSError traceback out of the training loop; it is the
  RunFault naming the file, and the torn line it may leave is dropped on resume."""
  writer = metrics.MetricWriter(str(tmp_path), total=4, trackers="")
  writer.write(1, {"eval/ppl@64": 7.5})
  writer.jsonl.close()
  writer.jsonl = open("/dev/full", "a")  # every write meets ENOSPC, as on a full disk
  with pytest.raises(errors.RunFault, match=r"^no space left .* appending step 2 to /dev/full; "):
    writer.write(2, {"eval/ppl@64": 7.0})
  with open(tmp_path / "metrics.jsonl", "a") as f:
    f.write('{"step": 2, "eval/p')  # what a full disk may leave: a torn last line
  metrics.MetricWriter(str(tmp_path), total=4, initial=1, trackers="").close()
  assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1, "eval/ppl@64": 7.5}\n'
