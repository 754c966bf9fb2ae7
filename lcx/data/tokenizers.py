"""Tokenizers: bytes (the default) and a SentencePiece model trained on the train split.

Both expose the same small interface (`vocab_size`, `bos_id`, `eos_id`, `pad_id`,
`encode`, `decode`, `metadata`). `metadata()` is what a checkpoint records; evaluation
compares its `identity` only, so the same model file in another data dir is accepted
and a different one is refused.
"""

import dataclasses
import hashlib
import io
import pathlib
from collections.abc import Iterable

import numpy as np

from lcx import files


def _as_bytes(text: str | bytes) -> bytes:
  return text.encode("utf-8") if isinstance(text, str) else bytes(text)


@dataclasses.dataclass(frozen=True)
class ByteTokenizer:
  """One id per UTF-8 byte (0..255), then BOS=256, EOS=257, PAD=258."""

  vocab_size: int = 259
  bos_id: int = 256
  eos_id: int = 257
  pad_id: int = 258

  def encode(self, text: str | bytes) -> np.ndarray:
    return np.frombuffer(_as_bytes(text), dtype=np.uint8).astype(np.int32)

  def decode(self, ids) -> str:
    ids_N = np.asarray(ids, dtype=np.int64)
    return bytes(ids_N[ids_N < 256].astype(np.uint8)).decode("utf-8", errors="replace")

  def byte_lengths(self) -> np.ndarray:
    """UTF-8 bytes each id stands for (0 for BOS, EOS, PAD): bits per byte's denominator."""
    return (np.arange(self.vocab_size) < 256).astype(np.int32)

  def metadata(self) -> dict:
    return {"kind": "byte", "vocab_size": self.vocab_size}


class SentencePieceTokenizer:
  """A SentencePiece model loaded from a file; ids 0..3 are PAD, UNK, BOS, EOS."""

  def __init__(self, model_path: pathlib.Path):
    import sentencepiece as spm  # Deferred: only sentencepiece runs need it.

    self.model_path = pathlib.Path(model_path)
    model_bytes = self.model_path.read_bytes()
    self._sha256 = hashlib.sha256(model_bytes).hexdigest()
    self._sp = spm.SentencePieceProcessor(model_proto=model_bytes)
    self.vocab_size = self._sp.get_piece_size()
    self.bos_id = self._sp.bos_id()
    self.eos_id = self._sp.eos_id()
    self.pad_id = self._sp.pad_id()

  def encode(self, text: str | bytes) -> np.ndarray:
    text_str = text if isinstance(text, str) else bytes(text).decode("utf-8")
    return np.asarray(self._sp.encode(text_str), dtype=np.int32)

  def decode(self, ids) -> str:
    special = {self.bos_id, self.eos_id, self.pad_id}
    return self._sp.decode([int(i) for i in ids if int(i) not in special])

  def byte_lengths(self) -> np.ndarray:
    """UTF-8 bytes each id stands for: a piece's text ('▁' is one space), 1 for a byte
    fallback piece, 0 for control and unknown ids. Bits per byte's denominator, so byte and
    SentencePiece runs compare."""
    out = np.zeros(self.vocab_size, np.int32)
    for i in range(self.vocab_size):
      if self._sp.is_byte(i):
        out[i] = 1
      elif not (self._sp.is_control(i) or self._sp.is_unknown(i)):
        out[i] = len(self._sp.id_to_piece(i).replace("▁", " ").encode("utf-8"))
    return out

  def metadata(self) -> dict:
    return {
      "kind": "sentencepiece",
      "vocab_size": self.vocab_size,
      "model_path": str(self.model_path),
      "sha256": self._sha256,
    }


# What makes two tokenizers the same; where a model file lives (model_path) does not.
IDENTITY_FIELDS = ("kind", "vocab_size", "sha256")


def identity(metadata: dict) -> dict:
  """The identity fields of a tokenizer's `metadata()` (bytes have no sha256)."""
  return {field: metadata[field] for field in IDENTITY_FIELDS if field in metadata}


def train_sentencepiece(
  documents: Iterable[bytes], vocab_size: int, model_path: pathlib.Path, seed: int
) -> pathlib.Path:
  """Trains a BPE model with byte fallback on `documents` and writes it atomically.

  Training is single-threaded with a fixed seed so the same corpus gives the same model.
  """
  import sentencepiece as spm

  def lines():
    for document in documents:
      for line in document.decode("utf-8").splitlines():
        if line.strip():
          yield line

  spm.set_random_generator_seed(seed)
  model_io = io.BytesIO()
  spm.SentencePieceTrainer.train(
    sentence_iterator=lines(),
    model_writer=model_io,
    vocab_size=vocab_size,
    model_type="bpe",
    byte_fallback=True,
    character_coverage=1.0,
    pad_id=0,
    unk_id=1,
    bos_id=2,
    eos_id=3,
    num_threads=1,
    input_sentence_size=2_000_000,
    shuffle_input_sentence=True,
    max_sentence_length=16384,
    remove_extra_whitespaces=False,
    split_digits=True,
    minloglevel=2,
  )
  model_path = pathlib.Path(model_path)
  model_path.parent.mkdir(parents=True, exist_ok=True)
  files.write_atomic(str(model_path), model_io.getvalue())
  return model_path
