"""The registry and the hook contract, for every scheme: config, build, shapes, float positions,
jit, and the errors for unknown schemes and fields."""

import importlib
import inspect
import pkgutil
import re

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.model import positions
from tests.helpers import schemes_with

DIMS = positions.Dims(d_model=16, num_heads=4, head_dim=8, max_len=32)
EMBED, ROTATE, BIAS = schemes_with("embed"), schemes_with("rotate"), schemes_with("bias")


def test_every_scheme_class_is_registered():
  """Every Scheme subclass in lcx.model.positions is reachable by name (none defined but
  forgotten)."""
  classes = set()
  for module in pkgutil.iter_modules(positions.__path__):
    found = importlib.import_module(f"lcx.model.positions.{module.name}")
    classes |= {
      c
      for _, c in inspect.getmembers(found, inspect.isclass)
      if issubclass(c, positions.Scheme) and c is not positions.Scheme
    }
  assert classes == {positions.spec(name).cls for name in positions.SCHEMES}


@pytest.mark.parametrize("name", sorted(positions.SCHEMES))
def test_hooks_follow_the_contract(name):
  """Only the scheme's own hook acts; shapes (GQA: 2 kv heads), dtypes; float positions; jit."""
  cfg = positions.default_config(name)
  assert cfg.name == name
  scheme = positions.build(cfg, DIMS, rngs=nnx.Rngs(0))
  x = jnp.ones((2, 6, 16))
  q, k = jnp.ones((2, 6, 4, 8)), jnp.ones((2, 6, 2, 8))
  pos = jnp.tile(jnp.arange(6, dtype=jnp.float32) * 1.5, (2, 1))  # fractional (remapped)

  def hooks(scheme, x, q, k, pos):
    return scheme.embed(x, pos), *scheme.rotate(q, k, pos, pos), scheme.bias(pos[:, :4], pos)

  embedded, q_out, k_out, bias = nnx.jit(hooks)(scheme, x, q, k, pos)
  assert (embedded.shape, q_out.shape, k_out.shape) == (x.shape, q.shape, k.shape)
  assert np.array_equal(embedded, x) != (name in EMBED)
  assert np.array_equal(q_out, q) != (name in ROTATE)
  if name in BIAS:
    assert bias.shape == (2, 4, 4, 6) and bias.dtype == jnp.float32
    assert np.all(np.isfinite(bias))
  else:
    assert bias is None
  assert all(np.all(np.isfinite(a)) for a in (embedded, q_out, k_out))
  if scheme.from_input is not None:  # a per-token, per-head float32 quantity from x
    seg = jnp.ones((2, 6), jnp.int32)
    a = nnx.jit(lambda s, x: s.for_layer(0).from_input(x, pos, seg))(scheme, x)
    assert a.shape == (2, 6, 4) and a.dtype == jnp.float32 and np.all(np.isfinite(a))
  assert (scheme.from_input is not None) == positions.base.reads_input(name)


def test_unknown_scheme_and_fields_are_named():
  with pytest.raises(
    ValueError,
    match=r"^model.position.name='rotary' is not allowed; "
    r"allowed: " + re.escape(", ".join(sorted(positions.SCHEMES))) + "$",
  ):
    positions.default_config("rotary")
  cfg = positions.default_config("alibi")
  cfg.base = 10.0
  with pytest.raises(
    ValueError, match=r"^model.position.base is not a known field; allowed: \(none\)$"
  ):
    positions.validate(cfg, DIMS)
  cfg = positions.default_config("rope")
  cfg.scaling.factr = 2.0
  with pytest.raises(ValueError, match="model.position.scaling.factr is not a known field"):
    positions.build(cfg, DIMS, rngs=nnx.Rngs(0))


def test_default_configs_are_independent():
  """Each call makes fresh fields: setting one config never changes another."""
  a, b = positions.default_config("rope"), positions.default_config("rope")
  a.scaling.factor = 2.0
  assert b.scaling.factor is None
