"""Sinusoidal values, and the learned table's policy past its length (error or clamp)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.model import positions
from lcx.model.positions import absolute, scaling

DIMS = positions.Dims(d_model=8, num_heads=2, head_dim=4, max_len=16)


def build(name, **fields):
  cfg = positions.default_config(name)
  cfg.update(fields)
  return positions.build(cfg, DIMS, rngs=nnx.Rngs(0))


def test_sinusoidal_matches_vaswani():
  pos = jnp.array([[0, 1, 5, 300]])
  out = build("sinusoidal").embed(jnp.zeros((1, 4, 8)), pos)
  for j, p in enumerate([0, 1, 5, 300]):
    for i in range(4):
      assert out[0, j, 2 * i] == pytest.approx(math.sin(p / 10000 ** (2 * i / 8)), abs=1e-4)
      assert out[0, j, 2 * i + 1] == pytest.approx(math.cos(p / 10000 ** (2 * i / 8)), abs=1e-4)


def test_sinusoidal_uses_ropes_float64_frequencies():
  """theta = scaling.theta in float64, then float32: a float32 power can be an ulp off, which
  moves the angle at p = 1e5 by ~6e-3 rad."""
  pos = np.array([[3, 1000, 99_999]])
  theta32 = scaling.theta(64, 10000.0).astype(np.float32)
  angle = (pos.astype(np.float32)[..., None] * theta32).astype(np.float64)
  want = np.stack([np.sin(angle), np.cos(angle)], axis=-1).reshape(1, 3, 64)
  np.testing.assert_allclose(absolute.sinusoidal(jnp.asarray(pos), 64), want, atol=1e-4)


def test_learned_adds_the_row_of_each_position():
  scheme = build("learned")
  pos = jnp.array([[0, 3, 15], [2, 2, 0]])
  out = scheme.embed(jnp.ones((2, 3, 8)), pos)
  np.testing.assert_allclose(out, 1 + scheme.table[...][pos])


def test_learned_clamp_reuses_the_last_row():
  scheme = build("learned", max_len_policy="clamp")
  out = scheme.embed(jnp.zeros((1, 3, 8)), jnp.array([[15, 16, 400]]))
  for j in range(3):
    np.testing.assert_array_equal(out[0, j], scheme.table[...][15])
  cfg = positions.default_config("learned")
  cfg.max_len_policy = "clamp"
  positions.check_eval_length(cfg, DIMS, 400)


def test_learned_error_policy():
  scheme = build("learned")
  x, too_far = jnp.zeros((1, 2, 8)), jnp.array([[3, 16]])
  with pytest.raises(
    ValueError,
    match="model.position.max_len_policy='error': the learned table "
    r"has 16 positions .* but 17 are needed",
  ):
    scheme.embed(x, too_far)
  traced = jax.jit(lambda x, p: scheme.embed(x, p))(x, too_far)  # cannot raise: NaN, not a wrap
  assert np.all(np.isfinite(traced[0, 0])) and np.all(np.isnan(traced[0, 1]))


def test_check_eval_length():
  cfg = positions.default_config("learned")
  positions.check_eval_length(cfg, DIMS, 16)
  with pytest.raises(ValueError) as error:
    positions.check_eval_length(cfg, DIMS, 64)
  assert (
    "model.position.max_len_policy='error': the learned table has 16 positions "
    "(model.position.num_positions, None: model.max_len) but 64 are needed; evaluate at "
    "<= 16 tokens or choose a policy from ['clamp', 'error']"
  ) == str(error.value)
  cfg.num_positions = 64
  positions.check_eval_length(cfg, DIMS, 64)
  for name in ("sinusoidal", "rope", "alibi", "nope"):
    positions.check_eval_length(positions.default_config(name), DIMS, 10**6)


def test_learned_config_errors():
  cfg = positions.default_config("learned")
  cfg.max_len_policy = "wrap"
  with pytest.raises(
    ValueError,
    match=r"^model.position.max_len_policy='wrap' is not "
    r"allowed; allowed: clamp, error$",
  ):
    positions.validate(cfg, DIMS)
  with pytest.raises(
    ValueError,
    match=r"^model.d_model=7 is not allowed; allowed: even "
    r"numbers for model.position.name='sinusoidal'$",
  ):
    positions.validate(positions.default_config("sinusoidal"), positions.Dims(7, 1, 4, 16))
