"""Text sources by name: where the documents of a split come from.

`TEXT_SOURCES` maps `data.name` to a function returning the records of one split, the
feature holding the text, and (for lcx's own corpora) a stable key to order documents
by. Corpora lcx builds itself are built on first use; TFDS datasets must already be
prepared in the data dir (nothing is downloaded at run time).
"""

import dataclasses
from collections.abc import Callable, Iterator, Sequence

import tensorflow_datasets as tfds

from lcx.data import books, config, corpus, stdlib, text_files


@dataclasses.dataclass(frozen=True)
class SplitRecords:
  records: Sequence[dict]  # Random access; record[text_feature] is the text as bytes.
  text_feature: str
  key_feature: str | None  # A stable name per record; None keeps the stored order.


CORPUS_SPECS: dict[str, Callable[..., corpus.CorpusSpec]] = {
  "stdlib": stdlib.spec,
  "books": books.spec,
  "text_files": text_files.spec,
}


def _own_corpus(data_cfg, split: str) -> SplitRecords:
  spec = CORPUS_SPECS[data_cfg.name](data_cfg)
  corpus_builder = corpus.builder(spec, config.data_dir(data_cfg))
  return SplitRecords(corpus_builder.as_data_source(split), "text", "key")


def _tfds_dataset(data_cfg, split: str) -> SplitRecords:
  # TFDS datasets name their splits freely ("test" for lm1b's held-out data).
  tfds_split = {
    corpus.TRAIN: data_cfg.train_split,
    corpus.VALIDATION: data_cfg.validation_split,
  }[split]
  try:
    records = tfds.data_source(
      data_cfg.tfds_name,
      split=tfds_split,
      data_dir=str(config.data_dir(data_cfg)),
      download=False,
    )
  except Exception as error:
    raise ValueError(
      f"data.tfds_name={data_cfg.tfds_name!r} (split {tfds_split!r})"
      f" could not be read from {config.data_dir(data_cfg)}; prepare it there first"
      f" with file_format='array_record'. Cause: {error}"
    ) from error
  if len(records) and data_cfg.text_feature not in records[0]:
    raise ValueError(
      f"data.text_feature={data_cfg.text_feature!r} is not a feature of"
      f" {data_cfg.tfds_name}; its features are {', '.join(sorted(records[0]))}."
    )
  return SplitRecords(records, data_cfg.text_feature, None)


TEXT_SOURCES: dict[str, Callable[..., SplitRecords]] = {
  **{name: _own_corpus for name in CORPUS_SPECS},
  "tfds": _tfds_dataset,
}


def split_records(data_cfg, split: str) -> SplitRecords:
  """The records of `split` (corpus.TRAIN or corpus.VALIDATION) of `data.name`."""
  if data_cfg.name not in TEXT_SOURCES:
    raise ValueError(
      f"data.name={data_cfg.name!r} has no text documents; text sources are"
      f" {', '.join(TEXT_SOURCES)}."
    )
  return TEXT_SOURCES[data_cfg.name](data_cfg, split)


def _as_bytes(text) -> bytes:
  return text.encode("utf-8") if isinstance(text, str) else bytes(text)


def iter_texts(data_cfg, split: str) -> Iterator[bytes]:
  """Every document of `split` in stored order, one at a time (for large corpora)."""
  split_recs = split_records(data_cfg, split)
  for index in range(len(split_recs.records)):
    yield _as_bytes(split_recs.records[index][split_recs.text_feature])


def split_texts(data_cfg, split: str) -> list[bytes]:
  """Every document of `split` in a fixed order: by key where records have one."""
  split_recs = split_records(data_cfg, split)
  records = [split_recs.records[i] for i in range(len(split_recs.records))]
  if split_recs.key_feature:
    records.sort(key=lambda record: _as_bytes(record[split_recs.key_feature]))
  return [_as_bytes(record[split_recs.text_feature]) for record in records]
