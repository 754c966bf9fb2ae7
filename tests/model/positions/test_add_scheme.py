"""Adding a scheme (docs/extending.md "Add a scheme"), done as it says: the `learned_slope` record
in `fields.SCHEMES` and the class registered under its name are all it takes for the config, the
checks, both attention kernels and training to take it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.config import defaults
from lcx.model import positions
from lcx.model.decoder import Decoder
from lcx.model.positions import fields
from lcx.model.positions.base import Scheme, register
from tests.helpers import tiny_config, train_fixed_batch


class LearnedSlope(Scheme):
  """logits - s_h * (i - j) with s_h learned per head (docs/extending.md's example, verbatim)."""

  def __init__(self, *, dims, rngs, init):
    del rngs
    self.slope = nnx.Param(jnp.full((dims.num_heads,), init), logical_axes=("heads",))

  def bias(self, q_pos_BxQ, k_pos_BxK):
    distance_BxQxK = (q_pos_BxQ[:, :, None] - k_pos_BxK[:, None, :]).astype(jnp.float32)
    return -self.slope[...][None, :, None, None] * distance_BxQxK[:, None]


@pytest.fixture
def learned_slope(monkeypatch):
  monkeypatch.setitem(
    fields.SCHEMES,
    "learned_slope",
    fields.Section(
      "a learned distance penalty per head",
      (fields.Field("init", 0.1, "the slopes' initial value", lambda v: v > 0, "> 0"),),
    ),
  )
  positions.SCHEMES.load()  # the registered schemes first, as a lookup does
  register("learned_slope")(LearnedSlope)
  yield
  del positions.SCHEMES["learned_slope"]


def _config(**position):
  config = tiny_config("learned_slope", lr=3e-3, warmup_steps=0)
  config.model.vocab_size = 259
  config.model.position.update(position)
  return config


def test_the_record_gives_its_default_and_refuses_a_bad_value_by_name(learned_slope):
  assert defaults.get_config("pos=learned_slope,size=tiny").model.position.init == 0.1
  config = _config(init=0.0)
  with pytest.raises(ValueError, match=r"^model.position.init=0.0 is not allowed; allowed: > 0"):
    positions.validate(config.model.position, positions.Dims.of(config.model))


def test_its_bias_is_the_slope_times_the_distance(learned_slope):
  config = _config(init=0.5)
  scheme = positions.build(config.model.position, positions.Dims.of(config.model), rngs=nnx.Rngs(0))
  bias_BxHxQxK = scheme.bias(jnp.array([[0, 1, 2]]), jnp.array([[0, 1, 2]]))
  expected = -0.5 * np.array([[0, -1, -2], [1, 0, -1], [2, 1, 0]], np.float32)
  assert bias_BxHxQxK.shape == (1, config.model.num_heads, 3, 3)
  np.testing.assert_allclose(bias_BxHxQxK[0, 1], expected)


def test_the_chunked_kernel_equals_the_dense_one(learned_slope):
  model = Decoder(_config(init=0.3).model, rngs=nnx.Rngs(0))
  model.chunk_size = 8
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 256, (2, 21)))
  pos, seg = jnp.broadcast_to(jnp.arange(21), (2, 21)), jnp.ones((2, 21), jnp.int32)
  np.testing.assert_allclose(
    model(tokens, pos, seg, kernel="chunked"), model(tokens, pos, seg), atol=2e-4, rtol=2e-4
  )


def test_it_trains_and_its_slopes_learn(learned_slope):
  losses, params = train_fixed_batch(_config(), 4)
  assert np.isfinite(losses).all() and losses[-1] < losses[0], losses
  slope = np.asarray(jax.tree.leaves(params["position"])[0])
  assert slope.shape == (4,) and np.abs(slope - 0.1).max() > 1e-4
