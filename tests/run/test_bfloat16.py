"""bfloat16 as a first-class run (issue 26, item 4): the matmuls run in bfloat16, but the logits,
every softmax statistic and the loss stay float32, and a short bf16 run learns like fp32."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from lcx.model.decoder import Decoder
from lcx.run import prepare, sharding, train
from tests.helpers import batch_of, equations, tiny_config

# The reductions and transcendental ops of a softmax or a cross entropy: run in bfloat16, their
# statistics (row max, sum of exponentials, log-sum-exp) lose the precision a long row needs.
_STATISTICS = {"exp", "log", "reduce_max", "reduce_sum", "log1p", "exp2"}


@pytest.mark.parametrize("kernel", ["dense", "chunked"])
def test_bfloat16_keeps_logits_softmax_statistics_and_loss_in_float32(kernel):
  cfg = tiny_config("rope")
  cfg.model.update(vocab_size=259, dtype="bfloat16")
  cfg.model.attention.chunk_size = 8
  model = Decoder(cfg.model, rngs=nnx.Rngs(0))
  graphdef, params = nnx.split(model)
  batch = {
    "inputs": jnp.arange(32)[None] % 259,
    "targets": (jnp.arange(32)[None] + 1) % 259,
    "segment_ids": jnp.ones((1, 32), jnp.int32),
    "loss_mask": jnp.ones((1, 32), jnp.float32),
  }
  pos = jnp.arange(32)[None]

  def loss(p):
    logits_BxLxV = nnx.merge(graphdef, p)(batch["inputs"], pos, batch["segment_ids"], kernel=kernel)
    return optax.softmax_cross_entropy_with_integer_labels(logits_BxLxV, batch["targets"]).mean()

  assert model(batch["inputs"], pos, batch["segment_ids"], kernel=kernel).dtype == jnp.float32
  assert train.loss_fn(model, batch, pos).dtype == jnp.float32
  # Training runs the dense kernel (forward and backward); long evaluation the chunked one.
  traced = jax.value_and_grad(loss) if kernel == "dense" else loss
  found = [
    (eqn.primitive.name, [getattr(v.aval, "dtype", None) for v in eqn.invars])
    for eqn in equations(jax.make_jaxpr(traced)(params).jaxpr)
  ]
  # The bfloat16 matmuls are there (the run is really bf16) ...
  assert any(n == "dot_general" and jnp.bfloat16 in dts for n, dts in found)
  # ... and not one softmax/cross-entropy statistic is computed in bfloat16.
  bf16_stats = [(n, dts) for n, dts in found if n in _STATISTICS and jnp.bfloat16 in dts]
  assert not bf16_stats, bf16_stats


def _batches(steps, b=8, t=32, seed=0):
  """Rows of a noisy repeating pattern (each row its own period and phase): learnable in a few
  dozen steps, so the curves fall and their differences are not all noise."""
  rng = np.random.default_rng(seed)
  for _ in range(steps):
    period = rng.integers(2, 9, (b, 1))
    tokens = (rng.integers(0, 200, (b, 1)) + np.arange(t + 1) % period) % 259
    tokens = np.where(rng.random(tokens.shape) < 0.1, rng.integers(0, 259, tokens.shape), tokens)
    yield batch_of(tokens)


def _curve(dtype, init_seed, steps=40):
  config = tiny_config("rope", warmup_steps=5, lr=3e-3, steps=steps)
  config.model.update(vocab_size=259, dtype=dtype)
  trainer = train.Trainer(prepare.prepare(config))
  params = nnx.state(Decoder(config.model, rngs=nnx.Rngs(init_seed)), nnx.Param)
  state = trainer.init_state(params)
  params, opt_state, losses = state["params"], state["opt_state"], []
  for step, batch in enumerate(_batches(steps)):
    batch = sharding.global_batch(batch, trainer.mesh, trainer.rules)
    params, opt_state, metrics = trainer.step(params, opt_state, batch, jnp.int32(step))
    losses.append(float(jax.device_get(metrics["loss"])))
  return np.array(losses)


def test_bfloat16_loss_curve_equals_float32_within_seed_noise():
  """The gap between a bf16 and an fp32 run from the same initialization is no larger than the
  gap between two fp32 runs from different ones (the run-to-run noise), over the whole curve."""
  fp32, fp32_other_init = _curve("float32", 0), _curve("float32", 1)
  bf16 = _curve("bfloat16", 0)
  noise, gap = np.abs(fp32 - fp32_other_init).mean(), np.abs(bf16 - fp32).mean()
  assert fp32[-5:].mean() < fp32[:5].mean() - 1.0, fp32  # the curves fall: the test has signal
  assert bf16[-5:].mean() < bf16[:5].mean() - 1.0, bf16
  assert gap <= noise, (gap, noise, bf16, fp32, fp32_other_init)
