"""Train loop: a golden first step, loss going down on real data, NaN stops the run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lcx import sharding, train
from tests.helpers import read_metrics, tiny_config

# The tiny RoPE model from seed 0 on the fixed batch below: loss and grad norm of the first
# step, and the loss of the second (after one AdamW update). A change here means the model,
# its init or the optimizer changed: update the numbers only on purpose.
GOLDEN = {"loss": 6.1531758, "grad_norm": 1.0552787, "loss_after_update": 5.8805232}


def _fixed_batch(b=8, t=32):
  tokens = (np.arange(b * (t + 1)).reshape(b, t + 1) * 7919 % 256).astype(np.int32)
  return {"inputs": tokens[:, :-1], "targets": tokens[:, 1:],
          "segment_ids": np.ones((b, t), np.int32),
          "positions": np.broadcast_to(np.arange(t, dtype=np.int32), (b, t)).copy(),
          "loss_mask": np.ones((b, t), np.float32)}


def _two_steps(config):
  config.model.vocab_size = 259
  mesh = sharding.make_mesh(config.mesh)
  trainer = train.Trainer(config, mesh)
  state = trainer.init_state()
  batch = sharding.global_batch(_fixed_batch(), mesh, trainer.rules)
  params, opt_state, first = trainer.step(state["params"], state["opt_state"], batch,
                                          jnp.int32(0))
  _, _, second = trainer.step(params, opt_state, batch, jnp.int32(1))
  return jax.device_get(first), jax.device_get(second)


def test_golden_one_step():
  first, second = _two_steps(tiny_config("rope", warmup_steps=0, lr=1e-3))
  assert float(first["lr"]) == pytest.approx(1e-3)
  assert float(first["loss"]) == pytest.approx(GOLDEN["loss"], rel=1e-5)
  assert float(first["grad_norm"]) == pytest.approx(GOLDEN["grad_norm"], rel=1e-4)
  assert float(second["loss"]) == pytest.approx(GOLDEN["loss_after_update"], rel=1e-5)


def test_learning_rate_schedule_warms_up_and_decays():
  cfg = tiny_config(steps=100, warmup_steps=10, lr=1e-3, min_lr=1e-4).train
  lr = train.learning_rate(cfg)
  assert float(lr(0)) == 0.0
  assert float(lr(10)) == pytest.approx(1e-3)
  assert float(lr(55)) == pytest.approx((1e-3 + 1e-4) / 2, rel=1e-3)
  assert float(lr(100)) == pytest.approx(1e-4, rel=1e-4)


def test_weight_decay_spares_vectors():
  cfg = tiny_config(lr=1e-2, warmup_steps=0, weight_decay=0.5, clip_norm=0.0).train
  tx = train.optimizer(cfg)
  params = {"w": jnp.ones((2, 2)), "scale": jnp.ones((2,))}
  zeros = jax.tree.map(jnp.zeros_like, params)
  updates, _ = tx.update(zeros, tx.init(params), params)
  assert float(updates["scale"][0]) == 0.0  # no gradient, no decay
  assert float(updates["w"][0, 0]) < 0.0  # decayed toward zero


def test_loss_goes_down_on_real_data(tmp_path):
  config = tiny_config("rope", steps=300, warmup_steps=20, log_every=10,
                       checkpoint_every=1000, lr=3e-3)
  train.train(config, str(tmp_path))
  metrics = read_metrics(tmp_path)
  first, last = metrics[10]["loss"], metrics[300]["loss"]
  assert last < first - 1.5, (first, last)
  assert last < 3.5  # bytes of Python source: well below uniform (ln 259 = 5.56)
  for key in ("loss", "perplexity", "grad_norm", "lr", "tokens_per_sec", "step_time"):
    assert key in metrics[300]
  assert any((tmp_path / "tensorboard").iterdir())


def test_nan_loss_stops_run_and_keeps_last_good_checkpoint(tmp_path):
  config = tiny_config("nope", steps=50, lr=1e30, warmup_steps=0, checkpoint_every=1,
                       clip_norm=0.0)
  with pytest.raises(train.NonFiniteLossError, match=r"non-finite .* at step (\d+)") as err:
    train.train(config, str(tmp_path))
  bad_step = int(err.value.args[0].split("at step ")[1].split(";")[0])
  saved = sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit())
  assert saved and max(saved) < bad_step


def _scheme_params(name):
  from flax import nnx
  from lcx.model import Decoder
  cfg = tiny_config(name).model
  cfg.vocab_size = 259
  model = Decoder(cfg, rngs=nnx.Rngs(0))
  return sum(x.size for x in jax.tree.leaves(nnx.state(model.position, nnx.Param)))


@pytest.mark.parametrize("name", sorted(train.positions.SCHEMES))
def test_every_scheme_trains_without_nan_and_learns(name, tmp_path):
  config = tiny_config(name, steps=40, warmup_steps=5, log_every=5, checkpoint_every=1000,
                       lr=3e-3)
  train.train(config, str(tmp_path))  # raises on any NaN/Inf
  metrics = read_metrics(tmp_path)
  assert metrics[40]["loss"] < metrics[5]["loss"] - 0.5
  learned = name in ("learned", "t5", "fire")
  assert (_scheme_params(name) > 0) == learned
