import json

import pytest

from lcx.data import config, corpus, sources, text_files


def _write_folder(root):
  (root / "sub").mkdir(parents=True)
  (root / "a.txt").write_text("first document\n")
  (root / "sub" / "b.txt").write_text("second document ✓\n")
  (root / "empty.txt").write_text("  \n")
  (root / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
  (root / "notes.md").write_text("not a text file for lcx\n")
  lines = [
    json.dumps({"text": "line one", "id": 1}),
    "",
    json.dumps({"body": "no text field"}),
    json.dumps({"text": "line four"}),
    # Valid JSON with raw U+2028 / U+0085 inside a string: one line, one document.
    json.dumps({"text": "five\u2028still five\x85end"}, ensure_ascii=False),
    json.dumps({"text": "   "}),
    json.dumps({"text": 7}),
    json.dumps({"text": None}),
  ]
  (root / "sub" / "c.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
  return root


def _cfg(tmp_path, files, **overrides):
  data_cfg = config.default_config()
  data_cfg.update(
    name="text_files",
    text_files=str(files),
    data_dir=str(tmp_path / "datasets"),
    seq_len=16,
    batch_size=2,
    validation_fraction=0.4,
  )
  data_cfg.update(overrides)
  return data_cfg


def _documents(data_cfg):
  found = {}
  for split in (corpus.TRAIN, corpus.VALIDATION):
    records = sources.split_records(data_cfg, split).records
    found[split] = {
      records[i]["key"].decode(): records[i]["text"].decode() for i in range(len(records))
    }
  return found


def test_folder_round_trips_and_warns_about_the_files_it_skips(tmp_path, capsys):
  data_cfg = _cfg(tmp_path, _write_folder(tmp_path / "in"))
  found = _documents(data_cfg)
  warned = capsys.readouterr().err  # printed: the build silences logging
  assert {**found[corpus.TRAIN], **found[corpus.VALIDATION]} == {
    "a.txt": "first document\n",
    "sub/b.txt": "second document ✓\n",
    "sub/c.jsonl:1": "line one",
    "sub/c.jsonl:4": "line four",
    "sub/c.jsonl:5": "five\u2028still five\x85end",
  }
  assert found[corpus.TRAIN].keys().isdisjoint(found[corpus.VALIDATION].keys())
  assert "empty.txt, empty" in warned
  assert "latin1.txt, not UTF-8" in warned
  assert "c.jsonl line 3, not JSON with a 'text' field" in warned
  assert "c.jsonl line 6, field 'text' is empty" in warned
  assert "c.jsonl line 7, field 'text' holds int, not a string" in warned
  assert "c.jsonl line 8, field 'text' holds NoneType, not a string" in warned


def test_a_glob_selects_files(tmp_path):
  root = _write_folder(tmp_path / "in")
  data_cfg = _cfg(tmp_path, root / "sub" / "*.jsonl")
  found = _documents(data_cfg)
  assert set(found[corpus.TRAIN]) | set(found[corpus.VALIDATION]) == {
    "c.jsonl:1",
    "c.jsonl:4",
    "c.jsonl:5",
  }


def test_nothing_to_read_is_a_clear_error(tmp_path):
  (tmp_path / "in").mkdir()
  with pytest.raises(ValueError, match="data.text_files=.* matches no .txt or .jsonl"):
    sources.split_records(_cfg(tmp_path, tmp_path / "in"), corpus.TRAIN)


def test_folders_split_follows_train_and_validation_folders(tmp_path, capsys):
  root = tmp_path / "in"
  for split, count in (("train", 5), ("validation", 2)):
    (root / split).mkdir(parents=True)
    for i in range(count):
      (root / split / f"{i}.txt").write_text(f"{split} {i}")
  (root / "README.txt").write_text("about this corpus")
  (root / "test").mkdir()
  (root / "test" / "t.jsonl").write_text(json.dumps({"text": "held out"}) + "\n")
  data_cfg = _cfg(tmp_path, root, text_files_split="folders")
  found = _documents(data_cfg)
  assert sorted(found[corpus.TRAIN]) == [f"train/{i}.txt" for i in range(5)]
  assert sorted(found[corpus.VALIDATION]) == [f"validation/{i}.txt" for i in range(2)]
  warned = capsys.readouterr().err
  assert "ignores 2 file(s) outside train/ and validation/" in warned
  assert "README.txt, test/t.jsonl" in warned


def test_folders_split_without_a_validation_folder_is_a_clear_error(tmp_path):
  (tmp_path / "in" / "train").mkdir(parents=True)
  (tmp_path / "in" / "train" / "x.txt").write_text("x")
  data_cfg = _cfg(tmp_path, tmp_path / "in", text_files_split="folders")
  with pytest.raises(ValueError, match="needs documents under .*validation"):
    sources.split_records(data_cfg, corpus.TRAIN)


def test_builds_twice_byte_identical_and_rebuilds_when_files_change(tmp_path):
  root = _write_folder(tmp_path / "in")
  first = _cfg(tmp_path, root, data_dir=str(tmp_path / "one"))
  second = _cfg(tmp_path, root, data_dir=str(tmp_path / "two"))
  spec = text_files.spec(first)
  built = [corpus.builder(spec, config.data_dir(c)) for c in (first, second)]
  shards = [{f.name: f.read_bytes() for f in b.data_path.glob("*.array_record*")} for b in built]
  assert shards[0] and shards[0] == shards[1]
  (root / "a.txt").write_text("first document, edited and longer\n")
  assert text_files.spec(first).config_name != spec.config_name
  found = _documents(first)
  texts = {**found[corpus.TRAIN], **found[corpus.VALIDATION]}
  assert texts["a.txt"] == "first document, edited and longer\n"


def test_split_modes_match_the_config_check(tmp_path):
  assert set(text_files.SPLITTERS) == {"hash", "folders"}
  with pytest.raises(ValueError, match="hash, folders"):
    config.validate(_cfg(tmp_path, "x", text_files_split="x"), process_count=1)


def test_training_iterator_resumes_exactly(tmp_path, assert_resumes):
  root = tmp_path / "in"
  root.mkdir()
  for i in range(30):
    (root / f"{i}.txt").write_text(f"document {i} " * (i % 7 + 1))
  assert_resumes(_cfg(tmp_path, root))
