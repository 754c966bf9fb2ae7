"""The data section of the experiment config: every field's record (`DATA`: default, description,
what it accepts), and the checks that read several fields.

lcx/config/fields.py puts `DATA` under `data` in the config's records, which the defaults, the
checks before jax and `./launch.sh config` read; command-line overrides arrive as
`--config.data.<field>=<value>`. `validate` turns a bad value into a `ValueError` that names the
field and the allowed values, before any data is touched.
"""

import os
import pathlib

import ml_collections

from lcx import errors
from lcx.data import tasks
from lcx.field import Field, Section, at_least

TOKENIZERS = ("byte", "sentencepiece")
PACKINGS = ("auto", "concat", "first_fit")


def data_dir(data_cfg) -> pathlib.Path:
  """The directory datasets are built into and read from."""
  if data_cfg.data_dir:
    return pathlib.Path(data_cfg.data_dir).expanduser()
  if os.environ.get("LCX_DATA_DIR"):
    return pathlib.Path(os.environ["LCX_DATA_DIR"]).expanduser()
  return pathlib.Path("~/.cache/lcx/datasets").expanduser()


def packing(data_cfg) -> str:
  """The packing actually used once `auto` is resolved."""
  if data_cfg.packing != "auto":
    return data_cfg.packing
  return "first_fit" if data_cfg.name == "task" else "concat"


def _require(ok: bool, message: str) -> None:
  if not ok:
    raise ValueError(message)


def _check(data_cfg, field: str, ok, allowed) -> None:
  """Raises errors.not_allowed for data.FIELD unless `ok(value)`."""
  if not ok(data_cfg[field]):
    raise errors.not_allowed(f"data.{field}", data_cfg[field], allowed)


def _one_of(data_cfg, field: str, allowed: tuple[str, ...]) -> None:
  _check(data_cfg, field, lambda value: value in allowed, allowed)


def _check_nothing(data_cfg) -> None:
  del data_cfg  # stdlib and books need no source-specific fields.


def _check_text_files(data_cfg) -> None:
  _require(
    bool(data_cfg.text_files),
    "data.text_files must name a directory or glob when data.name='text_files'.",
  )
  _one_of(data_cfg, "text_files_split", ("hash", "folders"))


def _check_tfds(data_cfg) -> None:
  _require(
    bool(data_cfg.tfds_name),
    "data.tfds_name must name a TFDS dataset (e.g. 'pg19') when data.name='tfds'.",
  )


def _check_task(data_cfg) -> None:
  _one_of(data_cfg, "task", tuple(tasks.TASKS))
  _require(
    data_cfg.tokenizer == "byte",
    f"data.tokenizer={data_cfg.tokenizer!r}: tasks are defined over bytes, use 'byte'.",
  )
  _require(
    1 <= data_cfg.task_min_len <= data_cfg.task_max_len,
    f"data.task_min_len={data_cfg.task_min_len} and data.task_max_len="
    f"{data_cfg.task_max_len} must satisfy 1 <= task_min_len <= task_max_len.",
  )
  _check(data_cfg, "task_eval_factor", lambda v: v >= 1, ">= 1")
  _check(data_cfg, "task_eval_examples", lambda v: v >= 1, ">= 1")
  depths = tuple(data_cfg.task_eval_depths)
  _require(
    not depths or data_cfg.task in tasks.AT_DEPTH,
    f"data.task_eval_depths={depths} needs a task with a needle depth"
    f" ({', '.join(tasks.AT_DEPTH)}); data.task={data_cfg.task!r} has none.",
  )
  _check(
    data_cfg, "task_eval_depths", lambda v: all(0.0 <= d <= 1.0 for d in v), "depths in [0, 1]"
  )


# The checks of each source's own fields; its keys are the valid `data.name` values.
SOURCE_CHECKS = {
  "stdlib": _check_nothing,
  "books": _check_nothing,
  "text_files": _check_text_files,
  "tfds": _check_tfds,
  "task": _check_task,
}


def _in_open_unit(v) -> bool:
  return 0.0 < v < 1.0


# Every data field, one record each (lcx/field.py); `validate` runs the checks that read other
# fields or the process count, and each source's own.
DATA = Section(
  "the corpus, tokenizer and rows (lcx/data/config.py)",
  (
    Field(
      "name",
      "stdlib",
      "which registered source feeds training: stdlib | books | text_files | tfds | task",
      allowed=tuple(SOURCE_CHECKS),
    ),
    Field(
      "data_dir",
      "",
      "where built datasets and tokenizers live (empty: $LCX_DATA_DIR, else ~/.cache/lcx/datasets)",
    ),
    Field(
      "tokenizer",
      "byte",
      "byte (259 ids: 256 bytes + BOS/EOS/PAD) | sentencepiece (trained on the train split)",
      allowed=TOKENIZERS,
    ),
    Field("vocab_size", 8192, "sentencepiece only"),
    Field("seq_len", 256, "tokens per training row", at_least(1), ">= 1"),
    Field(
      "batch_size", 16, "global rows per step, split evenly across processes", at_least(1), ">= 1"
    ),
    Field("seed", 0, "shuffle order (and task examples)"),
    Field(
      "packing",
      "auto",
      "how documents become rows: concat | first_fit (whole documents) | auto (first_fit: tasks)",
      allowed=PACKINGS,
    ),
    Field(
      "validation_fraction",
      0.05,
      "share of documents (stdlib, text_files with split=hash) or works (books) held out",
      _in_open_unit,
      "in (0, 1)",
    ),
    Field(
      "text_files",
      "",
      "text_files: a directory (searched recursively) or a glob of .txt / .jsonl files",
    ),
    Field("jsonl_field", "text", "the field of each .jsonl line that holds the document"),
    Field(
      "text_files_split",
      "hash",
      "hash: by a hash of each document's path (and line) | folders: under train/ and validation/",
    ),
    Field(
      "tfds_name",
      "",
      "tfds: any TFDS text dataset already prepared in data_dir (pg19, lm1b, wiki40b/en)",
    ),
    Field("text_feature", "text", "tfds: the feature holding the text"),
    Field("train_split", "train", "tfds: the split trained on"),
    Field("validation_split", "validation", "tfds: the split evaluated on"),
    Field("task", "copy", "task: a synthetic task from lcx.data.tasks"),
    Field("task_min_len", 1, "task: smallest training size"),
    Field("task_max_len", 32, "task: largest training size"),
    Field("task_eval_factor", 4, "task: evaluation sizes up to this x task_max_len"),
    Field("task_eval_examples", 512, "evaluation examples (per depth, if depths are set)"),
    Field(
      "task_eval_depths",
      (),
      "passkey: needle depths in [0, 1] evaluated apart; empty: a random depth per example",
    ),
  ),
)


def default_config() -> ml_collections.ConfigDict:
  """Every data field with its default (DATA's records)."""
  return DATA.to_config()


def validate(data_cfg, *, process_count: int | None = None) -> None:
  """Raises ValueError naming the bad field and its allowed values.

  `process_count` defaults to `jax.process_count()`; the global batch must split
  evenly across processes.
  """
  DATA.check(data_cfg, "data")  # each field's record: name, tokenizer, packing, seq_len, ...
  if process_count is None:
    import jax  # Deferred: only needed when the caller did not say.

    process_count = jax.process_count()
  _require(
    data_cfg.batch_size % process_count == 0,
    f"data.batch_size={data_cfg.batch_size} must be divisible by the process count"
    f" ({process_count}).",
  )
  if data_cfg.tokenizer == "sentencepiece":
    _check(
      data_cfg,
      "vocab_size",
      lambda v: v >= 260,
      ">= 260 for sentencepiece (it keeps a byte fallback for every byte)",
    )
  SOURCE_CHECKS[data_cfg.name](data_cfg)
  not_a_directory = errors.not_a_directory("data.data_dir", str(data_dir(data_cfg)))
  if not_a_directory:
    raise not_a_directory
