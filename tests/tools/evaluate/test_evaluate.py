"""The evaluation end to end on tiny trained runs: result files per variant, reuse, protocols,
chunked == dense, windows inside documents, trained fields refused, tasks."""

import json
import math
import os
import re
import shutil

import jax
import numpy as np
import pytest

from lcx.data import pipeline, tokenizers
from lcx.run import prepare, train
from lcx.tools import evaluate
from lcx.tools.evaluate import kinds, lengths, runner as runner_lib, samples
from tests.helpers import DATA_DIR, run_lcx, tiny_config


@pytest.fixture(scope="module")
def rope_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("rope"))
  config = tiny_config("rope", steps=30, checkpoint_every=1000)
  config.eval.variants = "none,yarn@4"
  train.train(config, workdir)
  return config, workdir


def _runner(config, workdir):
  prepared = prepare.prepare(config)
  step, _ = prepare.checkpoint_meta(workdir)
  return runner_lib.Runner(prepared, prepare.restore_params(prepared, workdir, step))


def _sequences(config, runner, longest):
  ev = config.eval
  return samples.select(
    pipeline.validation_documents(runner.config.data),
    ev.documents,
    longest,
    ev.num_tokens,
    ev.sample_seed,
  )


@pytest.mark.slow
def test_one_file_per_variant_with_numbers_and_settings(rope_run, capsys):
  config, workdir = rope_run
  results = evaluate.evaluate(config, workdir)
  assert sorted(os.listdir(f"{workdir}/eval")) == ["none.json", "yarn@4.json"]
  for spec, r in results.items():
    saved = json.load(open(f"{workdir}/eval/{evaluate.variants.file_name(spec)}"))
    assert saved == json.loads(json.dumps(r, default=list))
    assert (saved["schema"], saved["kind"], saved["step"], saved["train_len"]) == (
      "lcx.eval/1",
      "lengths",
      30,
      32,
    )
    assert saved["protocol"]["protocol"] == "windows"
    assert saved["versions"]["jax"] == jax.__version__
    assert sorted(saved["lengths"], key=int) == ["32", "64", "128", "256"]
    tokens = {v["tokens"] for v in saved["lengths"].values()}
    assert tokens == {2048}  # the same tokens at every length
    for v in saved["lengths"].values():
      assert v["perplexity"] == pytest.approx(math.exp(v["loss"]))
      assert v["loss_ci"][0] < v["loss"] < v["loss_ci"][1]
      assert v["documents"] >= 8
      # bytes per token: 1 for byte targets, 0 for EOS targets, so just below 1
      assert 0.9 < v["loss"] / math.log(2) / v["bits_per_byte"] <= 1.0
      buckets = v["loss_by_position"]
      assert buckets[0]["start"] == 0 and sum(b["tokens"] for b in buckets) == v["tokens"]
      per_doc = v["per_document"]  # the overall mean, split by document
      assert len(per_doc["ids"]) == v["documents"] and sum(per_doc["tokens"]) == v["tokens"]
      total = sum(loss * n for loss, n in zip(per_doc["loss"], per_doc["tokens"]))
      assert total / v["tokens"] == pytest.approx(v["loss"], rel=1e-6)
    assert len({tuple(v["per_document"]["tokens"]) for v in saved["lengths"].values()}) == 1
    assert (
      set(saved["source"]) == {"commit", "dirty", "diff"} and len(saved["source"]["commit"]) == 40
    )
  assert results["yarn@4"]["overrides"] == {
    "model.position.scaling": {"rope_type": "yarn", "factor": 4.0}
  }
  assert results["yarn@4"]["lengths"]["256"]["loss"] != results["none"]["lengths"]["256"]["loss"]
  out = capsys.readouterr().out
  assert "## Perplexity by evaluation length" in out and "| yarn@4 " in out


@pytest.mark.slow
def test_a_result_is_reused_unless_forced_or_settings_change(rope_run, capsys):
  config, workdir = rope_run
  evaluate.evaluate(config, workdir)
  mtime = os.path.getmtime(f"{workdir}/eval/none.json")
  evaluate.evaluate(config, workdir)
  assert os.path.getmtime(f"{workdir}/eval/none.json") == mtime
  assert "none: reusing" in capsys.readouterr().err
  evaluate.evaluate(config, workdir, force=True)
  assert os.path.getmtime(f"{workdir}/eval/none.json") > mtime
  sliding = config.copy_and_resolve_references()
  sliding.eval.protocol, sliding.eval.variants = "sliding", "none"
  evaluate.evaluate(sliding, workdir)
  assert "reusing" not in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize(
  "protocol, documents",
  [("windows", "stream"), ("sliding", "stream"), ("windows", "long"), ("last_k", "long")],
)
def test_chunked_equals_dense_under_every_protocol(rope_run, protocol, documents):
  config, workdir = rope_run
  config = config.copy_and_resolve_references()
  config.eval.update(protocol=protocol, documents=documents, stride=16, last_k=8, bootstrap=0)
  runner = _runner(config, workdir)
  seqs = _sequences(config, runner, 128)
  dense = lengths.sweep(runner, seqs, [128], np.ones(259), 32)["lengths"]["128"]
  runner.config.eval.chunked_from = 64
  chunked = lengths.sweep(runner, seqs, [128], np.ones(259), 32)["lengths"]["128"]
  assert (dense["kernel"], chunked["kernel"]) == ("dense", "chunked")
  assert chunked["loss"] == pytest.approx(dense["loss"], rel=1e-5)
  assert chunked["tokens"] == dense["tokens"]


@pytest.mark.slow
def test_windows_equals_sliding_at_stride_t_and_more_context_scores_the_same_tokens(rope_run):
  config, workdir = rope_run
  config = config.copy_and_resolve_references()
  config.eval.documents = "long"  # in a stream, a token's context ends at its document's start
  runner = _runner(config, workdir)
  seqs = _sequences(config, runner, 256)

  def loss(protocol, stride=0):
    runner.config.eval.update(protocol=protocol, stride=stride)
    return lengths.sweep(runner, seqs, [64], np.ones(259), 32)["lengths"]["64"]

  windows, sliding_t, sliding = loss("windows"), loss("sliding", 64), loss("sliding", 16)
  assert windows["loss"] == sliding_t["loss"]
  assert sliding["tokens"] == windows["tokens"] and sliding["loss"] != windows["loss"]


@pytest.mark.slow
def test_stream_windows_never_attend_across_documents(rope_run):
  """Each document piece in a window scores exactly as when it is alone in its own row."""
  config, workdir = rope_run
  runner = _runner(config, workdir)
  # pieces of at most max(32, 2048 / 32) tokens: windows of 128 hold several documents
  w = samples.cut(_sequences(config, runner, 32), 128, "windows")
  nll = runner.nll(w.inputs_NxT[:4], w.targets_NxT[:4], w.positions_NxT[:4], w.segments_NxT[:4])
  pieces = 0
  for row in range(4):
    for segment in np.unique(w.segments_NxT[row]):
      cols = np.flatnonzero(w.segments_NxT[row] == segment)
      alone = np.zeros((1, 128), np.int32)
      alone[0, : len(cols)] = w.inputs_NxT[row, cols]
      targets = np.zeros((1, 128), np.int32)
      targets[0, : len(cols)] = w.targets_NxT[row, cols]
      seg = (np.arange(128) < len(cols)).astype(np.int32)[None]
      pos = np.arange(128, dtype=np.int32)[None]
      single = runner.nll(alone, targets, pos, seg)[0, : len(cols)]
      np.testing.assert_allclose(nll[row, cols], single, rtol=2e-5, atol=2e-5)
      pieces += 1
  assert pieces > 4  # the windows did hold several documents


def test_a_length_of_many_batches_logs_windows_done_tok_s_and_eta(rope_run, capsys):
  """Every tenth of the windows (at least a batch) once past the first batch; a length of one
  or two batches logs only its result."""
  config, workdir = rope_run
  config = config.copy_and_resolve_references()
  config.eval.update(batch_tokens=128, bootstrap=0)  # 2 rows of 64 per batch: 16 batches
  runner = _runner(config, workdir)
  seqs = _sequences(config, runner, 64)
  capsys.readouterr()
  result = lengths.sweep(runner, seqs, [64, 32], np.ones(259), 32)["lengths"]
  err = capsys.readouterr().err
  assert result["64"]["windows"] == 32 and result["32"]["windows"] == 64
  shown = re.findall(r"eval length 64: windows (\d+)/32, (\d+) tok/s, ETA (\d+)s\n", err)
  assert [int(done) for done, _, _ in shown] == [4, 8, 12, 16, 20, 24, 28]
  assert all(int(rate) > 0 for _, rate, _ in shown)
  assert "eval length 32: windows" in err  # 64 windows of 32, 4 per batch: 16 batches too
  runner.config.eval.batch_tokens = 1024  # 16 rows of 64 per batch: two batches, no lines
  lengths.sweep(runner, seqs, [64], np.ones(259), 32)
  assert "eval length 64: windows" not in capsys.readouterr().err


@pytest.mark.slow
def test_nothing_recompiles_across_lengths_and_variants(rope_run):
  config, workdir = rope_run
  compiles = []

  def listener(event, duration, **kw):
    if event.endswith("backend_compile_duration"):
      compiles.append(event)

  jax.monitoring.register_event_duration_secs_listener(listener)
  try:
    runner = _runner(config, workdir)
    seqs = _sequences(config, runner, 128)
    lengths.sweep(runner, seqs, [64, 128], np.ones(259), 32)
    first = len(compiles)
    lengths.sweep(runner, seqs, [64, 128], np.ones(259), 32)
    assert len(compiles) == first and first >= 2
  finally:
    jax.monitoring.unregister_event_duration_listener(listener)


@pytest.mark.slow
def test_trained_fields_are_refused_eval_time_ones_accepted(rope_run):
  config, workdir = rope_run
  other = tiny_config("alibi")
  with pytest.raises(
    ValueError,
    match=r"model.position.name='alibi' differs from the "
    r"checkpoint's 'rope': it is a trained field",
  ):
    evaluate.evaluate(other, workdir)
  wider = config.copy_and_resolve_references()
  wider.model.d_model = 128
  with pytest.raises(ValueError, match=r"model.d_model=128 differs from the checkpoint's 64"):
    evaluate.evaluate(wider, workdir)
  base = config.copy_and_resolve_references()
  base.model.position.base = 500000.0
  with pytest.raises(ValueError, match=r"model.position.base=500000.0 differs"):
    evaluate.evaluate(base, workdir)


@pytest.mark.slow
def test_eval_from_the_workdir_alone_on_the_command_line(rope_run, tmp_path):
  _, workdir = rope_run
  shutil.copytree(workdir, tmp_path / "run")
  shutil.rmtree(tmp_path / "run" / "eval", ignore_errors=True)
  out = run_lcx(
    [
      "--mode=eval",
      f"--workdir={tmp_path / 'run'}",
      "--config.eval.variants=none,dynamic@4,rerope@16",
      "--config.eval.multipliers=(1,2)",
    ]
  )
  assert sorted(os.listdir(tmp_path / "run" / "eval")) == [
    "dynamic@4.json",
    "none.json",
    "rerope@16.json",
  ]
  assert "| rerope@16 " in out.stdout
  proc = run_lcx(
    [
      "--mode=eval",
      f"--workdir={tmp_path / 'run'}",
      "--force",
      "--config=configs/base.py:pos=alibi,size=tiny",
      f"--config.data.data_dir={DATA_DIR}",
      "--config.data.seq_len=32",
    ],
    check=False,
  )
  assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith(
    "error: model.position.name='alibi' differs from the checkpoint's 'rope'"
  )
  assert "Traceback" not in proc.stderr
  assert len(os.listdir(tmp_path / "run" / "eval")) == 3  # nothing written


def test_missing_checkpoint_is_a_clear_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="no checkpoint in .*train first"):
    evaluate.evaluate(tiny_config(), str(tmp_path))
  assert os.listdir(tmp_path) == []  # no empty checkpoints/ left behind


def _texts(words, num=200):
  rng = np.random.default_rng(0)
  return [" ".join(rng.choice(words, 30)) for _ in range(num)]


def _sentencepiece_config(corpus, data_dir):
  config = tiny_config("alibi", steps=2, checkpoint_every=1000)
  config.data.update(
    name="text_files",
    text_files=str(corpus),
    data_dir=str(data_dir),
    tokenizer="sentencepiece",
    vocab_size=300,
  )
  config.eval.multipliers = (1,)
  config.eval.num_tokens = 256
  return config


@pytest.fixture(scope="module")
def sentencepiece_run(tmp_path_factory):
  """A 2-step run with a SentencePiece model trained in its data dir."""
  root = tmp_path_factory.mktemp("sp")
  (root / "corpus").mkdir()
  (root / "corpus" / "docs.jsonl").write_text(
    "".join(json.dumps({"text": t}) + "\n" for t in _texts(["alpha", "beta", "gamma", "delta"]))
  )
  config = _sentencepiece_config(root / "corpus", root / "data")
  train.train(config, str(root / "run"))
  return root, config


@pytest.mark.slow
def test_the_same_tokenizer_model_from_another_data_dir_is_accepted(sentencepiece_run):
  root, config = sentencepiece_run
  moved = _sentencepiece_config(root / "corpus", root / "moved")
  model = pipeline.sentencepiece_path(moved.data)
  model.parent.mkdir(parents=True)
  shutil.copy(pipeline.sentencepiece_path(config.data), model)
  result = evaluate.evaluate(moved, str(root / "run"))["none"]
  assert result["step"] == 2
  # loss / ln 2 / bits per byte = bytes per token: a SentencePiece piece holds several
  r = result["lengths"]["32"]
  assert r["loss"] / math.log(2) / r["bits_per_byte"] > 2


@pytest.mark.slow
def test_a_different_tokenizer_is_refused_naming_both(sentencepiece_run):
  root, config = sentencepiece_run
  other = _sentencepiece_config(root / "corpus", root / "other")  # same path scheme
  other_texts = [t.encode() for t in _texts(["one", "two", "three", "four", "five"])]
  tokenizers.train_sentencepiece(other_texts, 300, pipeline.sentencepiece_path(other.data), 0)
  sha = r"'sha256': '[0-9a-f]{64}'"
  with pytest.raises(
    ValueError,
    match=(
      rf"trained with tokenizer \{{'kind': 'sentencepiece', 'vocab_size': 300, {sha}\}}, "
      rf"data\.\* gives \{{'kind': 'sentencepiece', 'vocab_size': 300, {sha}\}}: "
      r"set data\.tokenizer, data\.vocab_size"
    ),
  ):
    evaluate.evaluate(other, str(root / "run"))


@pytest.mark.slow
def test_extension_method_changes_only_at_evaluation(rope_run):
  """The same RoPE weights evaluated with YaRN: other numbers past L, no retraining."""
  config, workdir = rope_run
  runner = _runner(config, workdir)
  yarn = config.copy_and_resolve_references()
  yarn.model.position.scaling.update(rope_type="yarn", factor=4.0)
  extended = _runner(yarn, workdir)
  seqs = _sequences(config, runner, 128)
  a = lengths.sweep(runner, seqs, [128], np.ones(259), 32)["lengths"]["128"]
  b = lengths.sweep(extended, seqs, [128], np.ones(259), 32)["lengths"]["128"]
  assert np.isfinite(b["loss"]) and a["loss"] != b["loss"]


def test_task_training_length_is_the_longest_trained_position():
  """copy@6 at seq_len 32: documents of BOS + 6 + '=' + 6 + EOS = 15 ids, positions 0..13."""
  config = tiny_config("learned")
  config.data.update(name="task", task="copy", task_min_len=1, task_max_len=6)
  prepared = prepare.prepare(config)
  assert prepared.config.model.max_len == 14
  assert prepared.abstract_params["position"]["table"].shape == (14, 64)
  rope = tiny_config("rope")
  rope.data.update(name="task", task="copy", task_min_len=1, task_max_len=6)
  rope.model.position.scaling.update(rope_type="yarn", factor=2.0)
  model = nnx_model(prepare.prepare(rope))
  assert model.position.scaling.original_max_position_embeddings == 14


def nnx_model(prepared):
  from flax import nnx

  return nnx.merge(
    prepared.graphdef, jax.tree.map(lambda a: np.zeros(a.shape, a.dtype), prepared.abstract_params)
  )


@pytest.mark.slow
def test_text_lengths_past_a_learned_table_are_skipped_with_the_reason(tmp_path):
  config = tiny_config("learned", steps=5, checkpoint_every=1000)
  config.eval.multipliers = (1, 2)
  train.train(config, str(tmp_path))
  result = evaluate.evaluate(config, str(tmp_path))["none"]
  assert list(result["lengths"]) == ["32"]
  assert "the learned table has 32 positions" in result["skipped"]["64"]


def test_several_protocols_and_document_sets_in_one_call_never_overwrite(rope_run):
  config, workdir = rope_run
  config = config.copy_and_resolve_references()
  config.eval.update(
    variants="none",
    protocol="windows,sliding,last_k",
    documents="stream,long",
    stride=16,
    multipliers=(1, 2),
  )
  results = evaluate.evaluate(config, workdir)
  assert set(results) >= {
    "none",
    "none.sliding-stream",
    "none.windows-long",
    "none.sliding-long",
    "none.last_k-long",
  }
  assert "none.last_k-stream" not in results  # last_k scores long documents only
  for name, r in results.items():
    assert os.path.exists(f"{workdir}/eval/{name}.json")
    assert (
      name == "none"
      or name.split(".")[1] == f"{r['protocol']['protocol']}-{r['protocol']['documents']}"
    )


def _untrained_runner(config):
  """A Runner over freshly initialized parameters (no training: the positions are the point)."""
  from flax import nnx

  from lcx.model.decoder import Decoder

  prepared = prepare.prepare(config)
  params = nnx.state(Decoder(prepared.config.model, rngs=nnx.Rngs(0)), nnx.Param)
  return runner_lib.Runner(prepared, params)


def test_eval_random_positions_change_what_the_model_sees_and_are_seeded():
  """Two packed documents (12 + 20 tokens) per row: with eval.random_positions each gets a
  sorted sample of [0, 1024), the same on every call and in any batching; ALiBi's loss moves."""
  rng = np.random.default_rng(0)
  inputs, targets = (rng.integers(0, 256, (6, 32)).astype(np.int32) for _ in range(2))
  pos = np.tile(np.concatenate([np.arange(12), np.arange(20)]), (6, 1)).astype(np.int32)
  seg = np.tile(np.array([1] * 12 + [2] * 20, np.int32), (6, 1))
  config = tiny_config("alibi")
  plain = _untrained_runner(config)
  config.eval.random_positions = 1024
  sampled = _untrained_runner(config)
  seen = sampled.model_positions(pos, seg)
  np.testing.assert_array_equal(plain.model_positions(pos, seg), pos)
  assert seen.min() >= 0 and seen.max() < 1024 and seen.max() > 32
  for doc in (seen[:, :12], seen[:, 12:]):
    assert np.all(np.diff(doc, axis=1) > 0)
  np.testing.assert_array_equal(seen, sampled.model_positions(pos, seg))
  nll = sampled.nll(inputs, targets, pos, seg)
  assert np.abs(nll - plain.nll(inputs, targets, pos, seg)).max() > 1e-3
  np.testing.assert_array_equal(nll, sampled.nll(inputs, targets, pos, seg))
  config.eval.batch_tokens = 64  # two rows per batch instead of all six
  np.testing.assert_allclose(
    _untrained_runner(config).nll(inputs, targets, pos, seg), nll, rtol=1e-5, atol=1e-6
  )
  config.eval.sample_seed = 1
  assert not np.array_equal(_untrained_runner(config).model_positions(pos, seg), seen)


def test_eval_random_positions_name_the_results_and_enter_their_overrides():
  config = tiny_config("rope")
  config.eval.variants = "none,yarn@4"
  config.eval.random_positions = 256
  todo = evaluate.plan(prepare.prepare(config))
  assert [name for name, *_ in todo] == ["none.random256", "yarn@4.random256"]
  for _, _, changes, variant_cfg in todo:
    assert changes["eval.random_positions"] == 256
    assert variant_cfg.eval.random_positions == 256
  changes, passkey_cfg = kinds.plain_positions(todo[1][2], todo[1][3])
  assert "eval.random_positions" not in changes and passkey_cfg.eval.random_positions == 0
  assert changes[evaluate.variants.SCALING]["rope_type"] == "yarn"
  config.eval.random_positions = 0
  plain = evaluate.plan(prepare.prepare(config))
  assert [name for name, *_ in plain] == ["none", "yarn@4"]
  assert evaluate._settings("lengths", todo[0][3], "none", todo[0][2], [32]) != (
    evaluate._settings("lengths", plain[0][3], "none", plain[0][2], [32])
  )


def test_a_remap_the_config_sets_is_in_the_variant_and_its_file_name():
  """`eval --config.model.remap.name=rerope`: the run evaluated with ReRoPE is not `none` (the
  run as trained), nor yarn@4 with it plain yarn@4; a variant that sets its own remap keeps its
  name."""
  from lcx.model.positions import fields

  config = tiny_config("rope")
  config.model.remap = fields.remap_config("rerope")
  config.eval.variants = "none,yarn@4,self_extend@16/2"
  todo = evaluate.plan(prepare.prepare(config))
  assert [(name, spec) for name, spec, *_ in todo] == [
    ("none+rerope", "none+rerope"),
    ("yarn@4+rerope", "yarn@4+rerope"),
    ("self_extend@16_2", "self_extend@16/2"),
  ]
  assert [variant_cfg.model.remap.name for *_, variant_cfg in todo] == [
    "rerope",
    "rerope",
    "self_extend",
  ]
  config.model.remap.window = 16
  config.model.remap.log_n_scaling = False
  config.eval.variants = "none"
  (todo,) = evaluate.plan(prepare.prepare(config))
  assert todo[:2] == (
    "none+rerope@log_n_scaling=False_window=16",
    "none+rerope@log_n_scaling=False/window=16",
  )


def test_a_randomized_run_is_scored_at_randomized_positions_unless_told_otherwise():
  """Ruoss et al. score randomized-position models at sampled positions: the default
  eval.random_positions=-1 takes train.random_positions; 0 scores at plain positions."""
  config = tiny_config("rope", random_positions=256)
  assert config.eval.random_positions == -1
  todo = evaluate.plan(prepare.prepare(config))
  assert [(name, changes) for name, _, changes, _ in todo] == [
    ("none.random256", {"eval.random_positions": 256})
  ]
  assert todo[0][3].eval.random_positions == 256
  config.eval.random_positions = 0
  assert [name for name, *_ in evaluate.plan(prepare.prepare(config))] == ["none"]
  plain = evaluate.plan(prepare.prepare(tiny_config("rope")))  # not randomized: plain positions
  assert [name for name, *_ in plain] == ["none"] and plain[0][3].eval.random_positions == 0
  short = tiny_config("rope", random_positions=64)  # eval lengths reach 256
  with pytest.raises(ValueError, match=r"eval.random_positions=64 is not allowed.*takes train"):
    evaluate.plan(prepare.prepare(short))
