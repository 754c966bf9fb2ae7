import concurrent.futures

import pytest

from lcx.data import corpus


def _spec(calls):
  def collect():
    calls.append(1)
    documents = [corpus.Document(f"doc{i}", f"text {i}") for i in range(20)]
    return corpus.CorpusContents(
      splits=corpus.split_by_hash(documents, 0.3), metadata={"sha256": {"a": "b"}}
    )

  return corpus.CorpusSpec("unit_test", "twenty short documents", collect)


def test_split_by_hash_is_stable_and_near_the_fraction():
  documents = [corpus.Document(f"file{i}.txt", "") for i in range(2000)]
  splits = corpus.split_by_hash(documents, 0.1)
  assert splits == corpus.split_by_hash(documents, 0.1)
  assert 150 < len(splits[corpus.VALIDATION]) < 250
  assert len(splits[corpus.TRAIN]) + len(splits[corpus.VALIDATION]) == 2000
  assert corpus.hash_fraction("file1.txt") == corpus.hash_fraction("file1.txt")


def test_split_by_hash_gives_each_split_at_least_one_document():
  pair = [corpus.Document("a", ""), corpus.Document("b", "")]
  for fraction in (0.001, 0.999):
    splits = corpus.split_by_hash(pair, fraction)
    assert len(splits[corpus.TRAIN]) == len(splits[corpus.VALIDATION]) == 1
  with pytest.raises(ValueError, match="at least 2 documents"):
    corpus.split_by_hash(pair[:1], 0.5)


def test_builder_writes_records_and_metadata_and_builds_once(tmp_path):
  calls = []
  built = corpus.builder(_spec(calls), tmp_path)
  again = corpus.builder(_spec(calls), tmp_path)
  assert calls == [1]
  assert dict(again.info.metadata) == {"sha256": {"a": "b"}}
  records = built.as_data_source(corpus.TRAIN)
  texts = sorted(records[i]["text"] for i in range(len(records)))
  validation = again.as_data_source(corpus.VALIDATION)
  assert len(records) + len(validation) == 20
  assert all(t.startswith(b"text ") for t in texts)


def test_concurrent_first_use_builds_once(tmp_path):
  calls = []
  with concurrent.futures.ThreadPoolExecutor(3) as pool:
    list(pool.map(lambda _: corpus.builder(_spec(calls), tmp_path), range(3)))
  assert calls == [1]


def test_a_local_build_says_one_lcx_line_not_a_download(tmp_path, capfd):
  corpus.builder(_spec([]), tmp_path)
  out, err = capfd.readouterr()
  assert "Downloading" not in out + err and "custom data configuration" not in out + err
  assert "[lcx] building corpus unit_test" in err and "[lcx] built corpus unit_test" in err
  corpus.builder(_spec([]), tmp_path)  # reused: silent
  out, err = capfd.readouterr()
  assert out == "" and err == ""
