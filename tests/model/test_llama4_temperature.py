"""Llama 4's attention temperature, as shipped: NoPE blocks' queries times
1 + 0.1 ln(floor((i + 1) / 8192) + 1)."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.config import checks as lcx_config
from lcx.model import temperature
from lcx.model.decoder import Decoder
from tests.helpers import block_out, compiled, set_fields, tiny_config

START = 8170  # windows that cross 8191, where the factor first leaves 1


def _reference(i):
  """HF Llama4TextAttention: log1p(floor((cache_position + 1) / floor_scale)) * attn_scale + 1,
  floor_scale 8192 and attn_scale 0.1 as in Llama 4's config."""
  return math.log(math.floor((i + 1) / 8192) + 1) * 0.1 + 1


def test_factor_is_the_shipped_formula_on_nope_blocks_only():
  pos = [0, 100, 8190, 8191, 8192, 16382, 16383, 40959, 40960, 1_000_000]
  got = temperature.query_factor("llama4", jnp.asarray([pos]), None, train_len=32, nope=True)
  np.testing.assert_allclose(np.asarray(got)[0, :, 0], [_reference(i) for i in pos], rtol=1e-6)
  assert float(got[0, 3, 0]) == pytest.approx(1 + 0.1 * math.log(2))  # i = 8191: first step
  positioned = temperature.query_factor("llama4", jnp.asarray([pos]), None, train_len=32)
  assert positioned is None


def _model(pos="rope", **fields):
  config = tiny_config(pos)
  config.model.vocab_size = 259
  config.model.attention.chunk_size = 8
  set_fields(config, fields)
  return Decoder(config.model, rngs=nnx.Rngs(0))


def _args(t, start=START):
  return jnp.arange(t)[None] * 7 % 259, start + jnp.arange(t)[None], jnp.ones((1, t), jnp.int32)


def test_only_the_nope_every_blocks_are_tempered_and_only_from_position_8191():
  """nope_every=2 of 2 blocks: block 0 (RoPE) is the untempered model's, block 1 (NoPE) is not,
  from the query at 8191 on; and its output equals the plain NoPE block's with its query
  weights scaled by the reference factor (one factor for the whole window past 8191)."""
  tempered = _model(**{"model.nope_every": 2, "model.attention.temperature": "llama4"})
  plain = _model(**{"model.nope_every": 2})
  x = jnp.asarray(np.random.default_rng(0).normal(size=(1, 40, 64)), jnp.float32)
  pos = START + jnp.arange(40)[None]
  np.testing.assert_allclose(block_out(tempered, 0, x, pos), block_out(plain, 0, x, pos))
  a, b = np.asarray(block_out(tempered, 1, x, pos)), np.asarray(block_out(plain, 1, x, pos))
  first = 8191 - START
  np.testing.assert_allclose(a[:, :first], b[:, :first], atol=1e-6)
  assert np.abs(a[:, first:] - b[:, first:]).max() > 1e-4
  wq = plain.blocks[1].attn.wq
  wq[...] = wq[...] * _reference(8191)
  scaled = np.asarray(block_out(plain, 1, x, pos))
  np.testing.assert_allclose(a[:, first:], scaled[:, first:], atol=1e-5)


def test_every_block_of_the_nope_scheme_is_tempered():
  tempered = _model("nope", **{"model.attention.temperature": "llama4"})
  plain = _model("nope")
  for name, args in (("inside", _args(20, 0)), ("beyond", _args(40))):
    a, b = np.asarray(compiled(tempered)(*args)), np.asarray(compiled(plain)(*args))
    assert np.allclose(a, b, atol=1e-6) == (name == "inside")


@pytest.mark.parametrize("pos, every", [("rope", 2), ("nope", 0)])
def test_llama4_chunked_equals_dense(pos, every):
  model = _model(pos, **{"model.nope_every": every, "model.attention.temperature": "llama4"})
  np.testing.assert_allclose(
    model(*_args(45), kernel="chunked"), model(*_args(45)), atol=2e-4, rtol=2e-4
  )


def test_llama4_without_nope_blocks_is_refused():
  config = tiny_config("rope")
  config.model.attention.temperature = "llama4"
  with pytest.raises(ValueError, match=r"^model.attention.temperature='llama4' tempers the NoPE"):
    lcx_config.check_fields(config)
  config.model.nope_every = 2
  lcx_config.check_fields(config)
  config.model.attention.temperature = "llama_4"
  with pytest.raises(ValueError, match=r"temperature='llama_4' is not allowed; allowed: one of"):
    lcx_config.check_fields(config)
