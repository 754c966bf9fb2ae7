"""Sparse attention patterns: the masks they allow, and their config errors."""

import jax.numpy as jnp
import numpy as np
import pytest

from lcx.model import patterns

N = 12


def mask(name, **fields):
  cfg = patterns.default_config(name)
  cfg.update(fields)
  allowed = patterns.build(cfg)
  idx = jnp.arange(N)
  return np.asarray(allowed(idx[:, None], idx[None, :])) & np.tril(np.ones((N, N), bool))


def expected(rule):
  return np.array([[j <= i and rule(i, j) for j in range(N)] for i in range(N)])


def test_dense_has_no_mask():
  assert patterns.build(patterns.default_config()) is None


def test_sliding_window():
  np.testing.assert_array_equal(mask("sliding_window", window=3), expected(lambda i, j: i - j < 3))


def test_block_global():
  got = mask("block_global", block=4)
  np.testing.assert_array_equal(got, expected(lambda i, j: i // 4 == j // 4 or j < 4))
  assert got[11].tolist() == [True] * 4 + [False] * 4 + [True] * 4


def test_strided():
  got = mask("strided", window=2, stride=4)
  np.testing.assert_array_equal(got, expected(lambda i, j: i - j < 2 or (i - j) % 4 == 0))
  assert np.flatnonzero(got[11]).tolist() == [3, 7, 10, 11]


def test_streaming_keeps_the_sinks_and_the_window():
  got = mask("streaming", sink=2, window=3)
  np.testing.assert_array_equal(got, expected(lambda i, j: j < 2 or i - j < 3))
  assert np.flatnonzero(got[11]).tolist() == [0, 1, 9, 10, 11]


def test_intersect_allows_what_every_pattern_allows():
  window = patterns.build(patterns.default_config("sliding_window"))
  block = patterns.build(patterns.default_config("block_global"))
  assert patterns.intersect(None, None) is None and patterns.intersect(window, None) is window
  idx = jnp.arange(300)
  both = patterns.intersect(window, block)(idx[:, None], idx[None, :])
  np.testing.assert_array_equal(
    both, window(idx[:, None], idx[None, :]) & block(idx[:, None], idx[None, :])
  )
  assert not bool(both[299, 100]) and bool(window(299, 200)) and not bool(both[299, 180])


@pytest.mark.parametrize(
  "name, fields, message",
  [
    (
      "bigbird",
      {},
      "model.attention.pattern.name='bigbird' is not allowed; allowed: "
      "block_global, dense, sliding_window, streaming, strided",
    ),
    (
      "sliding_window",
      {"window": 0},
      "model.attention.pattern.window=0 is not allowed; allowed: ints >= 1",
    ),
    (
      "strided",
      {"stride": -1},
      "model.attention.pattern.stride=-1 is not allowed; allowed: ints >= 1",
    ),
    (
      "dense",
      {"window": 4},
      "model.attention.pattern.window is not a known field; allowed: (none)",
    ),
  ],
)
def test_invalid_pattern_names_the_field(name, fields, message):
  cfg = patterns.default_config(name if name in patterns.PATTERNS else "dense")
  cfg.name = name
  for key, value in fields.items():
    cfg[key] = value
  with pytest.raises(ValueError) as error:
    patterns.validate(cfg)
  assert message in str(error.value)
