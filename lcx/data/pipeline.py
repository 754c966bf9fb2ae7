"""What the rest of lcx calls: the tokenizer, the training iterator, validation tokens.

Training: this process's share of the train documents, shuffled with `data.seed` and
reshuffled each epoch, forever; tokenized as `[BOS] + tokens + [EOS]`; packed into
rows; batched. The result is a grain `DatasetIterator`, so `get_state`/`set_state` and
the grain Orbax handlers resume it exactly.
"""

import pathlib

import grain
import numpy as np

from lcx.data import config, corpus, packing, sources, tasks, tokenizers


def _byte_tokenizer(data_cfg) -> tokenizers.ByteTokenizer:
  del data_cfg  # Bytes need no configuration.
  return tokenizers.ByteTokenizer()


def corpus_name(data_cfg) -> str:
  """The corpus's fingerprint: its built dataset's name, which changes with its inputs (the
  Python version for stdlib, the pins for books, the files for text_files)."""
  if data_cfg.name in sources.CORPUS_SPECS:
    return sources.CORPUS_SPECS[data_cfg.name](data_cfg).config_name
  return f"tfds_{data_cfg.tfds_name.replace('/', '_')}_{data_cfg.train_split}"


def sentencepiece_path(data_cfg) -> pathlib.Path:
  """Where the SentencePiece model for this corpus, vocab size and seed lives."""
  model_name = f"{corpus_name(data_cfg)}_sp{data_cfg.vocab_size}_seed{data_cfg.seed}.model"
  return config.data_dir(data_cfg) / "tokenizers" / model_name


# SentencePiece trains on at most this much train text (in stored order): enough for
# its statistics, and bounded memory on corpora like pg19.
SENTENCEPIECE_MAX_BYTES = 200_000_000


def take_bytes(texts, max_bytes: int):
  """The texts until their total size reaches `max_bytes`."""
  seen = 0
  for text in texts:
    if seen >= max_bytes:
      return
    seen += len(text)
    yield text


def _sentencepiece_tokenizer(data_cfg) -> tokenizers.SentencePieceTokenizer:
  """Trained once: processes starting together wait on a file lock for the first."""
  model_path = sentencepiece_path(data_cfg)
  with corpus.file_lock(model_path.with_name(f".{model_path.name}.lock")):
    if not model_path.exists():
      tokenizers.train_sentencepiece(
        take_bytes(sources.iter_texts(data_cfg, corpus.TRAIN), SENTENCEPIECE_MAX_BYTES),
        data_cfg.vocab_size,
        model_path,
        data_cfg.seed,
      )
  return tokenizers.SentencePieceTokenizer(model_path)


TOKENIZERS = {"byte": _byte_tokenizer, "sentencepiece": _sentencepiece_tokenizer}


def vocab_size(data_cfg) -> int:
  """The tokenizer's vocabulary size without loading (or training) it: SentencePiece models
  are trained to exactly data.vocab_size pieces."""
  if data_cfg.tokenizer == "byte":
    return tokenizers.ByteTokenizer().vocab_size
  return data_cfg.vocab_size


def open_source(data_cfg) -> None:
  """Builds (once) or opens the source's documents, so a missing corpus (no files match
  data.text_files, an unprepared TFDS dataset) is a ValueError naming the field up front."""
  if data_cfg.name != "task":
    sources.split_records(data_cfg, corpus.TRAIN)


def get_tokenizer(data_cfg):
  """The configured tokenizer; a SentencePiece model is trained once and reused."""
  config.validate(data_cfg, process_count=1)
  return TOKENIZERS[data_cfg.tokenizer](data_cfg)


def document_example(text: bytes, tokenizer) -> dict:
  """`[BOS] + tokens + [EOS]` with every next token counted in the loss."""
  ids_N = np.concatenate([[tokenizer.bos_id], tokenizer.encode(text), [tokenizer.eos_id]]).astype(
    np.int32
  )
  return {"ids": ids_N, "loss_mask": np.ones(ids_N.shape, np.float32)}


def _corpus_examples(data_cfg, tokenizer, process_index, process_count):
  records = sources.split_records(data_cfg, corpus.TRAIN)
  documents = grain.MapDataset.source(records.records)[process_index::process_count]
  if len(documents) == 0:
    raise ValueError(
      f"data.name={data_cfg.name!r}: process {process_index} of {process_count} has"
      " no training documents; the train split is smaller than the process count."
    )
  return (
    documents.seed(data_cfg.seed)
    .shuffle()
    .repeat()
    .map(lambda record: document_example(record[records.text_feature], tokenizer))
  )


# How many documents are read ahead, and by how many threads. A document's work is cheap
# Python (bytes, a generated task), and grain's default (16 threads, 500 documents ahead) scans
# every buffered document on each one taken. Measured on 2 cores: 50 batches of 64x1024 bytes
# 0.61 s -> 0.43 s; a tiny model's 400 steps on mqar, host-bound, 16.8 s -> 12.1 s.
READ_OPTIONS = grain.ReadOptions(num_threads=2, prefetch_buffer_size=16)

# Where each source's training documents come from: records on disk, or generated.
TRAIN_EXAMPLES = {
  **{name: _corpus_examples for name in sources.TEXT_SOURCES},
  "task": tasks.train_examples,
}


def make_train_iterator(
  data_cfg, *, process_index: int = 0, process_count: int = 1, tokenizer=None
) -> grain.DatasetIterator:
  """This process's batches: dicts of `[batch_size / process_count, seq_len]` arrays.

  Fields: inputs, targets (int32, next token), segment_ids (int32, 1.. per document in
  a row, 0 = padding), positions (int32, from 0 per document), loss_mask (float32).
  `tokenizer`: `get_tokenizer(data_cfg)`, if loaded already.
  """
  config.validate(data_cfg, process_count=process_count)
  tokenizer = tokenizer or get_tokenizer(data_cfg)
  examples = TRAIN_EXAMPLES[data_cfg.name](data_cfg, tokenizer, process_index, process_count)
  batches = packing.pack_and_batch(
    examples.to_iter_dataset(READ_OPTIONS),
    packing=config.packing(data_cfg),
    seq_len=data_cfg.seq_len,
    batch_size=data_cfg.batch_size // process_count,
    pad_id=tokenizer.pad_id,
    seed=data_cfg.seed,
  )
  return iter(batches)


def validation_documents(data_cfg, tokenizer=None) -> list[np.ndarray]:
  """Every validation document as int32 `[BOS] + tokens + [EOS]`, in a fixed order
  (`tokenizer`: `get_tokenizer(data_cfg)`, if loaded already)."""
  config.validate(data_cfg, process_count=1)
  tokenizer = tokenizer or get_tokenizer(data_cfg)
  return [
    document_example(text, tokenizer)["ids"]
    for text in sources.split_texts(data_cfg, corpus.VALIDATION)
  ]


def validation_tokens(data_cfg, num_tokens: int) -> np.ndarray:
  """The first `num_tokens` tokens of the validation documents, concatenated.

  Raises rather than returning fewer tokens than asked.
  """
  documents = validation_documents(data_cfg)
  tokens_T = np.concatenate(documents) if documents else np.zeros([0], np.int32)
  if len(tokens_T) < num_tokens:
    raise ValueError(
      f"The validation split of data.name={data_cfg.name!r} has {len(tokens_T)}"
      f" tokens, fewer than the {num_tokens} asked for; ask for fewer tokens or use"
      " a larger corpus."
    )
  return tokens_T[:num_tokens]
