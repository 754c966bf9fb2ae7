"""lcx.files: a file is written whole or not at all; a failed write leaves the earlier file (or
none) and no PATH.tmp, and a full disk is a RunFault naming the file."""

import os

import pytest

from lcx import errors, files


def full_disk(path) -> None:
  """Makes PATH.tmp a link to /dev/full: the write that atomic_open makes there meets a real
  ENOSPC, as on a full disk."""
  os.symlink("/dev/full", f"{path}.tmp")


@pytest.mark.parametrize(
  "data, stored",
  [(b"\x00\xff raw", b"\x00\xff raw"), ("caf\u00e9\r\nline\n", b"caf\xc3\xa9\r\nline\n")],
)
def test_write_atomic_stores_bytes_and_utf8_text_as_given(tmp_path, data, stored):
  path = tmp_path / "out.bin"
  path.write_bytes(b"earlier, longer than the new contents")
  files.write_atomic(str(path), data)
  assert path.read_bytes() == stored
  assert os.listdir(tmp_path) == ["out.bin"]


def test_write_json_passes_json_dump_options(tmp_path):
  path = tmp_path / "r.json"
  files.write_json(str(path), {"b": [1], "a": "\u00e9"}, indent=1, sort_keys=True)
  assert path.read_text(encoding="utf-8") == '{\n "a": "\\u00e9",\n "b": [\n  1\n ]\n}'


@pytest.mark.parametrize("earlier", [b'{"kept": true}', None])
@pytest.mark.parametrize("failure", [TypeError, KeyboardInterrupt])
def test_a_failure_mid_write_leaves_the_earlier_file_or_none_and_no_tmp(tmp_path, earlier, failure):
  path = tmp_path / "r.json"
  if earlier is not None:
    path.write_bytes(earlier)
  if failure is TypeError:  # json.dump has written '{"a": 1, "b": ' when it meets the object
    with pytest.raises(TypeError, match="not JSON serializable"):
      files.write_json(str(path), {"a": 1, "b": object()})
  else:  # a Ctrl-C between two writes
    with pytest.raises(KeyboardInterrupt), files.atomic_open(str(path)) as f:
      f.write('{"a": ')
      f.flush()
      assert os.path.getsize(f"{path}.tmp") == 6  # the half is on disk, beside the earlier
      raise KeyboardInterrupt
  assert os.listdir(tmp_path) == ([] if earlier is None else ["r.json"])
  assert earlier is None or path.read_bytes() == earlier


@pytest.mark.parametrize("write", [files.write_atomic, files.write_json])
def test_a_full_disk_is_a_run_fault_naming_the_file_and_keeps_the_earlier(tmp_path, write):
  path = tmp_path / "sub" / "r.json"
  path.parent.mkdir()
  path.write_text("earlier")
  full_disk(path)
  with pytest.raises(errors.RunFault) as fault:
    write(str(path), "new contents")
  assert str(fault.value) == (
    f"no space left on the device of {tmp_path}/sub while writing {path}; removed its partial "
    "copy. Free space, then run the same command again"
  )
  assert fault.value.__cause__ is None and fault.value.__suppress_context__
  assert os.listdir(path.parent) == ["r.json"] and path.read_text() == "earlier"


def test_another_os_error_is_raised_as_it_is(tmp_path):
  """Only ENOSPC is the user's to fix by freeing space; a missing folder stays an OSError."""
  path = tmp_path / "missing" / "r.json"
  with pytest.raises(FileNotFoundError, match=r"r\.json\.tmp"):
    files.write_atomic(str(path), "x")
  assert not path.parent.exists()
