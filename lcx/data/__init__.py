"""lcx data: corpora, tokenizers, packed training batches, validation tokens, tasks.

Start at `pipeline.py` (what training and evaluation call) and `config.py` (every
field). Sources: `stdlib.py`, `books.py`, `text_files.py` (built with `corpus.py`), and
TFDS datasets by name (`sources.py`); synthetic tasks in `tasks.py`.
"""

from lcx.data import tasks
from lcx.data.config import default_config, validate
from lcx.data.pipeline import (
  get_tokenizer,
  make_train_iterator,
  open_source,
  validation_documents,
  validation_tokens,
  vocab_size,
)

__all__ = [
  "tasks",
  "default_config",
  "validate",
  "get_tokenizer",
  "make_train_iterator",
  "open_source",
  "validation_documents",
  "validation_tokens",
  "vocab_size",
]
