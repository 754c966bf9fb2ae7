"""The CPU-tuned backward passes behind `lcx.model.cpu_tuned`: each equals its plain-jnp reference
in value and gradient, and with the references forward-mode autodiff (jvp, Hessian-vector
products) goes through the whole model."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.model import attention, cpu_tuned, decoder as model
from lcx.model.positions import cope
from tests.helpers import tiny_config

TOL = dict(rtol=1e-5, atol=1e-6)
KEY = jax.random.key(0)
SINK_1xGxPx1x1 = jax.random.normal(KEY, (1, 2, 2, 1, 1))
_MASK = np.asarray(jax.random.bernoulli(jax.random.key(3), 0.7, (2, 2, 5, 7)))  # not differentiated
SEAMS = {  # name -> (the function behind the seam, its arguments)
  "softmax": (attention._softmax_vjp, (jax.random.normal(KEY, (2, 2, 2, 5, 7)), None)),
  "softmax_sink": (
    attention._softmax_vjp,
    (jax.random.normal(KEY, (2, 2, 2, 5, 7)), SINK_1xGxPx1x1),
  ),
  "rms_norm": (model.rms_norm, (jax.random.normal(KEY, (3, 4, 8)), jnp.linspace(0.5, 2, 8), 1e-6)),
  "gelu": (model.gelu, (3 * jax.random.normal(KEY, (4, 16)),)),
  "cope_gates": (cope._gates, (jax.random.normal(KEY, (2, 2, 5, 7)), _MASK)),
  "cope_interpolate": (
    cope._interpolate,
    (9, jax.random.normal(KEY, (2, 3, 5, 9)), jax.random.uniform(KEY, (2, 3, 5, 6), maxval=9.0)),
  ),
}


@pytest.mark.parametrize("name", SEAMS)
def test_tuned_equals_its_reference_in_value_and_gradient(name):
  fn, args = SEAMS[name]
  diff = [i for i, a in enumerate(args) if isinstance(a, jax.Array)]
  weights = jax.random.normal(jax.random.key(1), fn.reference(*args).shape)

  def call(impl, *xs):
    full = list(args)
    for i, x in zip(diff, xs):
      full[i] = x
    return impl(*full)

  def loss(impl, *xs):
    return jnp.sum(call(impl, *xs) * weights)

  xs = [args[i] for i in diff]
  tuned, reference = (functools.partial(call, f) for f in (fn.tuned, fn.reference))
  np.testing.assert_allclose(jax.jit(tuned)(*xs), jax.jit(reference)(*xs), **TOL)
  argnums = tuple(range(len(xs)))
  want = jax.jit(jax.grad(functools.partial(loss, fn.reference), argnums))(*xs)
  got = jax.jit(jax.grad(functools.partial(loss, fn.tuned), argnums))(*xs)
  for w, g in zip(want, got):
    np.testing.assert_allclose(g, w, **TOL)


def test_the_seam_picks_tuned_on_cpu_and_plain_inside_the_context():
  assert jax.default_backend() == "cpu" and not cpu_tuned.uses_plain()
  with cpu_tuned.plain():
    assert cpu_tuned.uses_plain()
    with cpu_tuned.plain(False):
      assert not cpu_tuned.uses_plain()
  assert not cpu_tuned.uses_plain()


@pytest.mark.parametrize("pos", ["rope", "cope"])
def test_jvp_and_hessian_vector_products_go_through_the_whole_model(pos):
  """Forward mode with the references equals reverse mode with the tuned backward passes;
  without the context, jvp meets a custom_vjp (what the seam is for)."""
  cfg = tiny_config(pos).model
  cfg.num_layers, cfg.vocab_size, cfg.attention.sink = 1, 32, "learned"
  graphdef, params = nnx.split(model.Decoder(cfg, rngs=nnx.Rngs(0)), nnx.Param)
  tokens = jax.random.randint(KEY, (2, 12), 0, 32)
  pos = jnp.broadcast_to(jnp.arange(12), (2, 12))
  seg = jnp.ones((2, 12), jnp.int32)

  def loss(p):
    return jnp.mean(jax.nn.log_softmax(nnx.merge(graphdef, p)(tokens, pos, seg))[..., 0])

  tangent = jax.tree.map(lambda x: jax.random.normal(jax.random.key(2), x.shape), params)

  def jvp(f):  # jitted: eager, every op of the model and its transposes would compile alone
    return jax.jit(lambda p, t: jax.jvp(f, (p,), (t,))[1])(params, tangent)

  with pytest.raises(TypeError, match="can't apply forward-mode autodiff"):
    jvp(loss)
  grad = jax.jit(jax.grad(loss))(params)  # tuned backward passes (CPU default)
  with cpu_tuned.plain():  # read while tracing: the jitted functions trace inside it
    directional = jvp(loss)
    hvp = jvp(jax.grad(loss))  # forward over reverse
  want = sum(jnp.vdot(g, t) for g, t in zip(jax.tree.leaves(grad), jax.tree.leaves(tangent)))
  np.testing.assert_allclose(directional, want, rtol=1e-4)
  assert all(np.all(np.isfinite(h)) for h in jax.tree.leaves(hvp))
  assert max(float(jnp.abs(h).max()) for h in jax.tree.leaves(hvp)) > 0
