"""One TFDS builder for every corpus lcx builds itself (stdlib, books, text_files).

A corpus is described by a `CorpusSpec`: a config name (which becomes its cache folder)
and a `collect` function returning the documents of each split plus metadata (source
hashes). The builder writes them as ArrayRecord files without TensorFlow; records are
`{"key": bytes, "text": bytes}`, `key` being a stable name (a path) to sort by.

The builder lives outside a registered TFDS package, so `_info` must hand the
`DatasetInfo` its `builder=self` (TFDS's own lookup of registered configs fails).
"""

import contextlib
import dataclasses
import fcntl
import hashlib
import pathlib
import shutil
import sys
import time
from collections.abc import Callable, Sequence

import tensorflow_datasets as tfds
from absl import logging as absl_logging

TRAIN = "train"
VALIDATION = "validation"


@dataclasses.dataclass(frozen=True)
class Document:
  key: str  # Stable, unique name: validation order and the split hash use it.
  text: str


@dataclasses.dataclass(frozen=True)
class CorpusContents:
  splits: dict[str, list[Document]]  # TRAIN and VALIDATION.
  metadata: dict  # JSON-able, saved in the dataset's metadata.json.


@dataclasses.dataclass(frozen=True)
class CorpusSpec:
  config_name: str  # [A-Za-z0-9_.+-]; different inputs must give different names.
  description: str
  collect: Callable[[], CorpusContents]


@dataclasses.dataclass(eq=False)
class _CorpusConfig(tfds.core.BuilderConfig):
  collect: Callable[[], CorpusContents] | None = dataclasses.field(default=None, repr=False)


class LcxCorpus(tfds.core.GeneratorBasedBuilder):
  """Writes the documents a `CorpusSpec` collects; see the module docstring."""

  VERSION = tfds.core.Version("1.0.0")

  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls) -> None:
    """None: there is no TFDS checksums file beside this code to look for.

    TFDS's default probes the module path through `importlib_resources`, a backport
    that is not installed on Python >= 3.9, and would fail.
    """
    return None

  def _log_download_bytes(self) -> None:
    """Silent: TFDS prints "Downloading and preparing dataset ..." though nothing is
    downloaded; `builder` says what happens instead."""

  def _log_download_done(self) -> None:
    """Silent, as `_log_download_bytes`."""

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
      builder=self,
      description=self.builder_config.description,
      features=tfds.features.FeaturesDict(
        {"key": tfds.features.Text(), "text": tfds.features.Text()}
      ),
      metadata=tfds.core.MetadataDict(),
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # Sources are local files; nothing is downloaded here.
    contents = self.builder_config.collect()
    self.info.metadata.update(contents.metadata)
    return {
      split: self._generate_examples(documents) for split, documents in contents.splits.items()
    }

  def _generate_examples(self, documents):
    for document in documents:
      yield document.key, {"key": document.key, "text": document.text}


@contextlib.contextmanager
def file_lock(path: pathlib.Path):
  """Holds an exclusive lock on `path` (created if missing) for the `with` block.

  Processes that start together (test workers, hosts of one job on a shared disk)
  then make a shared artifact once and wait for each other rather than race.
  """
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  with open(path, "w") as lock_file:
    fcntl.flock(lock_file, fcntl.LOCK_EX)
    yield


@contextlib.contextmanager
def _quiet_tfds():
  """TFDS words a local build as a download ("Downloading and preparing dataset Unknown size
  (download: Unknown size ...)", "Using custom data configuration"): nothing is downloaded, so
  its INFO/WARNING lines and progress bars are silenced and lcx says what happens instead."""
  previous = absl_logging.get_verbosity()
  absl_logging.set_verbosity(absl_logging.ERROR)
  tfds.display_progress_bar(False)
  try:
    yield
  finally:
    tfds.display_progress_bar(True)
    absl_logging.set_verbosity(previous)


def _remove_empty_dirs(path: pathlib.Path, root: pathlib.Path) -> None:
  """Removes `path` and its parents below `root` while empty, and TFDS's empty downloads/: a
  failed build leaves no empty corpus folder that looks like a corpus."""
  for directory in [path, *path.parents, root / "downloads" / "extracted", root / "downloads"]:
    if directory == root or root not in directory.parents:
      continue
    try:
      directory.rmdir()  # only if empty
    except OSError:
      pass


def builder(spec: CorpusSpec, data_dir: pathlib.Path) -> LcxCorpus:
  """The builder for `spec`, prepared in `data_dir` on first use (under a file lock)
  and reused after."""
  data_dir = pathlib.Path(data_dir)
  with file_lock(data_dir / f".{spec.config_name}.lock"), _quiet_tfds():
    corpus_builder = LcxCorpus(
      config=_CorpusConfig(
        name=spec.config_name, description=spec.description, collect=spec.collect
      ),
      data_dir=str(data_dir),
    )
    _remove_killed_builds(pathlib.Path(corpus_builder.data_dir).parent)
    if not corpus_builder.is_prepared():
      print(
        f"[lcx] building corpus {spec.config_name} in {data_dir} (once; later runs reuse it) ...",
        file=sys.stderr,
        flush=True,
      )
      start = time.perf_counter()
      try:
        corpus_builder.download_and_prepare(file_format="array_record")
      except BaseException:
        _remove_empty_dirs(pathlib.Path(corpus_builder.data_dir), data_dir)
        raise
      sizes = {name: split.num_examples for name, split in corpus_builder.info.splits.items()}
      print(
        f"[lcx] built corpus {spec.config_name}: {sizes} documents in "
        f"{time.perf_counter() - start:.1f} s",
        file=sys.stderr,
        flush=True,
      )
  return corpus_builder


INCOMPLETE = "incomplete."  # TFDS's prefix of a build's folder until it is renamed, complete


def _remove_killed_builds(corpus_dir: pathlib.Path) -> None:
  """Removes the folders of builds killed mid-way (TFDS cleans up after an exception, not after
  SIGKILL); under the build lock no build of this corpus runs, so every such folder is one."""
  for orphan in sorted(corpus_dir.glob(INCOMPLETE + "*")):
    print(f"[lcx] removing {orphan}: a build of it was killed", file=sys.stderr, flush=True)
    shutil.rmtree(orphan, ignore_errors=True)


def hash_fraction(key: str) -> float:
  """A stable number in [0, 1) for `key`, independent of Python's hash seed."""
  digest = hashlib.sha256(key.encode("utf-8")).digest()
  return int.from_bytes(digest[:8], "big") / 2**64


def split_by_hash(
  documents: Sequence[Document], validation_fraction: float
) -> dict[str, list[Document]]:
  """Documents whose key hashes below the fraction go to validation.

  Each split gets at least one document (the lowest or highest hashing one), so small
  corpora still build; TFDS refuses an empty split.
  """
  if len(documents) < 2:
    raise ValueError(
      f"A corpus needs at least 2 documents to split into train and validation;"
      f" found {len(documents)}."
    )
  ranked = sorted(documents, key=lambda document: hash_fraction(document.key))
  below = sum(hash_fraction(d.key) < validation_fraction for d in documents)
  validation_keys = {d.key for d in ranked[: min(max(below, 1), len(documents) - 1)]}
  return {
    TRAIN: [d for d in documents if d.key not in validation_keys],
    VALIDATION: [d for d in documents if d.key in validation_keys],
  }


def sha256_file(path: pathlib.Path) -> str:
  return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()
