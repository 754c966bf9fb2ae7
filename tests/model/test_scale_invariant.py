"""Scale-invariant attention (Anson et al. 2025, arXiv 2505.17083): a_t and m_t against the
paper's general formula, attention against an independent implementation (values and
gradients), dense == chunked with a bias scheme and packed documents, and a model that trains,
evaluates and generates with it."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx import main
from lcx.model import attention, kernels, positions, temperature
from lcx.model.decoder import Decoder
from lcx.model.positions import remaps
from tests.helpers import compiled, tiny_config

TAU = 10.0
DIMS = positions.Dims(32, 4, 8, 16)
NO_REMAP = remaps.build(remaps.default_config("none"), DIMS)


def _paper(t, tau=TAU, alpha=math.exp(0.5), beta=math.exp(0.5)):
  """The paper's a_t and m_t with its alpha and beta, in float64."""
  a2 = 2 * (np.log(t / tau + 1) - np.log(alpha) + beta / alpha)
  return np.sqrt(a2), -a2 + beta / alpha


def test_scale_and_shift_are_the_papers():
  t = np.asarray([0, 1, 5, 10, 100, 1000, 65535], np.float64)
  a, m = (np.asarray(x) for x in temperature.scale_invariant(t, TAU))
  want_a, want_m = _paper(t)
  np.testing.assert_allclose(a, want_a, rtol=1e-6)
  np.testing.assert_allclose(m, want_m, rtol=1e-6, atol=1e-6)
  assert a[0] == 1.0 and m[0] == 0.0  # standard attention at distance 0
  a, m = temperature.scale_invariant(np.asarray([-3.0]), TAU)  # masked keys: finite, as t = 0
  assert float(a[0]) == 1.0 and float(m[0]) == 0.0


def _scheme(name="p_rope", heads=4):
  cfg = positions.default_config(name)
  return positions.build(cfg, positions.Dims(32, heads, 8, 16), rngs=nnx.Rngs(0))


def _inputs(b=2, t=20, h=4, g=2, e=8, seed=0):
  rng = np.random.default_rng(seed)
  return tuple(jnp.asarray(rng.normal(size=(b, t, n, e)), jnp.float32) for n in (h, g, g))


def _reference(q, k, v, pos, seg, scheme):
  """softmax(a_t q.k/sqrt(E) + m_t) v over causal same-document keys, written out; q and k
  rotated by the scheme (p-RoPE), GQA by repeating k and v."""
  qr, kr = scheme.rotate(q, k, pos, pos)
  p = q.shape[2] // k.shape[2]
  kr, v = jnp.repeat(kr, p, axis=2), jnp.repeat(v, p, axis=2)
  z = jnp.einsum("bqhe,bshe->bhqs", qr, kr) / math.sqrt(q.shape[-1])
  t = (pos[:, :, None] - pos[:, None, :]).astype(jnp.float32)
  log_term = jnp.log(jnp.maximum(t, 0) / TAU + 1)
  a2 = 2 * (log_term - 0.5 + 1.0)
  logits = jnp.sqrt(a2)[:, None] * z + (-a2 + 1.0)[:, None]
  n = pos.shape[1]
  allowed = jnp.tril(jnp.ones((n, n), bool))[None] & (seg[:, :, None] == seg[:, None, :])
  logits = jnp.where(allowed[:, None], logits, -jnp.inf)
  return jnp.einsum("bhqs,bshe->bqhe", jax.nn.softmax(logits, -1), v)


def _kernel(kernel, q, k, v, pos, seg, scheme, chunk_size=6):
  fn = attention.dense if kernel == "dense" else attention.chunked
  extra = {} if kernel == "dense" else {"chunk_size": chunk_size}
  wrapped = temperature.ScaleInvariant(scheme, TAU)
  return compiled(fn)(q, k, v, pos, seg, scheme=wrapped, remap=NO_REMAP, **extra)


def _packed():
  seg = jnp.asarray([[1] * 8 + [2] * 12, [1] * 20])
  pos = jnp.asarray([list(range(8)) + list(range(12)), list(range(20))])
  return pos, seg


@pytest.mark.parametrize("kernel", ["dense", "chunked"])
def test_attention_equals_an_independent_implementation_with_gradients(kernel):
  q, k, v = _inputs()
  pos, seg = _packed()
  scheme = _scheme()
  cot = jnp.asarray(np.random.default_rng(1).normal(size=q.shape), jnp.float32)

  def loss(fn):
    return jax.jit(jax.value_and_grad(lambda q, k, v: (fn(q, k, v) * cot).sum(), argnums=(0, 1, 2)))

  want, want_grads = loss(lambda q, k, v: _reference(q, k, v, pos, seg, scheme))(q, k, v)
  if kernel == "chunked":  # the softmax chunked kernel is forward-only (long evaluation)
    got = _kernel(kernel, q, k, v, pos, seg, scheme)
    np.testing.assert_allclose((got * cot).sum(), want, rtol=2e-5)
  else:
    got, got_grads = loss(lambda q, k, v: _kernel(kernel, q, k, v, pos, seg, scheme))(q, k, v)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    for g, w in zip(got_grads, want_grads):
      np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
  plain = compiled(attention.dense)(q, k, v, pos, seg, scheme=scheme, remap=NO_REMAP)
  out = _kernel(kernel, q, k, v, pos, seg, scheme)
  assert np.abs(np.asarray(out - plain)).max() > 1e-2  # it changes attention


@pytest.mark.parametrize("name", ["p_rope", "alibi"])
def test_chunked_equals_dense(name):
  """With a bias scheme (ALiBi: its bias added after the scaling) and uneven chunks."""
  q, k, v = _inputs(t=20)
  pos, seg = _packed()
  scheme = _scheme(name)
  dense = _kernel("dense", q, k, v, pos, seg, scheme)
  chunked = _kernel("chunked", q, k, v, pos, seg, scheme, chunk_size=7)
  np.testing.assert_allclose(chunked, dense, rtol=2e-5, atol=2e-6)


def test_stick_breaking_chunked_equals_dense_with_gradients():
  """The (scale, shift) pair reaches stick-breaking's kernels too, whose chunked form is
  differentiable: values and gradients agree."""
  q, k, v = _inputs(t=20)
  pos, seg = _packed()
  scheme = temperature.ScaleInvariant(_scheme("alibi"), TAU)

  def run(kernel, chunk_size):
    kern = kernels.get_kernel(kernel, chunk_size, "stick_breaking")

    def loss(q, k, v):
      plan = kern.prepare(pos, seg, scheme=scheme, remap=NO_REMAP)
      return (kern.attend(q, k, jnp.swapaxes(v, 1, 2), plan, scheme=scheme) ** 2).sum()

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))(q, k, v)

  (dense, dense_grads), (chunked, chunked_grads) = run("dense", 8), run("chunked", 7)
  np.testing.assert_allclose(chunked, dense, rtol=2e-5)
  for c, d in zip(chunked_grads, dense_grads):
    np.testing.assert_allclose(c, d, rtol=1e-4, atol=1e-5)


def test_a_bias_is_added_after_the_scaling():
  """ALiBi inside scale-invariant attention: a_t z + m_t - slope t, the bias unscaled."""
  scheme = temperature.ScaleInvariant(_scheme("alibi"), TAU)
  pos = jnp.arange(6)[None]
  scale, shift = scheme.bias(pos, pos)
  t = np.maximum(np.arange(6)[:, None] - np.arange(6)[None, :], 0).astype(np.float64)
  want_a, want_m = _paper(t)
  slopes = positions.alibi_slopes(4)[:, None, None]
  alibi = -slopes * (np.arange(6)[:, None] - np.arange(6)[None, :])
  np.testing.assert_allclose(np.asarray(scale)[0, 0], want_a, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(shift)[0], want_m[None] + alibi, rtol=1e-5, atol=1e-5)


def test_the_config_refuses_a_bad_tau():
  from lcx.run import sharding

  config = tiny_config("p_rope")
  config.model.attention.update(temperature="scale_invariant", si_tau=0.0)
  with pytest.raises(ValueError, match=r"^model\.attention\.si_tau=0\.0 is not allowed"):
    sharding.validate(config)


@pytest.mark.slow
def test_a_model_trains_evaluates_and_generates(tmp_path):
  """p-RoPE with scale-invariant attention through train_and_eval (perplexity at every
  length, finite), and generation's cache == the forward pass."""
  from lcx.tools import generate

  config = tiny_config("p_rope", steps=3, checkpoint_every=3)
  config.model.attention.temperature = "scale_invariant"
  workdir = tmp_path / "run"
  main.run(config, str(workdir), "train_and_eval")
  text = (workdir / "eval" / "none.json").read_text()
  assert json.loads(text) and "NaN" not in text and "Infinity" not in text
  saved = json.loads((workdir / "config.json").read_text())
  assert saved["model"]["attention"]["temperature"] == "scale_invariant"
  cfg = config.model
  cfg.vocab_size = 259
  model = Decoder(cfg, rngs=nnx.Rngs(0))
  prompt = np.random.default_rng(0).integers(0, 259, (2, 5))
  graphdef, params = nnx.split(model, nnx.Param)
  tokens, logits = generate.generate(graphdef, params, prompt, 6, with_logits=True)
  seq = np.concatenate([prompt, tokens], axis=1)
  pos, seg = np.broadcast_to(np.arange(11), (2, 11)), np.ones((2, 11), np.int32)
  full = np.asarray(jax.jit(lambda *a: model(*a))(seq, pos, seg))
  np.testing.assert_allclose(logits, full[:, 4:10], atol=1e-4, rtol=1e-4)
