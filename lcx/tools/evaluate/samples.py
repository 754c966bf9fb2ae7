"""Which tokens an evaluation scores and with what context: the protocols, as pure numpy.

A document is `[BOS] + tokens + [EOS]`; it becomes next-token pairs exactly as in training
(inputs ids[:-1], targets ids[1:]), so no target crosses a document boundary.

Documents (`eval.documents`), drawn once per evaluation with `eval.sample_seed` across the whole
validation split and shared by every eval length, so every length scores the same tokens:
  stream  pairs of the drawn documents concatenated, cut into windows as training's `concat`
          packing cuts rows: inside a window each document is its own segment (no attention across
          documents) with positions from 0, and a document cut by a window edge starts again at
          position 0 in the next window. The stream is a whole number of the longest length.
          So that no one large file makes most of the sample, a document contributes at most
          `stream_cap` pairs (1/32 of the stream, or 1/n of it from a split of n < 32), a
          contiguous piece at a seeded offset (a piece starts at position 0, as a training row
          that continues a document does).
  long    only documents with at least as many pairs as the longest eval length, each truncated
          to that many pairs and cut into windows on its own (PI / YaRN / LongRoPE): at every
          length the windows lie inside one document.
Protocols (`eval.protocol`: windows, sliding, last_k) decide where windows start and which of
their tokens are scored: one record each in lcx/config/protocols.py.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from lcx import errors
from lcx.config.protocols import PROTOCOLS

DOCUMENTS = ("stream", "long")
# The validation split in two named parts, fixed for every run, seed and tokenizer: "search"
# is what a search fits on (the LongRoPE fitness), "evaluation" what every evaluation scores.
SPLITS = ("evaluation", "search")
SEARCH_FRACTION = 0.25
SEARCH_SEED = 2402  # LongRoPE's arXiv number: any fixed value; changing it moves the split


@dataclasses.dataclass(frozen=True)
class Sequence:
  """A run of next-token pairs cut into windows together: `doc_N` is each pair's source
  document (an index into the split), `start_N` marks the first pair of each document."""

  inputs_N: np.ndarray
  targets_N: np.ndarray
  doc_N: np.ndarray
  start_N: np.ndarray


@dataclasses.dataclass(frozen=True)
class Windows:
  """Model inputs for one eval length, and which tokens count: `scored_NxT` (bool) and
  `doc_NxT` (source document of each token, for confidence intervals)."""

  inputs_NxT: np.ndarray
  targets_NxT: np.ndarray
  positions_NxT: np.ndarray
  segments_NxT: np.ndarray
  scored_NxT: np.ndarray
  doc_NxT: np.ndarray


def stream_cap(budget: int, longest: int, documents: int = 32) -> int:
  """The most pairs one document adds to a stream of `budget`: >= 32 documents in a sample, or
  an equal share of the budget each where the split holds fewer (7 books): a small split is then
  scored on every window it holds up to the budget, not on 1/32 of the budget per document."""
  share = budget // 32 if documents >= 32 else -(-budget // max(1, documents))  # reach the budget
  return max(longest, share)


def _pairs(ids_N: np.ndarray, doc: int) -> Sequence:
  n = len(ids_N) - 1
  start_N = np.zeros(n, bool)
  start_N[:1] = True
  return Sequence(ids_N[:-1], ids_N[1:], np.full(n, doc, np.int32), start_N)


def _concat(parts: list[Sequence], limit: int) -> Sequence:
  return Sequence(
    *(
      np.concatenate([getattr(p, f.name) for p in parts])[:limit]
      for f in dataclasses.fields(Sequence)
    )
  )


def split_ids(num_docs: int, name: str) -> list[int]:
  """Indices of the validation documents in split `name`: "search", a seeded quarter of them
  (at least one; none with fewer than three documents, so that evaluation keeps two and its
  interval over documents stays defined), or "evaluation", every other one. The two never share
  a document, whatever the settings of the search or the evaluation."""
  if name not in SPLITS:
    raise errors.not_allowed("split", name, SPLITS)
  order = np.random.default_rng(SEARCH_SEED).permutation(num_docs)
  count = 0 if num_docs < 3 else max(1, round(SEARCH_FRACTION * num_docs))
  search = {int(d) for d in order[:count]}
  return [d for d in range(num_docs) if (d in search) == (name == "search")]


def select(
  documents: list[np.ndarray],
  mode: str,
  longest: int,
  num_tokens: int,
  seed: int,
  split: str | None = None,
) -> list[Sequence]:
  """The sequences every eval length cuts, from documents drawn in a seeded order; with
  `split`, only from that part of the validation split (`split_ids`; ids stay the split's).

  stream: documents until the stream holds max(1, num_tokens // longest) * longest pairs (fewer
  whole multiples of `longest` if the split is smaller); long: documents of >= `longest` pairs
  until their count x longest reaches num_tokens, each truncated to `longest` pairs.
  Raises ValueError when not even one window of `longest` tokens can be made.
  """
  rng = np.random.default_rng(seed)
  order = rng.permutation(len(documents))
  if split is not None:
    allowed = set(split_ids(len(documents), split))
    order = np.asarray([d for d in order if d in allowed], np.int64)
  if mode == "stream":
    budget, parts, have = max(1, num_tokens // longest) * longest, [], 0
    cap = stream_cap(budget, longest, len(order))
    for d in order:
      if have >= budget:
        break
      ids_N = documents[d]
      if len(ids_N) - 1 > cap:
        offset = int(rng.integers(0, len(ids_N) - 1 - cap + 1))
        ids_N = ids_N[offset : offset + cap + 1]
      parts.append(_pairs(ids_N, int(d)))
      have += len(ids_N) - 1
    if have < longest:
      raise ValueError(
        f"eval.documents='stream': the validation split has {have} tokens, "
        f"fewer than one window of the longest eval length {longest}; lower "
        "eval.lengths / eval.multipliers"
      )
    return [_concat(parts, min(budget, have // longest * longest))]
  if mode != "long":
    raise errors.not_allowed("eval.documents", mode, DOCUMENTS)
  chosen = [int(d) for d in order if len(documents[d]) - 1 >= longest]
  if not chosen:
    most = max((len(documents[d]) - 1 for d in order), default=0)
    where = "validation document" if split is None else f"document of the {split} split"
    raise ValueError(
      f"eval.documents='long': no {where} has {longest} tokens "
      f"(the longest eval length; the longest document has {most}); lower "
      "eval.lengths / eval.multipliers or use eval.documents='stream'"
    )
  chosen = chosen[: max(1, -(-num_tokens // longest))]
  return [_concat([_pairs(documents[d], d)], longest) for d in chosen]


def fingerprint(sequences: list[Sequence]) -> str:
  """A hash of every token and document boundary `sequences` hold: what an evaluation scores,
  so a result is reused only for the same tokens (validation files edited in place give other
  tokens under the same settings)."""
  digest = hashlib.sha256()
  for seq in sequences:
    for field in dataclasses.fields(Sequence):
      array = np.ascontiguousarray(getattr(seq, field.name))
      digest.update(f"{field.name}:{array.dtype}:{array.shape}".encode())
      digest.update(array.tobytes())
  return digest.hexdigest()[:16]


def shortfall(sequences: list[Sequence], num_tokens: int, longest: int) -> str | None:
  """Why the sample holds fewer tokens than `num_tokens` asked, beyond the rounding down to
  whole windows of `longest` (None when it does not): a small validation split, or one whose
  documents `stream_cap` trims, scores far fewer tokens than the user expects."""
  have = sum(len(s.inputs_N) for s in sequences)
  if have >= max(1, num_tokens // longest) * longest:
    return None
  documents = len(np.unique(np.concatenate([s.doc_N for s in sequences])))
  return (
    f"eval.num_tokens={num_tokens}, but the sample holds only {have} tokens per length "
    f"({documents} validation document{'s' * (documents != 1)}, windows of up to {longest}): "
    "intervals are wide; a larger validation split gives more"
  )


def cut(
  sequences: list[Sequence], length: int, protocol: str, *, stride: int = 0, last_k: int = 0
) -> Windows:
  """Windows of `length` over every sequence under `protocol` (see the module docstring)."""
  if protocol not in PROTOCOLS:
    raise errors.not_allowed("eval.protocol", protocol, PROTOCOLS)
  record, settings = PROTOCOLS[protocol], {"stride": stride, "last_k": last_k}
  rows = []
  for seq in sequences:
    scored_until = 0
    for s in record.starts(len(seq.inputs_N), length, settings):
      window = slice(s, s + length)
      idx_T = np.arange(length)
      start_T = seq.start_N[window].copy()
      start_T[0] = True  # a document cut by the window edge restarts here, as in training
      segments_T = np.cumsum(start_T).astype(np.int32)
      positions_T = (idx_T - np.maximum.accumulate(np.where(start_T, idx_T, 0))).astype(np.int32)
      scored_T = record.scored(s, length, scored_until, settings)
      scored_until = s + length
      rows.append(
        (
          seq.inputs_N[window],
          seq.targets_N[window],
          positions_T,
          segments_T,
          scored_T,
          seq.doc_N[window],
        )
      )
  return Windows(*(np.stack(column) for column in zip(*rows)))
