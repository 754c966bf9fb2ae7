"""Dataset statistics per split: documents, tokens, and how many documents are long.

  python -m lcx.data.stats --config=configs/base.py [--config.data.name=books]

Tokens are counted as training sees them: `[BOS] + tokens + [EOS]` with the configured
tokenizer. The histogram counts documents reaching 1k, 4k, 16k and 64k tokens, the
lengths the length sweep evaluates at.
"""

import functools

import numpy as np
from absl import app
from ml_collections import config_flags

from lcx import cli
from lcx.data import config  # no jax: the corpus modules load once the fields passed

THRESHOLDS = (1024, 4096, 16384, 65536)


def length_stats(lengths_N: np.ndarray) -> dict:
  """Counts, totals and the long-document histogram of document lengths (tokens)."""
  lengths_N = np.asarray(lengths_N, dtype=np.int64)
  return {
    "documents": int(len(lengths_N)),
    "tokens": int(lengths_N.sum()),
    "max_tokens": int(lengths_N.max(initial=0)),
    "median_tokens": float(np.median(lengths_N)) if len(lengths_N) else 0.0,
    "reaching": {t: int((lengths_N >= t).sum()) for t in THRESHOLDS},
  }


def split_lengths(data_cfg, split: str) -> np.ndarray:
  from lcx.data import pipeline, sources  # TFDS, grain, jax: seconds

  tokenizer = pipeline.get_tokenizer(data_cfg)
  return np.array(
    [len(tokenizer.encode(text)) + 2 for text in sources.iter_texts(data_cfg, split)],
    dtype=np.int64,
  )


def format_stats(name: str, split: str, stats: dict) -> str:
  reaching = "  ".join(f">={t // 1024}k: {count}" for t, count in stats["reaching"].items())
  return (
    f"{name} {split}: {stats['documents']} documents, {stats['tokens']} tokens"
    f" (median {stats['median_tokens']:.0f}, max {stats['max_tokens']})\n"
    f"  documents reaching {reaching}"
  )


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments {' '.join(argv[1:])}; stats takes flags only")
  data_cfg = _CONFIG.value.data if _CONFIG.value else config.default_config()
  try:
    config.validate(data_cfg, process_count=1)
    from lcx.data import corpus  # TFDS

    for split in (corpus.TRAIN, corpus.VALIDATION):
      stats = length_stats(split_lengths(data_cfg, split))
      print(format_stats(data_cfg.name, split, stats))
  except (ValueError, FileNotFoundError) as error:  # a bad field, a corpus that is not there
    cli.fail(str(error))


if __name__ == "__main__":
  # Defined here, not at import, so importing this module never claims --config.
  _CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Experiment config whose `data` section is described."
  )
  app.run(main, flags_parser=functools.partial(cli.parse_config_flags, missing=None))
