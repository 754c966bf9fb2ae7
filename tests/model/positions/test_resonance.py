"""Resonance RoPE (2403.00071): wavelengths rounded to integers, after any rope type's scaling."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.model import positions
from lcx.model.decoder import Decoder
from lcx.model.positions import scaling
from tests.helpers import tiny_config

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}


def _paper(inv_freq_R):
  """The paper's rule, written out pair by pair: lambda_i = 2 pi / theta_i, rounded,
  theta_i~ = 2 pi / round(lambda_i)."""
  out = []
  for f in inv_freq_R:
    out.append(2 * math.pi / round(2 * math.pi / float(f)))
  return np.array(out)


@pytest.mark.parametrize("d, base", [(16, 10000.0), (64, 500000.0), (8, 100.0)])
def test_resonance_rope_rounds_every_wavelength_of_plain_rope(d, base):
  got, factor = positions.rope_frequencies(d, base, {"resonance": True})
  theta_R = np.array([base ** (-2 * i / d) for i in range(d // 2)])
  np.testing.assert_allclose(got, _paper(theta_R), rtol=1e-12)
  assert factor == 1.0
  wavelength_R = 2 * math.pi / got
  np.testing.assert_allclose(wavelength_R, np.round(wavelength_R), rtol=0, atol=1e-6)
  assert not np.allclose(got, theta_R)  # it moved something


@pytest.mark.parametrize("rope_type", ["yarn", "linear", "llama3", "ntk"])
def test_resonance_rounds_after_the_scaling_and_keeps_its_attention_factor(rope_type):
  """Resonance YaRN (and any other): the scaled frequencies, then rounded."""
  sc = {**YARN, "rope_type": rope_type}
  if rope_type in ("linear", "ntk"):
    del sc["original_max_position_embeddings"]
  scaled, factor = positions.rope_frequencies(32, 10000.0, sc)
  got, got_factor = positions.rope_frequencies(32, 10000.0, {**sc, "resonance": True})
  np.testing.assert_allclose(got, _paper(scaled), rtol=1e-12)
  assert got_factor == factor


def test_integer_wavelengths_repeat_exactly_at_integer_positions():
  """Why: a pair's angles at p and p + lambda_i are equal mod 2 pi, so a pair whose wavelength
  fits in L shows beyond L only the angles seen in training (plain RoPE does not)."""
  sc = scaling.resolve({"resonance": True}, 16)
  angle, _ = scaling.rope_angles(jnp.arange(2000.0)[None], 16, 10000.0, sc, None)
  inv_freq_R, _ = positions.rope_frequencies(16, 10000.0, {"resonance": True})
  cos_LxR = np.cos(np.asarray(angle, np.float64)[0])
  for i, lam in enumerate(np.round(2 * math.pi / inv_freq_R).astype(int)):
    if lam < 500:
      np.testing.assert_allclose(cos_LxR[lam : lam + 500, i], cos_LxR[:500, i], atol=2e-3)


def test_per_token_lengths_round_as_the_static_path():
  sc = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 16}
  resolved = scaling.resolve({**sc, "resonance": True}, 8)
  for length in (8, 40):
    want, _ = positions.rope_frequencies(8, 10000.0, {**sc, "resonance": True}, seq_len=length)
    got, _ = scaling.token_frequencies(8, 10000.0, resolved, jnp.full((1, 1), float(length)))
    np.testing.assert_allclose(np.asarray(got)[0, 0], want, rtol=2e-6)


@pytest.mark.parametrize("value", ["yes", 1, "true"])
def test_resonance_must_be_a_bool(value):
  with pytest.raises(ValueError, match=r"^scaling.resonance=.* is not allowed; allowed: True or"):
    positions.rope_frequencies(8, 10000.0, {"resonance": value})


def test_resonance_yarn_model_chunked_equals_dense_and_differs_from_yarn():
  cfg = tiny_config("rope").model
  cfg.vocab_size = 259
  cfg.position.scaling.update({**YARN, "original_max_position_embeddings": 16, "resonance": True})
  model = Decoder(cfg, rngs=nnx.Rngs(0))
  model.chunk_size = 8
  tokens = jnp.arange(40)[None] * 7 % 259, jnp.arange(40)[None], jnp.ones((1, 40), jnp.int32)
  dense = model(*tokens)
  np.testing.assert_allclose(model(*tokens, kernel="chunked"), dense, atol=2e-4, rtol=2e-4)
  cfg.position.scaling.resonance = False
  plain = Decoder(cfg, rngs=nnx.Rngs(0))
  assert np.abs(np.asarray(plain(*tokens)) - np.asarray(dense)).max() > 1e-4
