"""lcx data: corpora, tokenizers, packed training batches, validation tokens, tasks.

Start at `pipeline.py` (what training and evaluation call) and `config.py` (every
field). Sources: `stdlib.py`, `books.py`, `text_files.py` (built with `corpus.py`), and
TFDS datasets by name (`sources.py`); synthetic tasks in `tasks/`.
"""

import importlib

from lcx.data import tasks
from lcx.data.config import default_config, validate

# The pipeline's names, imported on first use: the pipeline brings in grain and TFDS (seconds),
# which loading and checking a config need not wait for (lcx.main checks it first).
PIPELINE = (
  "get_tokenizer",
  "make_train_iterator",
  "open_source",
  "validation_documents",
  "validation_tokens",
  "vocab_size",
)


def __getattr__(name: str):
  if name in PIPELINE:
    return getattr(importlib.import_module("lcx.data.pipeline"), name)
  raise AttributeError(f"module 'lcx.data' has no attribute {name!r}")


__all__ = ["tasks", "default_config", "validate", *PIPELINE]
