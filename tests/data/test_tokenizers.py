import hashlib
import json

import numpy as np

from lcx.data import tokenizers


def test_byte_tokenizer_round_trips_utf8_and_keeps_specials_apart():
  tokenizer = tokenizers.ByteTokenizer()
  ids_N = tokenizer.encode("héllo ✓")
  assert ids_N.dtype == np.int32
  assert ids_N.tolist() == list("héllo ✓".encode("utf-8"))
  assert tokenizer.decode(ids_N) == "héllo ✓"
  assert tokenizer.encode(b"\x00\xff").tolist() == [0, 255]
  specials = [tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id]
  assert sorted(specials) == [256, 257, 258] and tokenizer.vocab_size == 259
  assert tokenizer.decode([tokenizer.bos_id, 104, 105, tokenizer.eos_id]) == "hi"
  assert json.loads(json.dumps(tokenizer.metadata())) == {"kind": "byte", "vocab_size": 259}


def _documents():
  words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa"]
  rng = np.random.default_rng(0)
  return [
    " ".join(rng.choice(words, size=30)).encode() + b"\n" + str(i).encode() for i in range(200)
  ]


def test_sentencepiece_trains_deterministically_and_records_its_hash(tmp_path):
  first = tokenizers.train_sentencepiece(_documents(), 350, tmp_path / "a.model", 0)
  second = tokenizers.train_sentencepiece(_documents(), 350, tmp_path / "b.model", 0)
  assert first.read_bytes() == second.read_bytes()
  tokenizer = tokenizers.SentencePieceTokenizer(first)
  assert tokenizer.vocab_size == 350
  assert (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id) == (0, 2, 3)
  common = "gamma delta kappa"
  assert len(tokenizer.encode(common)) < len(common)  # It learned merges.
  text = "gamma delta 123 ünïcode"  # Unseen characters use the byte fallback.
  ids_N = tokenizer.encode(text)
  assert ids_N.dtype == np.int32
  assert tokenizer.decode(ids_N) == text
  metadata = json.loads(json.dumps(tokenizer.metadata()))
  assert metadata["kind"] == "sentencepiece" and metadata["vocab_size"] == 350
  assert metadata["model_path"] == str(first)
  assert metadata["sha256"] == hashlib.sha256(first.read_bytes()).hexdigest()
  moved = tmp_path / "elsewhere" / "a.model"
  moved.parent.mkdir()
  moved.write_bytes(first.read_bytes())
  assert tokenizers.identity(tokenizers.SentencePieceTokenizer(moved).metadata()) == {
    "kind": "sentencepiece",
    "vocab_size": 350,
    "sha256": metadata["sha256"],
  }
