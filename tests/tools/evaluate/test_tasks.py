"""Task runs: exact match per size bucket (and needle depth), skipped buckets, accuracy CIs."""

import json
import os
import re

import pytest

from lcx.data import tasks
from lcx.run import prepare, train
from lcx.tools import evaluate
from lcx.tools.evaluate import runner as runner_lib, tasks as task_eval
from tests.helpers import tiny_config


def _runner(config, workdir):
  prepared = prepare.prepare(config)
  step, _ = prepare.checkpoint_meta(workdir)
  return runner_lib.Runner(prepared, prepare.restore_params(prepared, workdir, step)), prepared


@pytest.mark.slow
def test_tiny_model_learns_copy(copy_run):
  config, workdir = copy_run
  runner, prepared = _runner(config, workdir)
  examples = [e for n in (3, 5, 6) for e in tasks.eval_examples("copy", n, 20, 0)]
  exact, token = task_eval.hits(runner, examples)
  assert exact.mean() >= 0.8 and token.mean() >= exact.mean()


@pytest.mark.slow
def test_task_eval_writes_accuracy_per_size_bucket(copy_run, monkeypatch, capsys):
  config, workdir = copy_run

  def no_text(*args):
    raise AssertionError("a task run has no validation text to score")

  monkeypatch.setattr(evaluate.data, "validation_documents", no_text)
  result = evaluate.evaluate(config, workdir)["none"]
  saved = json.load(open(f"{workdir}/eval/none.json"))
  assert saved == json.loads(json.dumps(result, default=list))
  assert (saved["kind"], saved["task"], saved["step"], saved["depths"]) == (
    "tasks",
    "copy",
    300,  # conftest.copy_run trains 300 steps
    {},
  )
  assert saved["train_len"] == 14  # BOS + 6 + '=' + 6 + EOS: positions 0..13
  buckets = saved["buckets"]
  assert list(buckets) == ["1-6", "7-12", "13-24"]  # task_eval_factor 4 x task_max_len 6
  assert sum(b["examples"] for b in buckets.values()) == 120
  expected = [30, 30, 60]  # sizes uniform over 1..24
  assert all(abs(b["examples"] - n) <= 15 for b, n in zip(buckets.values(), expected))
  first = buckets["1-6"]
  assert first["accuracy"] >= 0.8 and first["accuracy_ci"][0] <= first["accuracy"]
  assert first["accuracy"] <= first["accuracy_ci"][1] <= 1.0
  out = capsys.readouterr().out
  assert "copy" in out and "1-6" in out
  for b in buckets.values():  # each example's exact match, in order, for paired comparisons
    exact = b["per_example"]["exact"]
    assert len(exact) == b["examples"] and set(exact) <= {"0", "1"}
    assert exact.count("1") / len(exact) == pytest.approx(b["accuracy"])
  again = evaluate.evaluate(config, workdir)["none"]["buckets"]  # the same examples
  assert [b["per_example"] for b in again.values()] == [b["per_example"] for b in buckets.values()]
  assert len({b["per_example"]["digest"] for b in buckets.values()}) == 3


@pytest.mark.slow
def test_a_named_variant_tests_the_model_on_another_task(copy_run):
  """One evaluation, two tasks: the copy model is right on copy and wrong on reverse."""
  config, workdir = copy_run
  config = config.copy_and_resolve_references()
  config.eval.named_variants = {"reversed": {"data": {"task": "reverse"}}}
  config.eval.variants = "none,reversed"
  results = evaluate.evaluate(config, workdir)
  assert (results["none"]["task"], results["reversed"]["task"]) == ("copy", "reverse")
  assert json.load(open(f"{workdir}/eval/reversed.json"))["task"] == "reverse"
  seen = [r["buckets"]["1-6"]["accuracy"] for r in (results["none"], results["reversed"])]
  assert seen[0] >= 0.8 and seen[1] < 0.5, seen  # reverse = copy only for palindromes
  digests = [r["buckets"]["1-6"]["per_example"]["digest"] for r in results.values()]
  assert digests[0] != digests[1]  # other examples: never paired with the copy ones


@pytest.mark.slow
def test_passkey_is_evaluated_at_each_configured_depth(copy_run):
  """Same architecture and tokenizer, so the copy checkpoint scores passkey (badly)."""
  config, workdir = copy_run
  config = config.copy_and_resolve_references()
  config.data.update(
    task="passkey",
    task_min_len=1,
    task_max_len=2,
    task_eval_factor=2,
    task_eval_examples=6,
    task_eval_depths=(0.0, 1.0),
  )
  config.eval.variants = "none"
  with pytest.raises(ValueError, match=r"model.max_len=\d+ differs from the checkpoint's 14"):
    evaluate.evaluate(config, workdir)  # another task trains another length
  runner, prepared = _runner(config, workdir)
  results = task_eval.sweep(runner, prepared.tokenizer)
  assert list(results["depths"]) == ["0", "1"]
  for by_bucket in results["depths"].values():
    assert list(by_bucket) == ["1-2", "3-4"]
    assert sum(b["examples"] for b in by_bucket.values()) == 6
  assert sum(b["examples"] for b in results["buckets"].values()) == 12
  config.data.task = "copy"
  with pytest.raises(
    ValueError,
    match=r"data.task_eval_depths=\(0.0, 1.0\) needs a task "
    r"with a needle depth \(passkey\); data.task='copy' has none",
  ):
    evaluate.evaluate(config, workdir)


@pytest.mark.slow
def test_task_buckets_past_a_learned_table_are_skipped_not_fatal(tmp_path, capsys):
  """A learned table of 14 positions scores the sizes it covers; longer buckets say why not."""
  config = tiny_config("learned", steps=20, checkpoint_every=1000)
  config.data.update(
    name="task",
    task="copy",
    task_min_len=1,
    task_max_len=6,
    seq_len=16,
    batch_size=8,
    task_eval_examples=40,
  )
  train.train(config, str(tmp_path))
  result = evaluate.evaluate(config, str(tmp_path))["none"]
  buckets = result["buckets"]
  assert list(buckets) == ["1-6", "7-12", "13-24"]
  assert buckets["1-6"]["accuracy"] is not None and "skipped" not in buckets["1-6"]
  long = buckets["13-24"]
  assert long["accuracy"] is None and long["examples"] > 0
  assert "the learned table has 14 positions" in long["skipped"]
  err = capsys.readouterr().err
  assert "sizes 13-24 skipped: model.position.max_len_policy='error'" in err
  # a scored bucket's line: its time, and how much of it went to building its program
  assert re.search(
    r"task copy: sizes 1-6: \d+ examples \([\d.]+ s, [\d.]+ of them compiling\)", err
  )
  assert os.path.exists(tmp_path / "eval" / "none.json")
