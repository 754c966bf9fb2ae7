"""Evaluation during training (train.eval_every): metrics at the right steps, a fixed sample,
unscoreable lengths skipped, and no effect on training."""

import math

import jax
import numpy as np
import pytest

from lcx.run import checkpoint, prepare, sharding, train
from lcx.tools.evaluate import during_train
from tests.helpers import read_metrics, tiny_config

KEYS = {"eval/loss@1x", "eval/ppl@1x", "eval/loss@4x", "eval/ppl@4x"}


def _config(**train_fields):
  config = tiny_config("rope", steps=20, log_every=10, checkpoint_every=1000, **train_fields)
  config.eval.during_train_tokens = 1024
  return config


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  plain, evaluated = tmp_path_factory.mktemp("plain"), tmp_path_factory.mktemp("evaluated")
  train.train(_config(), str(plain))
  train.train(_config(eval_every=5), str(evaluated), evaluate_during_train=during_train.DuringTrain)
  return plain, evaluated


@pytest.mark.slow  # trains the module's runs (~10-30 s)
def test_eval_metrics_at_every_eval_step(runs):
  _, evaluated = runs
  metrics = read_metrics(evaluated)
  assert sorted(s for s, r in metrics.items() if KEYS & set(r)) == [5, 10, 15, 20]
  for step in (5, 10, 15, 20):
    record = metrics[step]
    assert KEYS <= set(record)
    for name in ("1x", "4x"):
      loss = record[f"eval/loss@{name}"]
      assert np.isfinite(loss) and 0 < loss < math.log(259) + 1
      assert record[f"eval/ppl@{name}"] == pytest.approx(math.exp(loss))
  # At log steps, one record holds the step's training metrics and its evaluation.
  assert "loss" in metrics[10] and "loss" in metrics[20] and "loss" not in metrics[5]
  assert metrics[20]["eval/loss@1x"] < metrics[5]["eval/loss@1x"]  # it trains


@pytest.mark.slow  # trains the module's runs (~10-30 s)
def test_eval_during_training_leaves_training_bitwise_unchanged(runs):
  plain, evaluated = runs
  a, b = read_metrics(plain), read_metrics(evaluated)
  assert [a[s]["loss"] for s in (10, 20)] == [b[s]["loss"] for s in (10, 20)]
  pa, _ = checkpoint.restore_params(str(plain))
  pb, _ = checkpoint.restore_params(str(evaluated))
  for x, y in zip(jax.tree.leaves(pa), jax.tree.leaves(pb), strict=True):
    np.testing.assert_array_equal(x, y)


def test_the_sample_is_fixed_and_every_length_scores_the_same_tokens():
  config = _config(eval_every=5)
  config.eval.during_train = (0.5, 1, 4)
  first = during_train.DuringTrain(prepare.prepare(config))
  second = during_train.DuringTrain(prepare.prepare(config))
  assert list(first.windows) == ["0.5x", "1x", "4x"]
  for name, w in first.windows.items():
    assert w.inputs_NxT.shape[1] == {"0.5x": 16, "1x": 32, "4x": 128}[name]
    assert int(w.scored_NxT.sum()) == 1024
    np.testing.assert_array_equal(w.inputs_NxT, second.windows[name].inputs_NxT)


def test_lengths_a_learned_table_cannot_score_are_skipped_once(capsys):
  prepared = prepare.prepare(tiny_config("learned", eval_every=2))
  evaluator = during_train.DuringTrain(prepared)
  err = capsys.readouterr().err
  assert err.count("train.eval_every: 4x (128 tokens) skipped:") == 1
  assert list(evaluator.windows) == ["1x"]
  values = evaluator(train.Trainer(prepared).init_state()["params"])
  assert set(values) == {"eval/loss@1x", "eval/ppl@1x"} and np.isfinite(values["eval/loss@1x"])


def test_task_runs_refuse_eval_every():
  config = tiny_config("rope", eval_every=5)
  config.data.name = "task"
  with pytest.raises(ValueError, match=r"^train\.eval_every=5 scores validation text"):
    sharding.validate(config)


def test_train_without_the_evaluator_eval_every_asks_for_refuses_before_writing(tmp_path):
  """run/ imports nothing of tools/: the command that trains passes the evaluator in, and a
  caller that passes none is refused, not trained silently without its evaluation."""
  workdir = tmp_path / "run"
  with pytest.raises(ValueError, match=r"^train\.eval_every=5: .* no evaluate_during_train"):
    train.train(_config(eval_every=5), str(workdir))
  assert not workdir.exists()
