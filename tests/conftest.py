"""The default dataset is built once into `.lcx_data/` (gitignored) under a file lock, so
parallel test workers and later sessions share it. Every test, and every `python -m lcx...`
subprocess a test starts (the environment variable), runs with implicit rank promotion as an
error: a broadcast of arrays of different ranks must be written out (`[None]`, `broadcast_to`).

Compiled programs go to a persistent cache in `.lcx_data/jax_cache` (every size of program, up
to 2 GB, least recently used dropped first), shared the same way: many tests and CLI
subprocesses compile the same tiny model's steps, and a warm cache loads them instead."""

import fcntl
import os
import pathlib
import sys

import jax
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tests.helpers import DATA_DIR  # noqa: E402

JAX_OPTIONS = {
  "jax_numpy_rank_promotion": "raise",
  "jax_compilation_cache_dir": os.path.join(DATA_DIR, "jax_cache"),
  "jax_persistent_cache_min_compile_time_secs": 0,
  "jax_compilation_cache_max_size": 2 * 1024**3,
}
for name, value in JAX_OPTIONS.items():
  os.environ[name.upper()] = str(value)  # subprocesses (CLI tests)
  jax.config.update(name, value)


@pytest.fixture(scope="session", autouse=True)
def default_dataset():
  """Builds the default dataset once, whichever worker gets the lock first."""
  from configs import base
  from lcx import data

  os.makedirs(DATA_DIR, exist_ok=True)
  cfg = base.get_config("size=tiny").data
  cfg.data_dir = DATA_DIR
  with open(os.path.join(DATA_DIR, ".build.lock"), "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    data.validation_tokens(cfg, 1024)
    fcntl.flock(lock, fcntl.LOCK_UN)
  return DATA_DIR
