"""Randomized positions (Ruoss 2023): distinct increasing positions per packed document."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lcx import positions


def test_each_document_gets_distinct_increasing_positions():
  pos_BxL = jnp.array([[0, 1, 2, 3, 4, 0, 1, 2], [0, 1, 2, 3, 4, 5, 6, 7]])
  out = jax.jit(positions.randomized_positions, static_argnums=2)(jax.random.key(0), pos_BxL,
                                                                  1000)
  out = np.asarray(out)
  assert out.dtype == np.int32 and out.shape == (2, 8)
  assert out.min() >= 0 and out.max() < 1000
  for doc in (out[0, :5], out[0, 5:], out[1]):
    assert np.all(np.diff(doc) > 0)
  np.testing.assert_array_equal(out[0, 5:], out[0, :3])  # p-th sampled value of the row
  assert len(set(out[1])) == 8 and not np.array_equal(out[0, :5], out[1, :5])


def test_same_key_same_positions_new_key_new_ones():
  pos = jnp.tile(jnp.arange(16), (3, 1))
  a = positions.randomized_positions(jax.random.key(1), pos, 64)
  np.testing.assert_array_equal(a, positions.randomized_positions(jax.random.key(1), pos, 64))
  assert not np.array_equal(a, positions.randomized_positions(jax.random.key(2), pos, 64))


def test_max_position_equal_to_length_gives_plain_positions():
  pos = jnp.tile(jnp.arange(8), (2, 1))
  np.testing.assert_array_equal(positions.randomized_positions(jax.random.key(0), pos, 8), pos)


def test_too_few_positions_is_an_error():
  with pytest.raises(ValueError, match="train.random_positions=4 must be >= the row length 8"):
    positions.randomized_positions(jax.random.key(0), jnp.zeros((1, 8), jnp.int32), 4)
