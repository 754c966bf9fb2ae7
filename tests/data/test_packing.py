import grain
import numpy as np
import pytest

from lcx.data import packing

PAD = 99
SEQ_LEN = 16


def _documents():
  """Documents of lengths 3..40 (some longer than SEQ_LEN); ids are 1000*doc + t."""
  lengths = [3, 40, 5, 17, 2, 9, 33, 4, 16, 12]
  return [1000 * (d + 1) + np.arange(n, dtype=np.int32) for d, n in enumerate(lengths)]


def _batches(documents, packing_name, loss_masks=None, batch_size=2):
  examples = [
    {
      "ids": ids,
      "loss_mask": np.ones(len(ids), np.float32) if loss_masks is None else loss_masks[i],
    }
    for i, ids in enumerate(documents)
  ]
  batches = packing.pack_and_batch(
    grain.MapDataset.source(examples).to_iter_dataset(),
    packing=packing_name,
    seq_len=SEQ_LEN,
    batch_size=batch_size,
    pad_id=PAD,
    seed=0,
  )
  return list(batches)


def _rows(batches):
  for batch in batches:
    for b in range(batch["inputs"].shape[0]):
      yield {name: values[b] for name, values in batch.items()}


@pytest.mark.parametrize("packing_name", ["concat", "first_fit"])
def test_rows_have_contract_shapes_and_dtypes(packing_name):
  batch = _batches([d[:SEQ_LEN] for d in _documents()], packing_name)[0]
  assert {name: (v.shape, v.dtype.name) for name, v in batch.items()} == {
    "inputs": ((2, SEQ_LEN), "int32"),
    "targets": ((2, SEQ_LEN), "int32"),
    "segment_ids": ((2, SEQ_LEN), "int32"),
    "positions": ((2, SEQ_LEN), "int32"),
    "loss_mask": ((2, SEQ_LEN), "float32"),
  }


@pytest.mark.parametrize("packing_name", ["concat", "first_fit"])
def test_positions_restart_and_targets_are_next_tokens_within_a_segment(packing_name):
  documents = _documents() if packing_name == "concat" else [d[: SEQ_LEN + 1] for d in _documents()]
  for row in _rows(_batches(documents, packing_name)):
    segment_ids = row["segment_ids"]
    for segment in set(segment_ids[segment_ids > 0].tolist()):
      where = np.flatnonzero(segment_ids == segment)
      assert np.all(np.diff(where) == 1), "a segment must be contiguous"
      np.testing.assert_array_equal(row["positions"][where], np.arange(len(where)))
      # ids are 1000*doc + t, so next token means +1 and the same document.
      np.testing.assert_array_equal(row["targets"][where], row["inputs"][where] + 1)
      assert len(set((row["inputs"][where] // 1000).tolist())) == 1


@pytest.mark.parametrize("packing_name", ["concat", "first_fit"])
def test_padding_is_pad_with_zero_loss(packing_name):
  batches = _batches([d[:SEQ_LEN] for d in _documents()], packing_name, batch_size=1)
  padded = [row for row in _rows(batches) if np.any(row["segment_ids"] == 0)]
  assert padded, "this test needs at least one padded row"
  for row in padded:
    is_pad = row["segment_ids"] == 0
    assert np.all(row["inputs"][is_pad] == PAD)
    assert np.all(row["targets"][is_pad] == PAD)
    assert np.all(row["loss_mask"][is_pad] == 0.0)
    assert np.all(row["loss_mask"][~is_pad] == 1.0)


def test_concat_splits_long_documents_across_rows_and_drops_nothing():
  documents = _documents()
  rows = list(_rows(_batches(documents, "concat", batch_size=1)))
  inputs = np.concatenate([r["inputs"][r["segment_ids"] > 0] for r in rows])
  targets = np.concatenate([r["targets"][r["segment_ids"] > 0] for r in rows])
  np.testing.assert_array_equal(inputs, np.concatenate([d[:-1] for d in documents]))
  np.testing.assert_array_equal(targets, np.concatenate([d[1:] for d in documents]))


def test_loss_mask_follows_the_predicted_token():
  ids = np.arange(6, dtype=np.int32)
  answer_mask = np.array([0, 0, 0, 1, 1, 0], np.float32)  # ids 3 and 4 are the answer.
  row = next(_rows(_batches([ids], "first_fit", loss_masks=[answer_mask], batch_size=1)))
  is_answer_target = row["loss_mask"] == 1.0
  np.testing.assert_array_equal(row["targets"][is_answer_target], [3, 4])


def test_first_fit_rejects_an_example_longer_than_seq_len():
  with pytest.raises(ValueError, match="data.seq_len"):
    _batches([np.arange(SEQ_LEN + 2, dtype=np.int32)], "first_fit")
