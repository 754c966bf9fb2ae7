"""The default dataset is built once into `.lcx_data/` (gitignored) under a file lock, so
parallel test workers and later sessions share it. Every test, and every `python -m lcx...`
subprocess a test starts (the environment variable), runs with implicit rank promotion as an
error: a broadcast of arrays of different ranks must be written out (`[None]`, `broadcast_to`).

Every compiled program goes to a persistent cache in `.lcx_data/jax_cache`, shared the same
way: many tests and CLI subprocesses compile the same tiny model's steps, and eager calls compile
one program per op (a small dense attention call: 57 of them, 2.7 s); a warm cache loads them
instead (tests/model/test_attention.py: 77 s cold, 30 s warm). Tests that compare kernels call them
through `tests.helpers.compiled`: one program a call, lowered once, where eager ops lower one by
one. Not JAX's size limit: with one, every write scans the whole directory (with 10k entries a
test ran 4x slower, 77 s against 18 s); the session start trims the cache to CACHE_KEEP_BYTES
instead, oldest first, once.

Compiling, not running, is most of a test's time: tests compile at XLA's lowest backend (LLVM)
optimization level (`jax_disable_most_optimizations`; the HLO passes, hence fusion, buffers
and memory, are unchanged), a tenth to a quarter less time for a cold test, and with XLA's
older CPU fusion code generator (`XLA_FLAGS`: `--xla_cpu_use_fusion_emitters=false`, set
before the backend starts, so subprocesses get it too): half the XLA time of the default MLIR
fusion emitters (six generation cases: 14.4 s of XLA compilation against 6.6 s). Each
program's LLVM module is compiled in one piece (`LLVM_IN_ONE_PIECE`), and Python's cyclic
collector skips the imports and runs about a thirtieth as often (`collect_garbage_less`, here
and in the fork server's children): together, a cold full run's tracing, lowering and XLA
seconds 646 -> 481, its test seconds 1220 -> 932, 628 -> 483 s of wall time (2026-11-29).

Command lines (`tests.helpers.run_lcx`) fork from a process per worker that has already
imported jax, flax, optax, orbax, tensorflow_datasets and grain (tests/forkserver.py): a tiny
training run takes 2.5 s instead of 5.3, a refused command line 0.08 s instead of 0.28;
`LCX_TEST_FORK=0` starts each as a fresh interpreter instead.

Trained fixtures are built once per run, not once per xdist worker: a test file with a
module-scoped fixture is one unit of work for the scheduler (`durations.unit`; every other
test is a unit of its own, as `--dist load`), and the session-scoped runs are trained by the
first worker that needs them and copied by the others (`_built_once`). The stored durations
(tests/durations.py) order the units longest first and mark the quick loop's slow tests."""

import fcntl
import os
import pathlib
import shutil
import sys

# XLA:CPU splits each program's LLVM module into pieces it compiles on threads of their own:
# with two workers on two cores there is no core to spare, only the split to pay for.
LLVM_IN_ONE_PIECE = ["--xla_cpu_parallel_codegen_split_count=1"]

os.environ["XLA_FLAGS"] = " ".join(
  [os.environ.get("XLA_FLAGS", ""), "--xla_cpu_use_fusion_emitters=false", *LLVM_IN_ONE_PIECE]
)

import jax  # noqa: E402
import pytest  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tests import durations  # noqa: E402
from tests.forkserver import collect_garbage_less  # noqa: E402
from tests.helpers import DATA_DIR  # noqa: E402

collect_garbage_less()

CACHE_DIR = os.path.join(DATA_DIR, "jax_cache")
CACHE_KEEP_BYTES = 1024**3
JAX_OPTIONS = {
  "jax_numpy_rank_promotion": "raise",
  "jax_compilation_cache_dir": CACHE_DIR,
  "jax_persistent_cache_min_compile_time_secs": 0,
  "jax_disable_most_optimizations": True,
}
for name, value in JAX_OPTIONS.items():
  os.environ[name.upper()] = str(value)  # subprocesses (CLI tests)
  jax.config.update(name, value)


def _trim_cache(directory: str, keep_bytes: int) -> None:
  """Removes the least recently modified entries until the rest fit in `keep_bytes`."""
  entries = sorted(pathlib.Path(directory).glob("*"), key=lambda p: p.stat().st_mtime)
  total = sum(p.stat().st_size for p in entries)
  for path in entries:
    if total <= keep_bytes:
      break
    total -= path.stat().st_size
    path.unlink(missing_ok=True)


def pytest_sessionstart(session):
  if os.path.isdir(CACHE_DIR) and not hasattr(session.config, "workerinput"):  # xdist: once
    _trim_cache(CACHE_DIR, CACHE_KEEP_BYTES)


def _scheduling():
  """xdist's scope scheduler over `durations.unit`s, in collection order (longest first, see
  `pytest_collection_modifyitems`). xdist's own `--dist loadgroup` would group with marks,
  but silently stopped grouping under pytest 9.2 (pytest-dev/pytest-xdist#1386)."""
  from xdist.scheduler import LoadScopeScheduling

  class UnitScheduling(LoadScopeScheduling):
    def _split_scope(self, nodeid: str) -> str:
      return durations.unit(nodeid)

  return UnitScheduling


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
  if config.getoption("dist") == "load":  # the default (launch.sh test); others as asked
    config.option.loadscopereorder = False  # keep the longest-first order
    return _scheduling()(config, log)
  return None


def pytest_addoption(parser):
  parser.addoption(
    "--store_durations",
    metavar="PATH",
    help="write each test's seconds to PATH (tests/durations.json: run in a fresh clone)",
  )


def pytest_configure(config):
  path = config.getoption("store_durations")
  if path and not hasattr(config, "workerinput"):  # the controller sees every report
    config.pluginmanager.register(durations.Recorder(path), "lcx_durations")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(config, items):
  seconds = durations.stored()
  for item in items:
    if durations.is_slow(item.nodeid, seconds):
      item.add_marker(pytest.mark.slow)
  items[:] = durations.longest_first(items, seconds, nodeid=lambda item: item.nodeid)


def _built_once(tmp_path_factory, name: str, build) -> pathlib.Path:
  """A fresh copy, in this worker's temporary directory, of `build(directory)`'s directory,
  which the first worker to get here builds for the run (under a lock) and the others copy:
  the tests may write into their copy as they did into a fixture of their own."""
  base = tmp_path_factory.getbasetemp()
  shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the run's
  built = shared / f"{name}.built"
  with open(shared / f"{name}.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not (built / ".complete").exists():
      shutil.rmtree(built, ignore_errors=True)
      build(built)
      (built / ".complete").touch()
    fcntl.flock(lock, fcntl.LOCK_UN)
  copy = tmp_path_factory.mktemp(name) / "run"
  shutil.copytree(built, copy, ignore=shutil.ignore_patterns(".complete"))
  return copy


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


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, default_dataset):
  """A rope run of the tiny config trained for 2 steps (checkpoints 1 and 2), for the
  tests that need "a trained checkpoint" (one training per run, `_built_once`).
  Tests must not change it: copy it first."""
  from lcx.run import train
  from tests.helpers import tiny_config

  def build(workdir):
    train.train(tiny_config("rope", steps=2, warmup_steps=1, checkpoint_every=2), str(workdir))

  return str(_built_once(tmp_path_factory, "tiny_run", build))


@pytest.fixture(scope="session")
def copy_run(tmp_path_factory, default_dataset):
  """(config, workdir): a tiny RoPE model trained on `copy` with sizes 1..6 until it copies
  (300 steps: exact match 0.97 at sizes 3, 5, 6 and greedy 1.0 at size 4, where the tests ask
  0.8 and 0.9; 600 steps gave 1.0 and 1.0), for the task evaluation and generation tests.
  Evaluations write their results into it; copy the config before changing it."""
  from lcx.run import train
  from tests.helpers import tiny_config

  config = tiny_config(
    "rope", steps=300, warmup_steps=15, lr=3e-3, log_every=100, checkpoint_every=1000
  )
  config.data.update(
    name="task",
    task="copy",
    task_min_len=1,
    task_max_len=6,
    seq_len=32,
    batch_size=16,
    task_eval_examples=120,
  )
  workdir = _built_once(tmp_path_factory, "copy", lambda d: train.train(config, str(d)))
  return config, str(workdir)
