"""Gated attention (2505.06708): values and gradients against a plain causal attention written
here from the paper, the gate's shapes, and the option's errors."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.config import checks as lcx_config
from lcx.model import gating, kernels
from lcx.model.decoder import Decoder
from tests.helpers import compiled, tiny_config


def _model(gate, pos="nope", **fields):
  config = tiny_config(pos)
  config.model.vocab_size = 259
  config.model.attention.gate = gate
  config.model.attention.chunk_size = 8
  for k, v in fields.items():
    config.model[k] = v
  return Decoder(config.model, rngs=nnx.Rngs(0))


def _reference(p, x_BxLxD, gate):
  """NoPE causal attention, then Y * sigmoid(X W_g) per head (elementwise: per feature too),
  then the output projection: eq. (G1) of the paper, with W_g in the model's layout."""
  q = jnp.einsum("bld,dhk->bhlk", x_BxLxD, p["wq"])
  k = jnp.einsum("bld,dhk->bhlk", x_BxLxD, p["wk"])
  v = jnp.einsum("bld,dhk->bhlk", x_BxLxD, p["wv"])
  t = x_BxLxD.shape[1]
  s = jnp.einsum("bhqe,bhke->bhqk", q, k) / np.sqrt(q.shape[-1])
  s = jnp.where(np.tril(np.ones((t, t), bool)), s, -jnp.inf)
  y = jnp.einsum("bhqk,bhke->bhqe", jax.nn.softmax(s, axis=-1), v)
  if gate == "elementwise":
    y = y * jax.nn.sigmoid(jnp.einsum("bld,dhk->bhlk", x_BxLxD, p["wg"]))
  elif gate == "headwise":
    y = y * jax.nn.sigmoid(jnp.einsum("bld,dh->bhl", x_BxLxD, p["wg"]))[..., None]
  return jnp.einsum("bhlk,hkd->bld", y, p["wo"])


def _lcx(model, p, x_BxLxD, kernel_name):
  """Block 0's attention with the parameters `p` (a pure dict), as the decoder runs it."""
  attn = model.blocks[0].attn
  graphdef, state = nnx.split(attn)
  nnx.replace_by_pure_dict(state, p)
  kernel = kernels.get_kernel(kernel_name, model.chunk_size)
  t = x_BxLxD.shape[1]
  pos, seg = jnp.arange(t)[None], jnp.ones((1, t), jnp.int32)
  plans = model.plans(functools.partial(kernel.prepare, pos, seg))
  return nnx.merge(graphdef, state)(
    x_BxLxD, kernel=kernel, q_pos_BxL=pos, **model.layer_inputs(0, plans)
  )


@pytest.mark.parametrize(
  "gate, kernel",
  [("elementwise", "dense"), ("headwise", "dense"), ("none", "dense"), ("elementwise", "chunked")],
)
def test_values_and_gradients_equal_the_papers_gated_attention(gate, kernel):
  """Gradients on the dense kernel (training's); the chunked one (evaluation's) in value."""
  model = _model(gate)
  p = nnx.to_pure_dict(nnx.state(model.blocks[0].attn))
  assert ("wg" in p) == (gate != "none")
  if gate != "none":
    assert p["wg"].shape == ((64, 4, 16) if gate == "elementwise" else (64, 4))
  x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 21, 64)), jnp.float32)
  w = jnp.asarray(np.random.default_rng(1).normal(size=(2, 21, 64)), jnp.float32)
  np.testing.assert_allclose(
    jax.jit(lambda p, x: _lcx(model, p, x, kernel))(p, x),
    _reference(p, x, gate),
    atol=2e-5,
    rtol=2e-5,
  )
  if kernel == "chunked":
    return

  def loss(fn):
    return lambda p, x: jnp.sum(fn(p, x) * w)

  got = jax.jit(jax.grad(loss(lambda p, x: _lcx(model, p, x, kernel)), argnums=(0, 1)))(p, x)
  want = jax.jit(jax.grad(loss(lambda p, x: _reference(p, x, gate)), argnums=(0, 1)))(p, x)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-4)


def test_gate_changes_the_model_and_a_closed_gate_silences_the_heads():
  """W_g = 0: every gate 1/2, so the attention half of each block's residual update halves;
  a very negative gate bias (large -x.W_g) drives it to ~0. Checked through one block."""
  model = _model("elementwise", "rope")
  x = jnp.asarray(np.random.default_rng(0).normal(size=(1, 12, 64)), jnp.float32)
  out = gating.apply("elementwise", jnp.ones((1, 4, 12, 16)), x, jnp.zeros((64, 4, 16)))
  np.testing.assert_allclose(out, 0.5)
  tokens = jnp.arange(20)[None] * 7 % 259, jnp.arange(20)[None], jnp.ones((1, 20), jnp.int32)
  plain = _model("none", "rope")
  dense = compiled(model)(*tokens)
  assert np.abs(np.asarray(dense) - np.asarray(compiled(plain)(*tokens))).max() > 1e-3
  chunked = compiled(model)(*tokens, kernel="chunked")
  np.testing.assert_allclose(chunked, dense, atol=2e-4, rtol=2e-4)


def test_bad_gate_names_the_field_and_the_choices():
  config = tiny_config("rope")
  config.model.attention.gate = "per_head"
  with pytest.raises(
    ValueError,
    match=r"^model.attention.gate='per_head' is not allowed; allowed: one of "
    r"\('none', 'elementwise', 'headwise'\)$",
  ):
    lcx_config.check_fields(config)


@pytest.mark.slow
def test_gated_llama4_model_trains_evaluates_and_generates(tmp_path):
  """Elementwise gates, a NoPE block tempered as Llama 4: train, restore, score at 4 L with
  both kernels (the same loss), generate greedily."""
  from lcx.data import pipeline
  from lcx.run import prepare, train
  from lcx.tools import generate
  from lcx.tools.evaluate import lengths, runner as runner_lib, samples

  config = tiny_config("rope", steps=10, checkpoint_every=1000)
  config.model.attention.gate = "elementwise"
  config.model.attention.temperature = "llama4"
  config.model.nope_every = 2
  train.train(config, str(tmp_path))
  prepared = prepare.prepare(config)
  step, _ = prepare.checkpoint_meta(str(tmp_path))
  params = prepare.restore_params(prepared, str(tmp_path), step)
  assert step == 10 and "wg" in params["blocks"][0]["attn"]
  runner = runner_lib.Runner(prepared, params)
  seqs = samples.select(
    pipeline.validation_documents(runner.config.data),
    config.eval.documents,
    128,
    config.eval.num_tokens,
    config.eval.sample_seed,
  )
  dense = lengths.sweep(runner, seqs, [128], np.ones(259), 32)["lengths"]["128"]
  runner.config.eval.chunked_from = 64
  chunked = lengths.sweep(runner, seqs, [128], np.ones(259), 32)["lengths"]["128"]
  assert np.isfinite(dense["loss"]) and chunked["loss"] == pytest.approx(dense["loss"], rel=1e-5)
  out = generate.generate(prepared.graphdef, params, np.full((2, 6), 65), 5)
  assert np.asarray(out).shape == (2, 5)
