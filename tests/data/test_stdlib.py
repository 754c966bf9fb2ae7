import pathlib
import sys
import sysconfig

from lcx.data import config, corpus, stdlib


def _records(corpus_builder, split):
  records = corpus_builder.as_data_source(split)
  return [records[i] for i in range(len(records))]


def _array_record_bytes(corpus_builder):
  files = sorted(corpus_builder.data_path.glob("*.array_record*"))
  return {f.name: f.read_bytes() for f in files}


def test_python_files_skips_tests_installed_packages_and_codec_tables(tmp_path):
  for relative in [
    "os.py",
    "json/decoder.py",
    "test/test_os.py",
    "idlelib/idle_test/test_x.py",
    "site-packages/numpy/core.py",
    "encodings/cp1252.py",
    "json/tests/test_json.py",
    "notes.txt",
  ]:
    (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / relative).write_text("x = 1\n")
  found = [p.relative_to(tmp_path).as_posix() for p in stdlib.python_files(tmp_path)]
  assert found == ["json/decoder.py", "os.py"]


def test_collect_skips_files_that_are_not_utf8(tmp_path):
  (tmp_path / "good.py").write_text("x = 1\n")
  (tmp_path / "also_good.py").write_text("y = 2\n")
  (tmp_path / "latin1.py").write_bytes("s = 'caf\xe9'\n".encode("latin-1"))
  contents = stdlib.collect(tmp_path, validation_fraction=0.5)
  keys = [d.key for docs in contents.splits.values() for d in docs]
  assert sorted(keys) == ["also_good.py", "good.py"]


def test_config_name_carries_the_interpreter_version():
  name = stdlib.spec(config.default_config()).config_name
  assert f"py{sys.version_info.major}.{sys.version_info.minor}." in name


def test_real_stdlib_builds_byte_identical_twice_with_disjoint_splits(tmp_path):
  data_cfg = config.default_config()
  spec = stdlib.spec(data_cfg)
  first = corpus.builder(spec, tmp_path / "a")
  second = corpus.builder(spec, tmp_path / "b")
  assert _array_record_bytes(first) == _array_record_bytes(second)
  keys = {}
  for split in (corpus.TRAIN, corpus.VALIDATION):
    records = _records(first, split)
    assert records == _records(second, split)
    keys[split] = {r["key"].decode() for r in records}
    assert len(keys[split]) == len(records) > 0
  assert keys[corpus.TRAIN].isdisjoint(keys[corpus.VALIDATION])
  root = pathlib.Path(sysconfig.get_paths()["stdlib"])
  expected_keys = {p.relative_to(root).as_posix() for p in stdlib.python_files(root)}
  assert keys[corpus.TRAIN] | keys[corpus.VALIDATION] <= expected_keys
  assert len(keys[corpus.TRAIN] | keys[corpus.VALIDATION]) > 0.9 * len(expected_keys)
  fraction = len(keys[corpus.VALIDATION]) / sum(len(k) for k in keys.values())
  assert 0.02 < fraction < 0.1  # validation_fraction is 0.05.
