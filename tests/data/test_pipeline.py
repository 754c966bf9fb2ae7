import re

import grain
import numpy as np
import orbax.checkpoint as ocp
import pytest

import lcx.data
from lcx.data import corpus, sources


def _take(iterator, k):
  return [next(iterator) for _ in range(k)]


def _assert_same_batches(batches_a, batches_b):
  assert len(batches_a) == len(batches_b)
  for a, b in zip(batches_a, batches_b):
    assert a.keys() == b.keys()
    for name in a:
      np.testing.assert_array_equal(a[name], b[name])


def _document_numbers(batches, tokenizer):
  """Which fake-stdlib documents ("# document NNN") appear in the batches' rows."""
  found = set()
  for batch in batches:
    for inputs_L, segment_ids_L in zip(batch["inputs"], batch["segment_ids"]):
      text = tokenizer.decode(inputs_L[segment_ids_L > 0])
      found.update(int(n) for n in re.findall(r"document (\d{3})", text))
  return found


def test_batches_follow_the_contract(fake_stdlib_cfg):
  batch = next(lcx.data.make_train_iterator(fake_stdlib_cfg))
  assert batch["inputs"].shape == (4, 64)
  assert batch["inputs"][0, 0] == lcx.data.get_tokenizer(fake_stdlib_cfg).bos_id
  assert set(batch) == {"inputs", "targets", "segment_ids", "positions", "loss_mask"}


def test_same_seed_same_batches_other_seed_other_batches(fake_stdlib_cfg):
  first = _take(lcx.data.make_train_iterator(fake_stdlib_cfg), 3)
  _assert_same_batches(first, _take(lcx.data.make_train_iterator(fake_stdlib_cfg), 3))
  fake_stdlib_cfg.seed = 1
  other = _take(lcx.data.make_train_iterator(fake_stdlib_cfg), 3)
  assert not np.array_equal(first[0]["inputs"], other[0]["inputs"])


def test_iterator_repeats_epochs_forever(fake_stdlib_cfg):
  iterator = lcx.data.make_train_iterator(fake_stdlib_cfg)
  num_train_tokens = sum(len(doc) + 2 for doc in sources.split_texts(fake_stdlib_cfg, corpus.TRAIN))
  batch_tokens = fake_stdlib_cfg.batch_size * fake_stdlib_cfg.seq_len
  batches = _take(iterator, 3 * num_train_tokens // batch_tokens)  # ~3 epochs.
  assert all(b["inputs"].shape == (4, 64) for b in batches)


def test_iterator_resumes_exactly_from_a_saved_state(fake_stdlib_cfg):
  iterator = lcx.data.make_train_iterator(fake_stdlib_cfg)
  _take(iterator, 5)
  state = iterator.get_state()
  expected = _take(iterator, 4)
  resumed = lcx.data.make_train_iterator(fake_stdlib_cfg)
  resumed.set_state(state)
  _assert_same_batches(expected, _take(resumed, 4))


def test_iterator_resumes_through_orbax_grain_handlers(fake_stdlib_cfg, tmp_path):
  iterator = lcx.data.make_train_iterator(fake_stdlib_cfg)
  _take(iterator, 3)
  with ocp.CheckpointManager(tmp_path / "ckpt") as manager:
    manager.save(3, args=ocp.args.Composite(data=grain.checkpoint.CheckpointSave(iterator)))
    manager.wait_until_finished()
    expected = _take(iterator, 3)
    resumed = lcx.data.make_train_iterator(fake_stdlib_cfg)
    manager.restore(3, args=ocp.args.Composite(data=grain.checkpoint.CheckpointRestore(resumed)))
  _assert_same_batches(expected, _take(resumed, 3))


def test_processes_get_their_share_of_rows_from_disjoint_documents(fake_stdlib_cfg):
  tokenizer = lcx.data.get_tokenizer(fake_stdlib_cfg)
  per_process = []
  for process_index in range(2):
    iterator = lcx.data.make_train_iterator(
      fake_stdlib_cfg, process_index=process_index, process_count=2
    )
    batches = _take(iterator, 20)
    assert all(b["inputs"].shape == (2, 64) for b in batches)
    per_process.append(_document_numbers(batches, tokenizer))
  assert per_process[0] and per_process[1]
  assert per_process[0].isdisjoint(per_process[1])


def test_batch_size_must_split_across_processes(fake_stdlib_cfg):
  fake_stdlib_cfg.batch_size = 3
  with pytest.raises(ValueError, match="data.batch_size"):
    lcx.data.make_train_iterator(fake_stdlib_cfg, process_index=0, process_count=2)


def test_the_dataset_is_built_once_and_reused(fake_stdlib_cfg, monkeypatch):
  lcx.data.make_train_iterator(fake_stdlib_cfg)

  def fail_to_collect(*args, **kwargs):
    raise AssertionError("the corpus was built a second time")

  monkeypatch.setattr(corpus.LcxCorpus, "_split_generators", fail_to_collect)
  next(lcx.data.make_train_iterator(fake_stdlib_cfg))


def test_validation_tokens_are_deterministic_documents_in_key_order(fake_stdlib_cfg):
  tokenizer = lcx.data.get_tokenizer(fake_stdlib_cfg)
  documents = lcx.data.validation_documents(fake_stdlib_cfg)
  numbers = [int(re.search(r"\d{3}", tokenizer.decode(d)).group()) for d in documents]
  # Keys are paths pkg{i % 3}/mod{i}.py, so key order is by (i % 3, i).
  assert numbers == sorted(numbers, key=lambda i: (i % 3, i))
  assert all(d[0] == tokenizer.bos_id and d[-1] == tokenizer.eos_id for d in documents)
  total = sum(len(d) for d in documents)
  tokens_T = lcx.data.validation_tokens(fake_stdlib_cfg, total - 5)
  np.testing.assert_array_equal(tokens_T, np.concatenate(documents)[: total - 5])
  np.testing.assert_array_equal(tokens_T, lcx.data.validation_tokens(fake_stdlib_cfg, total - 5))


def test_validation_tokens_refuses_to_return_fewer_than_asked(fake_stdlib_cfg):
  total = sum(len(d) for d in lcx.data.validation_documents(fake_stdlib_cfg))
  assert len(lcx.data.validation_tokens(fake_stdlib_cfg, total)) == total
  with pytest.raises(ValueError, match=f"has {total} tokens"):
    lcx.data.validation_tokens(fake_stdlib_cfg, total + 1)


def test_sentencepiece_is_trained_once_on_train_and_used_for_batches(fake_stdlib_cfg, monkeypatch):
  from lcx.data import pipeline, tokenizers

  fake_stdlib_cfg.update(tokenizer="sentencepiece", vocab_size=300)
  tokenizer = lcx.data.get_tokenizer(fake_stdlib_cfg)
  metadata = tokenizer.metadata()
  assert metadata["kind"] == "sentencepiece" and metadata["vocab_size"] == 300
  assert metadata["model_path"] == str(pipeline.sentencepiece_path(fake_stdlib_cfg))

  def fail_to_train(*args, **kwargs):
    raise AssertionError("the tokenizer was trained a second time")

  monkeypatch.setattr(tokenizers, "train_sentencepiece", fail_to_train)
  assert lcx.data.get_tokenizer(fake_stdlib_cfg).metadata() == metadata
  batch = next(lcx.data.make_train_iterator(fake_stdlib_cfg))
  assert batch["inputs"].max() < 300 and batch["inputs"][0, 0] == tokenizer.bos_id
  text = tokenizer.decode(batch["inputs"][0][batch["segment_ids"][0] == 1])
  assert "# document" in text


def test_concurrent_first_use_trains_sentencepiece_once(fake_stdlib_cfg, monkeypatch):
  import concurrent.futures
  import time

  from lcx.data import tokenizers

  calls, train = [], tokenizers.train_sentencepiece

  def slow_train(*args, **kwargs):
    calls.append(1)
    time.sleep(0.5)  # Widens the window in which an unlocked racer would train too.
    return train(*args, **kwargs)

  monkeypatch.setattr(tokenizers, "train_sentencepiece", slow_train)
  fake_stdlib_cfg.update(tokenizer="sentencepiece", vocab_size=300)
  with concurrent.futures.ThreadPoolExecutor(3) as pool:
    loaded = list(pool.map(lambda _: lcx.data.get_tokenizer(fake_stdlib_cfg), range(3)))
  assert calls == [1]
  assert len({t.metadata()["sha256"] for t in loaded}) == 1


def test_sentencepiece_training_text_is_capped():
  from lcx.data import pipeline

  texts = [b"x" * 10] * 10
  assert len(list(pipeline.take_bytes(texts, 25))) == 3
  assert len(list(pipeline.take_bytes(texts, 1000))) == 10
