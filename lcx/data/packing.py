"""Turning variable-length token sequences into fixed-length training rows.

An example is `{"ids": int32[N], "loss_mask": float32[N]}`: a whole document
`[BOS] + tokens + [EOS]` and the weight of predicting each id. `shift` makes the
next-token pair; a packer (`PACKERS`) lays pairs into rows of `seq_len`, numbering
documents within a row 1, 2, ... (0 = padding) and restarting positions at 0 for each.
A document cut by `concat` continues on the next row with positions from 0 again.
"""

import grain
import numpy as np

FEATURES = ("inputs", "targets", "loss_mask")


def shift(example: dict) -> dict:
  """The next-token pair of one example: inputs[t] predicts targets[t] = ids[t + 1]."""
  ids_N = np.asarray(example["ids"], dtype=np.int32)
  loss_mask_N = np.asarray(example["loss_mask"], dtype=np.float32)
  return {"inputs": ids_N[:-1], "targets": ids_N[1:], "loss_mask": loss_mask_N[1:]}


def _concat(pairs: grain.IterDataset, seq_len: int, seed: int) -> grain.IterDataset:
  del seed  # Concatenation keeps the (already shuffled) order.
  return grain.experimental.ConcatThenSplitIterDataset(
    pairs, length_struct={name: seq_len for name in FEATURES}
  )


def _check_fits(pair: dict, seq_len: int) -> dict:
  if len(pair["inputs"]) > seq_len:
    raise ValueError(
      f"An example of {len(pair['inputs']) + 1} tokens does not fit data.seq_len="
      f"{seq_len} with data.packing='first_fit'; raise data.seq_len, lower"
      " data.task_max_len, or use data.packing='concat'."
    )
  return pair


def _first_fit(pairs: grain.IterDataset, seq_len: int, seed: int) -> grain.IterDataset:
  return grain.experimental.FirstFitPackIterDataset(
    pairs.map(lambda pair: _check_fits(pair, seq_len)),
    length_struct={name: seq_len for name in FEATURES},
    num_packing_bins=8,
    seed=seed,
  )


PACKERS = {"concat": _concat, "first_fit": _first_fit}


def rows(packed: dict, pad_id: int) -> dict:
  """The contract's fields of packed rows (any leading shape), PAD where no document."""
  segment_ids = np.asarray(packed["inputs_segment_ids"], dtype=np.int32)
  is_document = segment_ids > 0
  return {
    "inputs": np.where(is_document, packed["inputs"], pad_id).astype(np.int32),
    "targets": np.where(is_document, packed["targets"], pad_id).astype(np.int32),
    "segment_ids": segment_ids,
    "positions": np.asarray(packed["inputs_positions"], dtype=np.int32),
    "loss_mask": np.where(is_document, packed["loss_mask"], 0.0).astype(np.float32),
  }


def pack_and_batch(
  examples: grain.IterDataset,
  *,
  packing: str,
  seq_len: int,
  batch_size: int,
  pad_id: int,
  seed: int,
) -> grain.IterDataset:
  """Examples -> batches `[batch_size, seq_len]` of the contract's fields."""
  packed = PACKERS[packing](examples.map(shift), seq_len, seed)
  return packed.batch(batch_size, drop_remainder=True).map(lambda batch: rows(batch, pad_id))
