"""An evaluator kind is one record: every kind has the report kind that reads its results, and
registering a toy kind is all it takes for evaluation to write, name and reuse its results."""

import json
import os

from lcx.run import train
from lcx.tools import evaluate
from lcx.tools.evaluate import kinds
from lcx.tools.report import kinds as report_kinds
from tests.helpers import tiny_config


def test_every_evaluator_kind_has_its_report_kind_or_says_why_not():
  assert list(kinds.KINDS) == ["lengths", "tasks", "passkey"]
  for name, kind in kinds.KINDS.items():
    assert kind.name == name
    assert name in report_kinds.KINDS or kind.no_report, name


def _runs(config) -> list[str]:
  return [k.name for k in kinds.KINDS.values() if k.runs(config)]


def test_the_kinds_a_run_gets_follow_its_data_and_passkey_lengths():
  config = tiny_config("rope")
  assert _runs(config) == ["lengths"]
  config.eval.passkey.lengths = (64,)
  assert _runs(config) == ["lengths", "passkey"]
  config.data.name = "task"
  assert _runs(config) == ["tasks"]


def _toy_results(todo):
  """One per variant, as passkey's: `toy@<variant>`."""
  return [(f"toy@{name}", spec, changes, cfg) for name, spec, changes, cfg in todo]


def test_a_registered_toy_kind_is_evaluated_named_and_reused(tmp_path, monkeypatch, capsys):
  workdir = str(tmp_path / "run")
  config = tiny_config("rope", steps=2, checkpoint_every=1000)
  config.eval.variants = "none,yarn@4"
  train.train(config, workdir)
  calls = []

  def body(ctx, runner):
    calls.append(runner.config.model.position.name)
    return {"score": 0.5, "train_len": ctx.train_len}

  toy = kinds.Kind(name="toy", runs=lambda cfg: True, body=body, results=_toy_results)
  monkeypatch.setitem(kinds.KINDS, "toy", toy)

  results = evaluate.evaluate(config, workdir, print_tables=False)
  assert sorted(results) == ["none", "toy@none", "toy@yarn@4", "yarn@4"]
  assert calls == ["rope", "rope"]
  with open(os.path.join(workdir, "eval", "toy@yarn@4.json")) as f:
    saved = json.load(f)
  assert (saved["kind"], saved["score"], saved["variant"]) == ("toy", 0.5, "yarn@4")
  assert saved["settings"] == results["toy@yarn@4"]["settings"]

  capsys.readouterr()
  again = evaluate.evaluate(config, workdir, print_tables=False)
  assert calls == ["rope", "rope"]  # the same checkpoint and settings: read back, not rerun
  assert again["toy@none"]["created"] == results["toy@none"]["created"]
  assert "toy@none: reusing" in capsys.readouterr().err
