"""What the train-step sections time: the default config at a size and scheme, a synthetic
batch, and lcx's own compiled train step on it."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from lcx import data
from lcx.config import checks as config_lib, defaults
from lcx.model import positions
from lcx.run import prepare, sharding, train
from lcx.tools.bench.measure import Program


def bench_config(scheme: str, size: str, batch_size: int, seq_len: int):
  """The default config at `size` with `scheme`, vocabulary resolved (byte tokenizer: 259)."""
  config = defaults.get_config(f"pos={scheme},size={size}")
  config.data.batch_size, config.data.seq_len = batch_size, seq_len
  return config_lib.resolve(config, data.get_tokenizer(config.data).vocab_size)


# Model options the positions section times as rows SCHEME+OPTION (`--options`): the scheme the
# option is measured on (the one its paper uses it with), and the config fields it sets. Trained
# options only: eval-time remaps (dual_chunk, ...) do not change the train step timed here.
MODEL_OPTIONS = {
  "stick_breaking": ("nope", {"attention.kind": "stick_breaking"}),  # with its remainder vector
  "qk_norm": ("rope", {"qk_norm": True}),
  "log_n": ("rope", {"attention.temperature": "log_n"}),
  "ssmax": ("rope", {"attention.temperature": "ssmax"}),
  "sink": ("rope", {"attention.sink": "learned"}),
  "nope_every": ("rope", {"nope_every": 2}),
  "position_window": ("rope", {"position_window": 64}),
  "scale_invariant": ("p_rope", {"attention.temperature": "scale_invariant"}),
  "llama4": ("rope", {"nope_every": 2, "attention.temperature": "llama4"}),  # NoPE blocks only
  "gate_elementwise": ("rope", {"attention.gate": "elementwise"}),
  "gate_headwise": ("rope", {"attention.gate": "headwise"}),
  "resonance": (  # Resonance YaRN
    "rope",
    {
      "position.scaling.rope_type": "yarn",
      "position.scaling.factor": 4.0,
      "position.scaling.resonance": True,
    },
  ),
  "cope_shared": ("cope", {"position.shared": True}),  # the paper's --cope-shared variant
}


def option_rows(options: list[str]) -> list[str]:
  """`--options` as positions-section rows: ["nope+stick_breaking", "rope+qk_norm", ...]."""
  return [f"{MODEL_OPTIONS[o][0]}+{o}" for o in options]


def options_config(opts, scheme: str, size: str | None = None):
  """bench_config at the flags' batch and length; `size` defaults to --model_size. `scheme`
  may be SCHEME+OPTION: with that entry of MODEL_OPTIONS set under model."""
  scheme, _, option = scheme.partition("+")
  config = bench_config(scheme, size or opts.model_size, opts.batch_size, opts.seq_len)
  for field, value in (MODEL_OPTIONS[option][1] if option else {}).items():
    *parents, leaf = field.split(".")
    node = config.model
    for key in parents:
      node = node[key]
    node[leaf] = value
  return config


def synthetic_batch(batch_size: int, seq_len: int, vocab_size: int, seed: int = 0) -> dict:
  """Random tokens in the train loop's batch layout: one document per row, every token scored."""
  rng = np.random.default_rng(seed)
  tokens_BxL1 = rng.integers(0, vocab_size, (batch_size, seq_len + 1), dtype=np.int32)
  pos_BxL = np.broadcast_to(np.arange(seq_len, dtype=np.int32), (batch_size, seq_len))
  return {
    "inputs": tokens_BxL1[:, :-1],
    "targets": tokens_BxL1[:, 1:],
    "positions": pos_BxL.copy(),
    "segment_ids": np.ones((batch_size, seq_len), np.int32),
    "loss_mask": np.ones((batch_size, seq_len), np.float32),
  }


def lcx_program(config) -> Program:
  """lcx's own jitted, sharded, donating train step (`train.Trainer`)."""
  trainer = train.Trainer(prepare.prepare(config))
  state = trainer.init_state()
  d = config.data
  batch = sharding.global_batch(
    synthetic_batch(d.batch_size, d.seq_len, config.model.vocab_size), trainer.mesh, trainer.rules
  )
  step_no = jnp.asarray(0, jnp.int32)
  start = time.perf_counter()
  compiled = trainer.step.lower(state["params"], state["opt_state"], batch, step_no).compile()
  compile_s = time.perf_counter() - start

  def step():
    state["params"], state["opt_state"], metrics = compiled(
      state["params"], state["opt_state"], batch, step_no
    )
    return jax.block_until_ready(metrics)  # the step's loss and norms, for the tests

  step()
  return Program(step, compile_s)


def registered(schemes: list[str]) -> tuple[list[str], list[str]]:
  """(schemes registered now, schemes asked for but not registered: skipped with a note)."""
  have = [s for s in schemes if s in positions.SCHEMES]
  missing = [s for s in schemes if s not in positions.SCHEMES]
  for s in missing:
    print(f"  note: position scheme {s!r} is not registered; skipped", flush=True)
  return have, missing


def buildable(opts, schemes: list[str]) -> tuple[dict[str, Program], dict[str, str]]:
  """lcx train steps of the schemes that build and compile; the others with their error."""
  programs, failed = {}, {}
  for s in schemes:
    try:
      programs[s] = lcx_program(options_config(opts, s))
    except Exception as e:  # a scheme under construction must not stop the other numbers
      failed[s] = f"failed to build: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
      print(f"  note: {s}: {failed[s]}", flush=True)
  return programs, failed


def skipped_rows(result: dict, width: int) -> list[list[str]]:
  """Table rows for a section's `skipped` schemes: name, reason, empty cells."""
  return [[s, why[:70]] + [""] * (width - 2) for s, why in result["skipped"].items()]
