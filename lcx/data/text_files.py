"""`text_files`: the user's own `.txt` / `.jsonl` files as a corpus.

A `.txt` file is one document; each line of a `.jsonl` file is one, its text in the
field `data.jsonl_field`. Lines are split at "\n" only: JSON strings may hold U+2028 and
other characters that `str.splitlines` would break at. Files that are empty or not
UTF-8, and jsonl lines without the field or whose value is empty or not a string, are
skipped with a warning naming the file (and line). The cache folder's name hashes the
file list with sizes and modification times, so editing the files rebuilds it.
"""

import functools
import glob
import hashlib
import json
import os
import pathlib
import sys

from lcx.data import corpus

SUFFIXES = (".txt", ".jsonl")
FOLDERS = {corpus.TRAIN: "train", corpus.VALIDATION: "validation"}


def find_files(pattern: str) -> tuple[pathlib.Path, list[pathlib.Path]]:
  """(base, files): a directory searched recursively, or a glob; sorted paths."""
  path = pathlib.Path(pattern).expanduser()
  if path.is_dir():
    base, files = path, [p for p in path.rglob("*") if p.is_file()]
  else:
    files = [pathlib.Path(p) for p in glob.glob(str(path), recursive=True)]
    base = pathlib.Path(os.path.commonpath([p.parent for p in files])) if files else path
  files = sorted(p for p in files if p.suffix in SUFFIXES)
  if not files:
    raise ValueError(f"data.text_files={pattern!r} matches no {' or '.join(SUFFIXES)} file.")
  return base, files


def _warn(message: str) -> None:
  """A warning on stderr, printed: the corpus build silences the libraries' logging."""
  print(f"[lcx] warning: text_files: {message}", file=sys.stderr, flush=True)


def _skip(skipped: list[str], what: str) -> None:
  skipped.append(what)
  _warn(f"skipping {what}")


def _read_text(path: pathlib.Path, skipped: list[str]) -> str | None:
  """The file's text, or None (with a warning naming it) if empty or not UTF-8."""
  try:
    text = path.read_text(encoding="utf-8")
  except UnicodeDecodeError as error:
    _skip(skipped, f"{path}, not UTF-8 ({error})")
    return None
  if not text.strip():
    _skip(skipped, f"{path}, empty")
    return None
  return text


def _jsonl_documents(path, key, text, field, skipped: list[str]) -> list[corpus.Document]:
  documents = []
  for line_number, line in enumerate(text.split("\n"), start=1):
    if not line.strip():
      continue
    try:
      value = json.loads(line)[field]
    except (json.JSONDecodeError, KeyError, TypeError):
      _skip(skipped, f"{path} line {line_number}, not JSON with a {field!r} field")
      continue
    if not isinstance(value, str) or not value.strip():
      problem = (
        "is empty" if isinstance(value, str) else (f"holds {type(value).__name__}, not a string")
      )
      _skip(skipped, f"{path} line {line_number}, field {field!r} {problem}")
      continue
    documents.append(corpus.Document(f"{key}:{line_number}", value))
  return documents


def read_documents(
  base: pathlib.Path, files: list[pathlib.Path], jsonl_field: str, skipped: list[str] | None = None
) -> list[corpus.Document]:
  """Documents keyed by path relative to `base` (and `:line` for jsonl); what is skipped is
  said on stderr and appended to `skipped`."""
  documents, skipped = [], [] if skipped is None else skipped
  for path in files:
    text = _read_text(path, skipped)
    if text is None:
      continue
    key = path.relative_to(base).as_posix()
    if path.suffix == ".jsonl":
      documents.extend(_jsonl_documents(path, key, text, jsonl_field, skipped))
    else:
      documents.append(corpus.Document(key, text))
  return documents


def _split_by_hash(documents, base, files, fraction) -> dict[str, list]:
  del base, files  # The split depends on each document's key only.
  return corpus.split_by_hash(documents, fraction)


def _split_by_folder(documents, base, files, fraction) -> dict[str, list]:
  """Files outside the two folders belong to neither split; a warning names them."""
  del fraction  # The folders decide.
  relative = [p.relative_to(base) for p in files]
  outside = [r.as_posix() for r in relative if r.parts[0] not in FOLDERS.values()]
  if outside:
    _warn(
      f"data.text_files_split='folders' ignores {len(outside)} file(s) outside train/ and "
      f"validation/ of {base}: {', '.join(outside)}"
    )
  splits = {
    split: [d for d in documents if d.key.startswith(folder + "/")]
    for split, folder in FOLDERS.items()
  }
  for split, folder in FOLDERS.items():
    if not splits[split]:
      raise ValueError(
        f"data.text_files_split='folders' needs documents under {base / folder}; none were found."
      )
  return splits


SPLITTERS = {"hash": _split_by_hash, "folders": _split_by_folder}


def collect(pattern, jsonl_field, split_mode, fraction) -> corpus.CorpusContents:
  base, files = find_files(pattern)
  skipped = []
  documents = read_documents(base, files, jsonl_field, skipped)
  if len(documents) < (2 if split_mode == "hash" else 1):  # the splitter's would not say why
    raise ValueError(
      f"data.text_files={pattern!r}: {len(documents)} usable document(s) in {len(files)} "
      f"file(s), too few for a train/validation split; skipped {len(skipped)}: "
      + "; ".join(skipped[:3])
      + ("; ..." if len(skipped) > 3 else "")
    )
  splits = SPLITTERS[split_mode](documents, base, files, fraction)
  return corpus.CorpusContents(
    splits=splits,
    metadata={
      "text_files": str(pattern),
      "files_sha256": {p.relative_to(base).as_posix(): corpus.sha256_file(p) for p in files},
    },
  )


def spec(data_cfg) -> corpus.CorpusSpec:
  """The corpus of `data.text_files`, named by a hash of its inputs and settings."""
  base, files = find_files(data_cfg.text_files)
  fingerprint = json.dumps(
    [
      str(base.resolve()),
      data_cfg.jsonl_field,
      data_cfg.text_files_split,
      data_cfg.validation_fraction,
      [(p.relative_to(base).as_posix(), p.stat().st_size, p.stat().st_mtime_ns) for p in files],
    ]
  )
  return corpus.CorpusSpec(
    config_name=f"text_files_{hashlib.sha256(fingerprint.encode()).hexdigest()[:16]}",
    description=f"User text files from {data_cfg.text_files}.",
    collect=functools.partial(
      collect,
      data_cfg.text_files,
      data_cfg.jsonl_field,
      data_cfg.text_files_split,
      data_cfg.validation_fraction,
    ),
  )
