"""The running interpreter's standard library as a corpus: one document per `.py` file.

Always available offline, so it is the default source. The stdlib differs between Python
versions, so the version is part of the config name (and so of the cache folder).
"""

import functools
import pathlib
import sys
import sysconfig

from lcx.data import corpus

# Directory names skipped anywhere under the stdlib: tests, installed packages, and
# the generated codec tables in `encodings` (large, repetitive, not code anyone writes).
EXCLUDED_DIRS = frozenset(
  {"test", "tests", "idle_test", "site-packages", "dist-packages", "encodings"}
)


def python_files(root: pathlib.Path) -> list[pathlib.Path]:
  """`.py` files under `root` outside EXCLUDED_DIRS, sorted by relative path."""
  files = (
    path
    for path in root.rglob("*.py")
    if EXCLUDED_DIRS.isdisjoint(path.relative_to(root).parts[:-1])
  )
  return sorted(files, key=lambda path: path.relative_to(root).as_posix())


def collect(root: pathlib.Path, validation_fraction: float) -> corpus.CorpusContents:
  """Documents keyed by their path relative to `root`; non-UTF-8 files are skipped."""
  documents = []
  for path in python_files(root):
    try:
      text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
      continue
    if text.strip():
      documents.append(corpus.Document(path.relative_to(root).as_posix(), text))
  return corpus.CorpusContents(
    splits=corpus.split_by_hash(documents, validation_fraction),
    metadata={"root": str(root), "python": sys.version, "files": len(documents)},
  )


def spec(data_cfg, root: pathlib.Path | None = None) -> corpus.CorpusSpec:
  """The stdlib corpus of this interpreter (or of `root`, for tests)."""
  root = pathlib.Path(root or sysconfig.get_paths()["stdlib"])
  fraction = data_cfg.validation_fraction
  version = ".".join(map(str, sys.version_info[:3]))
  return corpus.CorpusSpec(
    config_name=f"stdlib_py{version}_val{fraction:g}",
    description=f"Python {version} standard library .py files from {root}.",
    collect=functools.partial(collect, root, fraction),
  )
