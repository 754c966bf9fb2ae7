"""The decoder: packed documents are independent, options build, params carry logical axes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.model import Decoder, gelu
from lcx.positions import remaps
from tests.helpers import schemes_with, tiny_config


def _model(pos="rope", **model):
  cfg = tiny_config(pos).model
  cfg.vocab_size = 259
  for k, v in model.items():
    cfg[k] = v
  return Decoder(cfg, rngs=nnx.Rngs(0))


def test_packed_document_equals_document_alone():
  """Doc 2 packed after doc 1 (positions restarting at 0) gives the logits it gets alone."""
  model = _model("rope")
  rng = np.random.default_rng(0)
  doc1, doc2 = rng.integers(0, 256, 11), rng.integers(0, 256, 9)
  tokens = jnp.asarray(np.concatenate([doc1, doc2])[None])
  pos = jnp.asarray(np.concatenate([np.arange(11), np.arange(9)])[None])
  seg = jnp.asarray(np.array([1] * 11 + [2] * 9)[None])
  packed = model(tokens, pos, seg)
  alone = model(jnp.asarray(doc2[None]), jnp.arange(9)[None], jnp.ones((1, 9), jnp.int32))
  np.testing.assert_allclose(packed[:, 11:], alone, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("options", [
    dict(mlp="swiglu"), dict(tie_embeddings=True), dict(num_kv_heads=1),
    dict(dtype="bfloat16")])
def test_model_options_give_finite_logits(options):
  model = _model("rope", **options)
  tokens = jnp.arange(16)[None] % 259
  logits = model(tokens, jnp.arange(16)[None], jnp.ones((1, 16), jnp.int32))
  assert logits.shape == (1, 16, 259) and logits.dtype == jnp.float32
  assert np.isfinite(np.asarray(logits)).all()


def test_every_param_has_logical_axes_matching_its_rank():
  params = nnx.state(_model("rope", mlp="swiglu"), nnx.Param)
  leaves = jax.tree.leaves(params, is_leaf=lambda x: isinstance(x, nnx.Variable))
  for v in leaves:
    axes = v.get_metadata().get("logical_axes")
    assert axes is not None and len(axes) == v.get_value().ndim, v


def test_untied_and_tied_parameter_counts():
  def count(m):
    return sum(x.size for x in jax.tree.leaves(nnx.state(m, nnx.Param)))
  assert count(_model("rope")) - count(_model("rope", tie_embeddings=True)) == 64 * 259


@pytest.mark.parametrize("pos", schemes_with("embed"))
def test_compress_remap_reaches_absolute_embeddings(pos):
  """Absolute schemes embed the remapped positions: compress changes logits past its start."""
  cfg = tiny_config(pos).model
  cfg.vocab_size = 259
  cfg.max_len = 64  # the learned table covers every position; compress starts at 16
  plain_model = Decoder(cfg, rngs=nnx.Rngs(0))
  cfg.remap = remaps.default_config("compress")
  cfg.remap.start, cfg.remap.alpha = 16, 0.25
  compressed = Decoder(cfg, rngs=nnx.Rngs(0))
  tokens = jnp.arange(40)[None] % 259
  args = (tokens, jnp.arange(40)[None], jnp.ones((1, 40), jnp.int32))
  a, b = plain_model(*args), compressed(*args)
  np.testing.assert_allclose(a[:, :17], b[:, :17], atol=1e-5)
  assert not np.allclose(a[:, 17:], b[:, 17:], atol=1e-3)


@pytest.mark.parametrize("remap", ["self_extend", "rerope"])
def test_relative_remap_on_absolute_scheme_names_the_fields(remap):
  cfg = tiny_config("sinusoidal").model
  cfg.vocab_size = 259
  cfg.remap = remaps.default_config(remap)
  with pytest.raises(ValueError, match=rf"model.remap.name='{remap}' remaps relative distances, "
                     r"but model.position.name='sinusoidal' embeds absolute positions; with it "
                     r"use model.remap.name in \['compress', 'none'\]"):
    Decoder(cfg, rngs=nnx.Rngs(0))


def test_gelu_matches_jax_with_its_gradient():
  x = jnp.linspace(-8, 8, 1001)
  np.testing.assert_allclose(gelu(x), jax.nn.gelu(x, approximate=True), atol=1e-6)
  def grad(f):
    return jax.vmap(jax.grad(f))(x)
  np.testing.assert_allclose(grad(gelu), grad(lambda v: jax.nn.gelu(v, approximate=True)),
                             atol=1e-5)
