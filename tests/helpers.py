"""Test helpers: a tiny config on the real default dataset, and a subprocess runner."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA_DIR = str(ROOT / ".lcx_data")
BASE_ENV = {"PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}  # every command line a test runs
sys.path.insert(0, str(ROOT))  # `configs` is imported as a package by the tests


HOOKS = ("embed", "rotate", "bias", "contextual", "from_input")


def _overrides(scheme: str, hook: str) -> bool:
  from lcx.model import positions

  return getattr(positions.spec(scheme).cls, hook) is not getattr(positions.Scheme, hook)


def schemes_with(*hooks: str) -> list[str]:
  """The registered position schemes that override any of `hooks` (of HOOKS), sorted: tests
  parametrized by it cover a new scheme without being edited."""
  from lcx.model import positions

  return sorted(name for name in positions.SCHEMES if any(_overrides(name, h) for h in hooks))


def hooks_of(scheme: str) -> tuple[str, ...]:
  """The position hooks a scheme overrides (none for NoPE): its kind, for tests that cover each
  kind of scheme with an option instead of each scheme."""
  return tuple(hook for hook in HOOKS if _overrides(scheme, hook))


def compiled(fn):
  """`fn` as one program a call: its positional arguments traced, its keyword arguments (a
  scheme, a remap, a pattern, sizes, a module's parameters) held fixed. Called eagerly, a kernel
  or a model lowers each of its ops as a program of its own, ~10 ms each even when the
  persistent cache holds them: with a warm cache, test_attention.py 45 -> 34 s, test_model.py
  33 -> 18 s, test_generate.py 112 -> 71 s (one process each)."""
  import jax

  def call(*arrays, **fixed):
    return jax.jit(lambda *a: fn(*a, **fixed))(*arrays)

  return call


def block_out(model, layer, x_BxLxD, pos_BxL, seg_BxL=None, kernel="dense"):
  """Decoder block `layer`'s output for input x, with the scheme and plan the decoder gives it
  (one document per row unless `seg_BxL` says otherwise), as one compiled program."""
  import functools

  import jax.numpy as jnp

  from lcx.model import kernels

  seg_BxL = jnp.ones(pos_BxL.shape, jnp.int32) if seg_BxL is None else seg_BxL
  kern = kernels.get_kernel(kernel, model.chunk_size)

  def block(x_BxLxD, pos_BxL, seg_BxL):
    plans = model.plans(functools.partial(kern.prepare, pos_BxL, seg_BxL))
    inputs = model.layer_inputs(layer, plans)
    return model.blocks[layer](x_BxLxD, kernel=kern, q_pos_BxL=pos_BxL, **inputs)

  return compiled(block)(x_BxLxD, pos_BxL, seg_BxL)


def tiny_config(pos: str = "rope", **train):
  """2 layers, d=64, L=32, batch 8: compiles in seconds, trains at ~100 steps/s on CPU."""
  from configs import base

  config = base.get_config(f"pos={pos},size=tiny")
  config.data.data_dir = DATA_DIR
  config.data.seq_len = 32
  config.data.batch_size = 8
  config.train.steps = 20
  config.train.warmup_steps = 5
  config.train.log_every = 1
  config.train.checkpoint_every = 10
  config.eval.num_tokens = 2048
  config.eval.batch_tokens = 1024
  for key, value in train.items():
    config.train[key] = value
  return config


def batch_of(tokens_BxT1) -> dict:
  """The train batch of (b, t + 1) tokens: one document a row, every position scored."""
  import numpy as np

  tokens = np.asarray(tokens_BxT1, np.int32)
  b, t = tokens.shape[0], tokens.shape[1] - 1
  return {
    "inputs": tokens[:, :-1],
    "targets": tokens[:, 1:],
    "segment_ids": np.ones((b, t), np.int32),
    "positions": np.broadcast_to(np.arange(t, dtype=np.int32), (b, t)).copy(),
    "loss_mask": np.ones((b, t), np.float32),
  }


def fixed_batch(b=8, t=32) -> dict:
  """A fixed (b, t) batch of byte tokens, every position scored: a few steps on it lower the
  loss."""
  import numpy as np

  return batch_of(np.arange(b * (t + 1)).reshape(b, t + 1) * 7919 % 256)


def train_fixed_batch(config, steps: int):
  """(losses, params): `steps` train steps of `config`'s model on `fixed_batch`, from its init."""
  import jax
  import jax.numpy as jnp

  from lcx.run import prepare, sharding, train

  trainer = train.Trainer(prepare.prepare(config))
  batch = sharding.global_batch(fixed_batch(), trainer.mesh, trainer.rules)
  state = trainer.init_state()
  params, opt_state, losses = state["params"], state["opt_state"], []
  for step in range(steps):
    params, opt_state, metrics = trainer.step(params, opt_state, batch, jnp.int32(step))
    losses.append(float(jax.device_get(metrics["loss"])))
  return losses, params


def equations(jaxpr):
  """Every equation of `jaxpr` and of the jaxprs nested in its equations (jit, scan, cond,
  custom_vjp, a pallas_call's kernel), each before those nested in it."""
  import jax.extend

  for eqn in jaxpr.eqns:
    yield eqn
    for sub in jax.extend.core.jaxprs_in_params(eqn.params):
      yield from equations(sub)


def fake_devices(n: int) -> dict[str, str]:
  """The environment of a CPU subprocess with `n` fake devices: the device count is appended to
  this process's XLA_FLAGS (conftest's compile flags), not put in their place."""
  flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={n}"
  return {"XLA_FLAGS": flags.strip(), "JAX_PLATFORMS": "cpu"}


def set_fields(config, fields: dict) -> None:
  """Sets dotted fields ("model.attention.sink": "learned") of a ConfigDict in place."""
  for dotted, value in fields.items():
    *parents, leaf = dotted.split(".")
    node = config
    for key in parents:
      node = node[key]
    node[leaf] = value


TINY_FLAGS = [
  "--config=configs/base.py:size=tiny",
  f"--config.data.data_dir={DATA_DIR}",
  "--config.data.seq_len=32",
  "--config.data.batch_size=8",
  "--config.train.warmup_steps=5",
  "--config.train.log_every=1",
  "--config.eval.num_tokens=2048",
  "--config.eval.batch_tokens=1024",
]


_SERVER: list = []  # this test process's fork server, started on first use


def _forkserver(env: dict[str, str]):
  """This process's `tests.forkserver.Server` when a run in `env` can be forked from it (see
  its docstring), else None: `LCX_TEST_FORK=0` turns it off, and it runs on Linux only (where
  it was tested; macOS warns against forking a process with its frameworks loaded)."""
  if os.environ.get("LCX_TEST_FORK", "1") == "0" or sys.platform != "linux":
    return None
  from tests import forkserver

  if not _SERVER or _SERVER[0].proc.poll() is not None:
    _SERVER[:] = [forkserver.Server(str(ROOT), dict(os.environ, **BASE_ENV))]
  return _SERVER[0] if _SERVER[0].accepts(env) else None


def run_lcx(args, *, env=None, check=True, timeout=300, module="lcx.main", cwd=ROOT):
  """Runs `python -m MODULE ARGS` from `cwd` (the repo root), with this checkout's lcx;
  returns the CompletedProcess. Forked from `tests.forkserver` where that is the same run."""
  full_env = dict(os.environ, **BASE_ENV, **(env or {}))
  server = _forkserver(full_env)
  if server is None:
    proc = subprocess.run(
      [sys.executable, "-m", module, *args],
      cwd=cwd,
      env=full_env,
      capture_output=True,
      text=True,
      timeout=timeout,
    )
  else:
    with tempfile.TemporaryDirectory() as tmp:
      out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
      code = server.run(
        module, args, env=full_env, cwd=cwd, stdout=out, stderr=err, timeout=timeout
      )
      proc = subprocess.CompletedProcess(
        [sys.executable, "-m", module, *args],
        code,
        pathlib.Path(out).read_text(),
        pathlib.Path(err).read_text(errors="backslashreplace"),
      )
  if check and proc.returncode != 0:
    raise AssertionError(
      f"exit {proc.returncode}\nSTDOUT:\n{proc.stdout[-3000:]}\nSTDERR:\n{proc.stderr[-5000:]}"
    )
  return proc


def refused_before_jax(args, module: str = "lcx.main", env=None):
  """Runs `python -m MODULE ARGS` under PYTHONPROFILEIMPORTTIME (Python lists every module it
  imports on stderr) and asserts exit status 2, one `error:` line and no jax, flax or jaxlib
  module imported; returns the error line."""
  env = {"PYTHONPROFILEIMPORTTIME": "1", **(env or {})}
  proc = run_lcx(args, env=env, check=False, timeout=60, module=module)
  lines = proc.stderr.strip().splitlines()
  imported = {line.rpartition("|")[2].strip() for line in lines if line.startswith("import time:")}
  assert "lcx.cli" in imported  # the profile was printed (every entry point's errors use it)
  assert not {m for m in imported if m.split(".")[0] in ("jax", "flax", "jaxlib")}
  errors = [line for line in lines if not line.startswith("import time:")]
  assert proc.returncode == 2 and errors == [errors[0]], proc.stderr[-3000:]
  assert errors[0].startswith("error: "), errors[0]
  return errors[0]


def read_metrics(workdir) -> dict[int, dict]:
  """metrics.jsonl as {step: record}; a later record for the same step wins."""
  out = {}
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    for line in f:
      record = json.loads(line)
      out[record["step"]] = record
  return out


def bench_options(*argv):
  """lcx.tools.bench's Options from command-line flags (a fresh FlagValues each call)."""
  from absl import flags

  from lcx.tools.bench import options

  fv = flags.FlagValues()
  options.define_flags(fv)
  fv(["bench", *argv])
  return options.from_flags(fv)


def committed_repo(repo: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
  """A git repository at `repo` holding `files` (path -> text) in one commit."""
  for path, text in files.items():
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)
  git(repo, "init", "-q")
  git(repo, "add", "-A")
  git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
  return repo


def git(repo, *args: str) -> str:
  """`git -C repo ARGS`'s stdout; a failure raises."""
  done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
  return done.stdout
