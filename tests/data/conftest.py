"""Shared fixtures: a tiny stand-in for the stdlib, so pipeline tests build in a second."""

import pathlib

import pytest

from lcx.data import config, sources, stdlib


def write_fake_stdlib(root: pathlib.Path, num_files: int = 60) -> pathlib.Path:
  """`mod{i}.py` files whose every line names the document, of varied lengths."""
  for i in range(num_files):
    path = root / f"pkg{i % 3}" / f"mod{i:03d}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# document {i:03d}\n" * (1 + (i * 7) % 40))
  return root


@pytest.fixture
def fake_stdlib_cfg(tmp_path, monkeypatch):
  """A data config whose `stdlib` source reads a small fake tree in `tmp_path`."""
  root = write_fake_stdlib(tmp_path / "stdlib")
  monkeypatch.setitem(sources.CORPUS_SPECS, "stdlib", lambda data_cfg: stdlib.spec(data_cfg, root))
  data_cfg = config.default_config()
  data_cfg.data_dir = str(tmp_path / "datasets")
  data_cfg.seq_len = 64
  data_cfg.batch_size = 4
  data_cfg.validation_fraction = 0.2
  return data_cfg


def _assert_resumes(data_cfg, skip: int = 3, compare: int = 3):
  """The batches after a saved state are the same from a fresh iterator set to it."""
  import numpy as np

  import lcx.data

  iterator = lcx.data.make_train_iterator(data_cfg)
  for _ in range(skip):
    next(iterator)
  state = iterator.get_state()
  expected = [next(iterator) for _ in range(compare)]
  resumed = lcx.data.make_train_iterator(data_cfg)
  resumed.set_state(state)
  for batch in expected:
    resumed_batch = next(resumed)
    for name in batch:
      np.testing.assert_array_equal(batch[name], resumed_batch[name])


@pytest.fixture
def assert_resumes():
  """`assert_resumes(data_cfg)`: checks the training iterator resumes exactly."""
  return _assert_resumes
