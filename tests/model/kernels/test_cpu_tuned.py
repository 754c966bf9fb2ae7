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


def _model_loss(pos: str, impl: str):
  """A one-layer model's loss over its parameters, the parameters, and a random tangent."""
  cfg = tiny_config(pos).model
  cfg.num_layers, cfg.vocab_size, cfg.attention.sink = 1, 32, "learned"
  cfg.attention.impl = impl
  graphdef, params = nnx.split(model.Decoder(cfg, rngs=nnx.Rngs(0)), nnx.Param)
  tokens = jax.random.randint(KEY, (2, 12), 0, 32)
  pos_BxT = jnp.broadcast_to(jnp.arange(12), (2, 12))
  seg = jnp.ones((2, 12), jnp.int32)

  def loss(p):
    return jnp.mean(jax.nn.log_softmax(nnx.merge(graphdef, p)(tokens, pos_BxT, seg))[..., 0])

  keys = iter(jax.random.split(jax.random.key(2), len(jax.tree.leaves(params))))
  tangent = jax.tree.map(lambda x: jax.random.normal(next(keys), x.shape), params)
  return loss, params, tangent


def _jvp(f, params, tangent):  # jitted: eager, every op and its transposes would compile alone
  return jax.jit(lambda p, t: jax.jvp(f, (p,), (t,))[1])(params, tangent)


# rope: the default; cope: its tuned gates and reads; kerple: a bias with parameters (the kernel's
# inputs); path: its custom_vjp solve
@pytest.mark.parametrize(
  "pos, impl",  # the kernel runs neither CoPE nor PaTH (impl=pallas is refused for them)
  [(p, "auto") for p in ("rope", "cope", "kerple_log", "path")]
  + [(p, "pallas") for p in ("rope", "kerple_log", "fox")],
)
def test_jvp_and_hessian_go_through_the_whole_model_under_every_impl(pos, impl):
  """Forward mode needs no context: the seam runs the references where a jvp tangent flows
  (and the Pallas kernel's callers the XLA path), and its directional derivative equals reverse
  mode's, which keeps the tuned backward passes; forward over reverse (a Hessian) equals the
  same taken with the references everywhere."""
  loss, params, tangent = _model_loss(pos, impl)
  grad = jax.jit(jax.grad(loss))(params)  # tuned backward passes (CPU default), or the kernel's
  want = sum(jnp.vdot(g, t) for g, t in zip(jax.tree.leaves(grad), jax.tree.leaves(tangent)))
  np.testing.assert_allclose(_jvp(loss, params, tangent), want, rtol=1e-4)
  hvp = _jvp(jax.grad(loss), params, tangent)  # forward over reverse
  scale = params["final_norm"]["scale"]

  def of_scale(s):
    return loss({**params, "final_norm": {**params["final_norm"], "scale": s}})

  hessian = jax.jit(jax.hessian(of_scale))(scale[...])
  with cpu_tuned.plain():  # read while tracing: the jitted functions trace inside it
    plain_hvp = _jvp(jax.grad(loss), params, tangent)
    plain_hessian = jax.jit(jax.hessian(of_scale))(scale[...])
  assert max(float(jnp.abs(h).max()) for h in jax.tree.leaves(hvp)) > 0
  for got, ref in zip(jax.tree.leaves(hvp), jax.tree.leaves(plain_hvp)):
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)
  assert hessian.shape == scale.shape * 2 and float(jnp.abs(hessian).max()) > 0
  np.testing.assert_allclose(hessian, plain_hessian, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(hessian, hessian.T, rtol=1e-4, atol=1e-6)


def test_tuned_functions_stay_in_reverse_mode_and_the_context_still_forces_them():
  """jax.grad keeps the hand-written backward passes; `plain(False)` forces them even under
  forward mode, where jax then refuses (what the seam routes around)."""
  x = jax.random.normal(KEY, (4, 16))

  def grad_jaxpr(f):
    return str(jax.make_jaxpr(jax.grad(lambda x: f(x).sum()))(x))

  assert grad_jaxpr(model.gelu) == grad_jaxpr(model.gelu.tuned)
  assert grad_jaxpr(model.gelu.tuned) != grad_jaxpr(model.gelu.reference)
  with cpu_tuned.plain(False), pytest.raises(TypeError, match="can't apply forward-mode"):
    jax.jvp(lambda x: model.gelu(x).sum(), (x,), (x,))
  seen = []
  jax.jvp(lambda x: (seen.append(cpu_tuned.forward_mode(x)), x)[1], (x,), (x,))
  jax.grad(lambda x: (seen.append(cpu_tuned.forward_mode(x)), x.sum())[1])(x)
  jax.hessian(lambda x: (seen.append(cpu_tuned.forward_mode(x)), x.sum())[1])(x[0])
  assert seen == [True, False, True]
