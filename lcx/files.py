"""Files written whole or not at all (jax-free, for every layer): a kill, a full disk or a failed
write leaves the earlier file, or none, never a truncated one."""

from __future__ import annotations

import contextlib
import errno
import json
import os
from typing import IO, Any, Iterator

from lcx import errors


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w") -> Iterator[IO]:
  """PATH.tmp open for writing ("w": UTF-8 text written as given, or "wb"), renamed over `path`
  when the block ends, so a kill leaves the earlier file; a block or write that fails removes
  PATH.tmp and leaves `path` as it was, and a full disk is a RunFault naming the file."""
  tmp = path + ".tmp"
  text = {} if "b" in mode else {"encoding": "utf-8", "newline": ""}
  try:
    with open(tmp, mode, **text) as f:
      yield f
    os.replace(tmp, path)
  except BaseException as error:
    with contextlib.suppress(OSError):
      os.remove(tmp)
    if getattr(error, "errno", None) != errno.ENOSPC:
      raise
    raise errors.RunFault(
      f"no space left on the device of {os.path.dirname(os.path.abspath(path))} while "
      f"writing {path}; removed its partial copy. Free space, then run the same command again"
    ) from None


def write_atomic(path: str, data: bytes | str) -> None:
  """Writes `data` (a str as UTF-8) to `path` whole or not at all (atomic_open)."""
  with atomic_open(path, "wb" if isinstance(data, bytes) else "w") as f:
    f.write(data)


def write_json(path: str, data: Any, **dump) -> None:
  """Writes `data` (json.dump's `dump` options) to `path` whole or not at all (atomic_open)."""
  with atomic_open(path) as f:
    json.dump(data, f, **dump)
