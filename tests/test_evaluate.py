"""Length sweep: window arithmetic, buckets, dense == chunked, no recompiles, clear errors."""

import json
import shutil

import numpy as np
import pytest

from lcx import evaluate, train
from lcx.data import pipeline, tokenizers
from tests.helpers import TINY_FLAGS, run_lcx, tiny_config


def test_windows_are_non_overlapping_next_token_pairs():
  stream = np.arange(20)
  x, y = evaluate.windows(stream, 6, 3)
  np.testing.assert_array_equal(x, [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11],
                                    [12, 13, 14, 15, 16, 17]])
  np.testing.assert_array_equal(y, x + 1)
  with pytest.raises(ValueError, match="21 validation tokens needed .* only 20 available"):
    evaluate.windows(np.arange(20), 20, 1)


def test_position_buckets_double_past_training_length():
  assert evaluate.position_buckets(64, 512) == [(0, 64), (64, 128), (128, 256), (256, 512)]
  assert evaluate.position_buckets(64, 100) == [(0, 64), (64, 100)]
  assert evaluate.position_buckets(64, 32) == [(0, 32)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("run")
  config = tiny_config("alibi", steps=30, checkpoint_every=1000)
  train.train(config, str(workdir))
  return config, str(workdir)


def test_sweep_writes_results_and_prints_table(trained, capsys):
  config, workdir = trained
  results = evaluate.evaluate(config, workdir)
  saved = json.load(open(f"{workdir}/eval/results.json"))
  assert saved == json.loads(json.dumps(results))
  assert sorted(int(n) for n in saved["lengths"]) == [32, 64, 128, 256]
  for r in saved["lengths"].values():
    assert r["perplexity"] == pytest.approx(np.exp(r["loss"]))
    assert r["tokens"] == r["windows"] * int(next(k for k, v in saved["lengths"].items() if v is r))
  assert "perplexity (per token) by eval length; train length 32" in capsys.readouterr().out


def test_chunked_kernel_matches_dense_and_nothing_recompiles(trained):
  config, workdir = trained
  evaluator = evaluate.Evaluator(config, workdir)
  stream = evaluate.data.validation_tokens(config.data, 4097)
  dense = evaluator.length(stream, 128)
  evaluator.config.eval.chunked_from = 64
  chunked = evaluator.length(stream, 128)
  assert (dense["kernel"], chunked["kernel"]) == ("dense", "chunked")
  assert chunked["loss"] == pytest.approx(dense["loss"], rel=1e-5)
  evaluator.length(stream, 128)
  evaluator.length(stream, 96)
  assert evaluator._scorer("chunked")._cache_size() == 2  # one program per length, reused


def test_architecture_change_is_refused(trained):
  config, workdir = trained
  config = config.copy_and_resolve_references()
  config.model.d_model = 128
  with pytest.raises(ValueError, match=r"model.d_model=128 differs from the checkpoint's 64"):
    evaluate.Evaluator(config, workdir)


def _texts(words, num=200):
  rng = np.random.default_rng(0)
  return [" ".join(rng.choice(words, 30)) for _ in range(num)]


def _sentencepiece_config(corpus, data_dir):
  config = tiny_config("alibi", steps=2, checkpoint_every=1000)
  config.data.update(name="text_files", text_files=str(corpus), data_dir=str(data_dir),
                     tokenizer="sentencepiece", vocab_size=300)
  return config


@pytest.fixture(scope="module")
def sentencepiece_run(tmp_path_factory):
  """A 2-step run with a SentencePiece model trained in its data dir."""
  root = tmp_path_factory.mktemp("sp")
  (root / "corpus").mkdir()
  (root / "corpus" / "docs.jsonl").write_text("".join(
      json.dumps({"text": t}) + "\n" for t in _texts(["alpha", "beta", "gamma", "delta"])))
  config = _sentencepiece_config(root / "corpus", root / "data")
  train.train(config, str(root / "run"))
  return root, config


def test_the_same_tokenizer_model_from_another_data_dir_is_accepted(sentencepiece_run):
  root, config = sentencepiece_run
  moved = _sentencepiece_config(root / "corpus", root / "moved")
  model = pipeline.sentencepiece_path(moved.data)
  model.parent.mkdir(parents=True)
  shutil.copy(pipeline.sentencepiece_path(config.data), model)
  assert evaluate.Evaluator(moved, str(root / "run")).step == 2


def test_a_different_tokenizer_is_refused_naming_both(sentencepiece_run):
  root, config = sentencepiece_run
  other = _sentencepiece_config(root / "corpus", root / "other")  # same path scheme
  other_texts = [t.encode() for t in _texts(["one", "two", "three", "four", "five"])]
  tokenizers.train_sentencepiece(other_texts, 300, pipeline.sentencepiece_path(other.data), 0)
  sha = r"'sha256': '[0-9a-f]{64}'"
  with pytest.raises(ValueError, match=(
      rf"trained with tokenizer \{{'kind': 'sentencepiece', 'vocab_size': 300, {sha}\}}, "
      rf"data\.\* gives \{{'kind': 'sentencepiece', 'vocab_size': 300, {sha}\}}: "
      r"set data\.tokenizer, data\.vocab_size")):
    evaluate.Evaluator(other, str(root / "run"))
  as_bytes = config.copy_and_resolve_references()
  as_bytes.data.tokenizer = "byte"
  with pytest.raises(ValueError, match=r"data\.\* gives \{'kind': 'byte', 'vocab_size': 259\}"):
    evaluate.Evaluator(as_bytes, str(root / "run"))


def test_missing_checkpoint_is_a_clear_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="no checkpoint in .*train first"):
    evaluate.Evaluator(tiny_config(), str(tmp_path))


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory):
  """A tiny RoPE model trained on `copy` with sizes 1..6."""
  workdir = tmp_path_factory.mktemp("copy")
  config = tiny_config("rope", steps=600, warmup_steps=30, lr=3e-3, log_every=100,
                       checkpoint_every=1000)
  config.data.update(name="task", task="copy", task_min_len=1, task_max_len=6, seq_len=32,
                     batch_size=16, task_eval_examples=120)
  train.train(config, str(workdir))
  return config, str(workdir)


def test_tiny_model_learns_copy(copy_run):
  config, workdir = copy_run
  evaluator = evaluate.Evaluator(config, workdir)
  accuracy = np.mean([evaluator.task_accuracy("copy", n, 20) for n in (3, 5, 6)])
  assert accuracy >= 0.8, accuracy


def test_task_eval_writes_accuracy_per_size_bucket(copy_run, monkeypatch, capsys):
  config, workdir = copy_run

  def no_text(*args):
    raise AssertionError("a task run has no validation text to score")

  monkeypatch.setattr(evaluate.data, "validation_tokens", no_text)
  results = evaluate.evaluate(config, workdir)
  saved = json.load(open(f"{workdir}/eval/results.json"))
  assert saved == json.loads(json.dumps(results))
  assert saved["task"] == "copy" and saved["step"] == 600 and saved["depths"] == {}
  buckets = saved["buckets"]
  assert list(buckets) == ["1-6", "7-12", "13-24"]  # task_eval_factor 4 x task_max_len 6
  assert sum(b["examples"] for b in buckets.values()) == 120
  expected = [30, 30, 60]  # sizes uniform over 1..24
  assert all(abs(b["examples"] - n) <= 15 for b, n in zip(buckets.values(), expected))
  assert buckets["1-6"]["accuracy"] >= 0.8, buckets
  out = capsys.readouterr().out
  assert "copy exact match by task size; trained on sizes 1-6" in out
  assert f"1-6  {buckets['1-6']['accuracy']:8.3f}" in out


def test_passkey_is_evaluated_at_each_configured_depth(copy_run):
  """Same architecture and tokenizer, so the copy checkpoint scores passkey (badly)."""
  config, workdir = copy_run
  config = config.copy_and_resolve_references()
  config.data.update(task="passkey", task_min_len=1, task_max_len=2, task_eval_factor=2,
                     task_eval_examples=6, task_eval_depths=(0.0, 1.0))
  results = evaluate.Evaluator(config, workdir).task_sweep()
  assert list(results["depths"]) == ["0", "1"]
  for by_bucket in results["depths"].values():
    assert list(by_bucket) == ["1-2", "3-4"]
    assert sum(b["examples"] for b in by_bucket.values()) == 6
  assert sum(b["examples"] for b in results["buckets"].values()) == 12
  config.data.task = "copy"
  with pytest.raises(ValueError, match=r"data.task_eval_depths=\(0.0, 1.0\) needs a task "
                     r"with a needle depth \(passkey\); data.task='copy' has none"):
    evaluate.evaluate(config, workdir)


def test_extension_method_changes_only_at_evaluation(tmp_path):
  """A RoPE checkpoint evaluated with YaRN: same weights, other numbers past L, no retraining."""
  config = tiny_config("rope", steps=30, checkpoint_every=1000)
  train.train(config, str(tmp_path))
  plain = evaluate.Evaluator(config, str(tmp_path))
  yarn = config.copy_and_resolve_references()
  yarn.model.position.scaling.rope_type = "yarn"
  yarn.model.position.scaling.factor = 4.0
  extended = evaluate.Evaluator(yarn, str(tmp_path))
  stream = evaluate.data.validation_tokens(config.data, 4097)
  a, b = plain.length(stream, 128), extended.length(stream, 128)
  assert np.isfinite(b["loss"]) and a["loss"] != b["loss"]


def test_train_and_eval_from_the_command_line(tmp_path):
  out = run_lcx([*TINY_FLAGS, f"--workdir={tmp_path}", "--mode=train_and_eval",
                 "--config.train.steps=10", "--config.eval.multipliers=(1,2)"])
  results = json.load(open(tmp_path / "eval" / "results.json"))
  assert sorted(results["lengths"]) == ["32", "64"] and results["step"] == 10
  assert "perplexity (per token) by eval length; train length 32" in out.stdout
  assert json.load(open(tmp_path / "config.json"))["model"]["vocab_size"] == 259


def test_task_buckets_past_a_learned_table_are_skipped_not_fatal(tmp_path, capsys):
  """A learned table of 16 positions scores the sizes it covers; longer buckets say why not."""
  config = tiny_config("learned", steps=20, checkpoint_every=1000)
  config.data.update(name="task", task="copy", task_min_len=1, task_max_len=6, seq_len=16,
                     batch_size=8, task_eval_examples=40)
  train.train(config, str(tmp_path))
  results = evaluate.evaluate(config, str(tmp_path))
  buckets = results["buckets"]
  assert list(buckets) == ["1-6", "7-12", "13-24"]
  assert buckets["1-6"]["accuracy"] is not None and "skipped" not in buckets["1-6"]
  long = buckets["13-24"]
  assert long["accuracy"] is None and long["examples"] > 0
  assert "the learned table has 16 positions" in long["skipped"]
  assert "sizes 13-24 skipped: model.position.max_len_policy='error'" in capsys.readouterr().out
