"""One train batch through the Pallas kernel (interpret mode on CPU) equals the XLA path, loss
and every parameter's gradient, for the trainable options the train step supports, each on
tiny models of the registered schemes: the positions the train step samples (randomized
positions and distances, PoSE), temperatures, the sink, QK-norm, gates, per-layer NoPE, the
position window, sparse patterns, rope scaling; with GQA and two packed documents per row that
cross a block edge, at a length that is not a multiple of the block. An option the kernel
cannot run is refused for impl=pallas by one error naming the field, and auto keeps XLA on a
GPU."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.config import checks as config_lib
from lcx.model import decoder as model, patterns, positions
from lcx.model.kernels import flash, impl
from lcx.run import train
from tests import pairwise
from tests.helpers import set_fields, tiny_config

B, T, VOCAB, BLOCK = 2, 21, 64, 8  # T pads to 24 with 8-blocks
SPLIT = 10  # the second document starts inside the second block
TOL = dict(rtol=1e-4, atol=1e-5)
# XLA:CPU compiles each case's two programs faster (~35%) without LLVM's costly passes.
CHEAP = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def _config(scheme: str, fields: dict):
  """The tiny config at T with GQA, 8-blocks and `fields` (dotted, from the root) set."""
  config = tiny_config(scheme)
  config.data.seq_len = T
  m = config.model
  m.vocab_size, m.num_kv_heads, m.attention.block_size = VOCAB, 2, BLOCK
  set_fields(config, fields)
  return config


def _batch(seed: int = 0) -> dict:
  """Two packed documents per row (positions restart at SPLIT), every token scored."""
  tokens_BxL1 = jax.random.randint(jax.random.key(seed), (B, T + 1), 0, VOCAB)
  seg_BxT = jnp.broadcast_to((jnp.arange(T) >= SPLIT).astype(jnp.int32) + 1, (B, T))
  pos_BxT = jnp.where(seg_BxT == 1, jnp.arange(T), jnp.arange(T) - SPLIT)
  return {
    "inputs": tokens_BxL1[:, :-1],
    "targets": tokens_BxL1[:, 1:],
    "positions": pos_BxT.astype(jnp.int32),
    "segment_ids": seg_BxT,
    "loss_mask": jnp.ones((B, T), jnp.float32),
  }


def _loss_and_grads(config, impl_name: str, batch: dict, steps) -> list:
  """[(loss, grads)] of the train step's loss at each step number (its sampled positions),
  with `model.attention.impl=impl_name`; one compiled program for all steps."""
  config.model.attention.impl = impl_name
  decoder = model.Decoder(config.model, rngs=nnx.Rngs(config.seed))
  graphdef, params = nnx.split(decoder, nnx.Param)
  sample = train.position_sampler(config)

  @jax.jit(compiler_options=CHEAP)
  def loss_and_grads(params, step):
    pos_BxL, distances_L = sample(batch, step)
    return jax.value_and_grad(
      lambda p: train.loss_fn(nnx.merge(graphdef, p), batch, pos_BxL, distances_L)
    )(params)

  return [loss_and_grads(params, jnp.asarray(s, jnp.int32)) for s in steps]


def _assert_pallas_equals_xla(config, steps=(0,)) -> None:
  batch = _batch()
  want = _loss_and_grads(config, "xla", batch, steps)
  got = _loss_and_grads(config, "pallas", batch, steps)
  for (want_loss, want_grads), (got_loss, got_grads) in zip(want, got):
    np.testing.assert_allclose(got_loss, want_loss, **TOL)
    assert jax.tree.structure(got_grads) == jax.tree.structure(want_grads)
    for (path, w), g in zip(
      jax.tree_util.tree_leaves_with_path(want_grads), jax.tree.leaves(got_grads)
    ):
      np.testing.assert_allclose(g, w, **TOL, err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize(
  "scheme",
  [
    s if s in ("alibi", "t5") else pytest.param(s, marks=pytest.mark.slow)
    for s in sorted(s for s in positions.SCHEMES if positions.spec(s).cls.bias_of_distance)
  ],
)
def test_random_distances_with_a_bias_in_the_kernel_equal_xla(scheme):
  """Randomized training of a distance-only bias samples distances: the scheme reaches the
  kernel inside `RandomDistances`, a wrapper nnx cannot split (it crashed in `_traced_bias`:
  IndexError). ALiBi's per-head slopes and T5's per-head table are the inner scheme's (quick;
  KERPLE and Sandwich slow); two steps, two samples of distances."""
  config = _config(scheme, {"train.random_positions": 64, "model.num_layers": 1})
  config_lib.check_fields(config)
  _assert_pallas_equals_xla(config, steps=(0, 1))


# The options a train step runs, as factors of values (dotted fields set on the tiny config).
# Each case is one scheme with one value of every factor: value i % n of each factor for the
# i-th scheme, or the next valid one where the config refuses it (nope_every with an absolute
# scheme, scaling without rotary fields, ...). `test_the_cases_hold_every_scheme_and_option`
# holds that every value is in some case.
FACTORS = {
  "temperature": [
    {},
    {"model.attention.temperature": "log_n"},
    {"model.attention.temperature": "ssmax"},
    {"model.attention.temperature": "llama4", "model.nope_every": 2, "model.num_layers": 2},
  ],
  "sink": [{}, {"model.attention.sink": "learned"}],
  "qk_norm": [{}, {"model.qk_norm": True}],
  "gate": [{}, {"model.attention.gate": "elementwise"}, {"model.attention.gate": "headwise"}],
  "layers": [
    {},
    {"model.nope_every": 2, "model.num_layers": 2},
    {"model.position_window": 6},
  ],
  "scaling": [
    {},
    {
      "model.position.scaling.rope_type": "yarn",
      "model.position.scaling.factor": 4.0,
      "model.position.scaling.resonance": True,
    },
  ],
  "sampled": [
    {},
    {"train.random_positions": 64},  # distances for a distance-only bias, else positions
    {"train.random_positions": 64, "train.random_bias": "positions"},
    {"train.pose_target": 64},
  ],
  "head_dim": [{}, {"model.head_dim": 24}],  # not a power of two: the kernel pads E
  "pattern": [{}]
  + [
    {"model.attention.pattern": {"name": name, **{f: 3 if f == "sink" else 5 for f in fields}}}
    for name, fields in sorted(
      (name, [f for f in patterns.default_config(name).keys() if f != "name"])
      for name in patterns.PATTERNS
      if name != "dense"
    )
  ],
}
# Options the kernel does not run: impl=pallas is refused naming the field, auto keeps XLA.
REFUSED = {
  "stick_breaking": ("nope", {"model.attention.kind": "stick_breaking"}),
  "scale_invariant": ("p_rope", {"model.attention.temperature": "scale_invariant"}),
  **{name: (name, {}) for name in ("cope", "path")},
}


def _fields_of(case: dict) -> dict:
  return {f: v for value in case.values() for f, v in value.items()}


def _valid(scheme: str, fields: dict) -> bool:
  try:
    config_lib.check_fields(_config(scheme, {**fields, "model.attention.impl": "xla"}))
  except (KeyError, ValueError):  # a field the scheme lacks, or a value refused with it
    return False
  return True


def _cases() -> list[tuple[str, dict]]:
  schemes = sorted(s for s in positions.SCHEMES if s not in REFUSED)
  cases = []
  for i, scheme in enumerate(schemes):
    chosen = {}
    for factor, values in FACTORS.items():
      for k in range(len(values)):
        value = values[(i + k) % len(values)]
        if _valid(scheme, _fields_of({**chosen, factor: value})):
          chosen[factor] = value
          break
    cases.append((scheme, chosen))
  return cases


CASES = _cases()


def _case_id(scheme: str, chosen: dict) -> str:
  """scheme-factorN-...: the factors set (N: the value's index in FACTORS)."""
  names = [f"{f}{vs.index(chosen[f])}" for f, vs in FACTORS.items() if chosen[f]]
  return "-".join([scheme, *names])


def test_the_cases_hold_every_scheme_and_option():
  held = {(f, repr(value)) for _, chosen in CASES for f, value in chosen.items()}
  missing = [(f, v) for f, vs in FACTORS.items() for v in vs if (f, repr(v)) not in held]
  assert not missing
  refused = {s for s, fields in REFUSED.values() if not fields}  # the scheme itself
  assert {s for s, _ in CASES} | refused == set(positions.SCHEMES)
  quick = [c for c in CASES if _case_id(*c) in QUICK]
  held = {(f, repr(value)) for _, chosen in quick for f, value in chosen.items()}
  assert all((f, repr(v)) in held for f, vs in FACTORS.items() for v in vs if v)
  assert all(len(chosen) == len(FACTORS) for _, chosen in CASES)  # a valid value each


def _indices(case) -> tuple:
  return tuple(FACTORS[f].index(v) for f, v in case[1].items())


def _options_of(indices: tuple) -> set:
  return {(f, i) for f, i in enumerate(indices) if i}  # value 0: the option off


# The quick subset (not `slow`): a few cases that hold every option value of every factor
# (tests/pairwise.py's greedy cover); the other schemes' cases run with the slow tests.
QUICK = {
  _case_id(*c)
  for c in CASES
  if _indices(c) in pairwise.greedy_cover([_indices(c) for c in CASES], _options_of)
}
PARAMS = [
  pytest.param(
    s, _fields_of(c), id=_case_id(s, c), marks=() if _case_id(s, c) in QUICK else pytest.mark.slow
  )
  for s, c in CASES
] + [pytest.param(s, fields, id=f"refused-{name}") for name, (s, fields) in REFUSED.items()]


@pytest.mark.parametrize("scheme, fields", PARAMS)
def test_a_train_batch_in_the_kernel_equals_xla(scheme, fields):
  """Loss and every parameter gradient of one train batch (one compiled program per impl),
  or, for an option the kernel does not run, one error naming model.attention.impl and auto
  on XLA on a GPU."""
  config = _config(scheme, {"model.num_layers": 1, **fields})
  if (scheme, fields) in REFUSED.values():
    config.model.attention.impl = "pallas"
    with pytest.raises(ValueError, match=r"^model.attention.impl='pallas' is not allowed; "):
      config_lib.check_fields(config)
    config.model.attention.impl = "auto"
    config_lib.check_fields(config)
    assert impl.resolve_impl(config.model, "gpu") == "xla"
    return
  config_lib.check_fields(config)
  _assert_pallas_equals_xla(config)


def _cuda_train_hlo(config, monkeypatch) -> str:
  """The train loss's gradient at the lowering test's length (T = 384: three 128-blocks, not
  a power of two), lowered for CUDA with auto seeing a GPU (pallas where auto keeps xla for a
  measurement, `Scheme.gpu_auto_xla`), one row, one layer unless set."""
  from tests.model.kernels.test_triton_lowering import T as LONG, _lowered_for_cuda

  monkeypatch.setattr(flash.jax, "default_backend", lambda: "gpu")  # what impl=auto consults
  config.data.seq_len, config.model.max_len, config.model.vocab_size = LONG, LONG, VOCAB
  if positions.spec(config.model.position.name).cls.gpu_auto_xla:  # measured slower there:
    assert impl.resolve_impl(config.model) == "xla"  # auto keeps xla, pallas still runs it
    config.model.attention.impl = "pallas"
  assert impl.resolve_impl(config.model) == "pallas"
  graphdef, params = nnx.split(model.Decoder(config.model, rngs=nnx.Rngs(0)), nnx.Param)
  zeros_BxL = jnp.zeros((1, LONG), jnp.int32)
  batch = {"inputs": zeros_BxL, "targets": zeros_BxL, "segment_ids": zeros_BxL + 1}
  batch |= {"positions": jnp.arange(LONG)[None], "loss_mask": jnp.ones((1, LONG))}
  sample = train.position_sampler(config)

  def loss(params):
    pos_BxL, distances_L = sample(batch, 0)
    return train.loss_fn(nnx.merge(graphdef, params), batch, pos_BxL, distances_L)

  return _lowered_for_cuda(jax.grad(loss), params)


@pytest.mark.parametrize("scheme, fields", [p for p in PARAMS if "refused" not in p.id])
def test_the_train_batch_lowers_for_cuda_under_auto(scheme, fields, monkeypatch):
  """On a GPU auto runs the kernel with every option of the case: it lowers to Triton, or
  the scheme's blocker keeps auto on XLA there (pallas: an error naming the field)."""
  sampled = {f: 4096 for f in ("train.random_positions", "train.pose_target") if f in fields}
  config = _config(scheme, {"model.num_layers": 1, **fields, **sampled})
  if impl.unsupported(config.model, "gpu"):
    assert impl.resolve_impl(config.model, "gpu") == "xla"
    config.model.attention.impl = "pallas"
    with pytest.raises(ValueError, match=r"^model.attention.impl='pallas' .*on a GPU"):
      impl.check_impl(config.model, "gpu")
    return
  assert _cuda_train_hlo(config, monkeypatch).count("__gpu$xla.gpu.triton") >= 3


@pytest.mark.parametrize(
  "scheme", sorted(s for s in positions.SCHEMES if positions.spec(s).cls.bias_of_distance)
)
def test_random_distances_lower_for_cuda_under_auto(scheme, monkeypatch):
  """On a GPU auto runs the kernel, and randomized distances reach it: the wrapper's bias
  lowers to Triton (no gather: the table read by compares; distances repeated up to a power of
  two), at a row length that is not one. It failed on the gather, then on the length."""
  config = tiny_config(scheme, random_positions=4096)
  config.model.num_layers, config.model.num_kv_heads = 1, 1
  assert train.position_sampler(config)(_batch(), 0)[1] is not None  # distances sampled
  assert _cuda_train_hlo(config, monkeypatch).count("__gpu$xla.gpu.triton") >= 3


@pytest.mark.parametrize("scheme", ["rope", "alibi", "kerple_log", "t5", "sandwich"])
def test_six_heads_and_a_sink_lower_for_cuda_under_auto(scheme, monkeypatch):
  """6 query heads over 3 kv heads: each program reads its own head's sink, slopes or
  parameters (one entry, not H: the whole sink vector of 6 failed to lower)."""
  fields = {"model.num_heads": 6, "model.num_kv_heads": 3, "model.d_model": 96}
  fields |= {"model.head_dim": 16, "model.num_layers": 1, "model.attention.sink": "learned"}
  config = _config(scheme, fields)
  config_lib.check_fields(config)
  assert _cuda_train_hlo(config, monkeypatch).count("__gpu$xla.gpu.triton") >= 3
