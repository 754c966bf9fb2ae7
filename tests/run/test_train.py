"""Train loop: a golden first step, loss going down on real data, NaN stops the run, SIGTERM
during setup."""

import os
import signal

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from lcx.config import checks as config_lib
from lcx.model.decoder import Decoder
from lcx.run import checkpoint, prepare, sharding, train
from tests.helpers import fixed_batch, read_metrics, set_fields, tiny_config, train_fixed_batch

# The tiny RoPE model from seed 0 on the fixed batch below: loss and grad norm of the first
# step, and the loss of the second (after one AdamW update). A change here means the model,
# its init or the optimizer changed: update the numbers only on purpose.
GOLDEN = {"loss": 6.1531758, "grad_norm": 1.0552787, "loss_after_update": 5.8805232}


@pytest.fixture(scope="module")
def rope_trainer():
  """(trainer, batch): the tiny RoPE model's train step (compiled once for this module) and
  the fixed batch; each test starts from `trainer.init_state()`."""
  config = tiny_config("rope", warmup_steps=0, lr=1e-3)
  config.model.vocab_size = 259
  trainer = train.Trainer(prepare.prepare(config))
  return trainer, sharding.global_batch(fixed_batch(), trainer.mesh, trainer.rules)


def test_golden_one_step(rope_trainer):
  trainer, batch = rope_trainer
  state = trainer.init_state()
  params, opt_state, first = trainer.step(state["params"], state["opt_state"], batch, jnp.int32(0))
  _, _, second = trainer.step(params, opt_state, batch, jnp.int32(1))
  first, second = jax.device_get(first), jax.device_get(second)
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


@pytest.mark.slow
def test_loss_goes_down_on_real_data(tmp_path):
  config = tiny_config(
    "rope", steps=300, warmup_steps=20, log_every=10, checkpoint_every=1000, lr=3e-3
  )
  train.train(config, str(tmp_path))
  metrics = read_metrics(tmp_path)
  first, last = metrics[10]["loss"], metrics[300]["loss"]
  assert last < first - 1.5, (first, last)
  assert last < 3.5  # bytes of Python source: well below uniform (ln 259 = 5.56)
  for key in ("loss", "perplexity", "grad_norm", "lr", "tokens_per_sec", "step_time"):
    assert key in metrics[300]
  assert any((tmp_path / "tensorboard").iterdir())


def _saved_steps(workdir):
  return sorted(int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit())


@pytest.mark.slow
def test_nan_loss_stops_run_and_keeps_last_good_checkpoint(tmp_path):
  # lr=1e10: step 1's parameters are huge but finite and saved; step 2's loss is NaN.
  config = tiny_config("nope", steps=50, lr=1e10, warmup_steps=0, checkpoint_every=1, clip_norm=0.0)
  with pytest.raises(train.NonFiniteLossError, match=r"non-finite .* at step (\d+)") as err:
    train.train(config, str(tmp_path))
  bad_step = int(err.value.args[0].split("at step ")[1].split(";")[0])
  saved = _saved_steps(tmp_path)
  assert saved and max(saved) < bad_step
  params, meta = checkpoint.restore_params(str(tmp_path))
  assert meta["step"] == max(saved)
  assert all(np.isfinite(x).all() for x in jax.tree.leaves(params))


@pytest.mark.slow
def test_non_finite_updated_params_are_never_saved(tmp_path):
  # lr=1e30: step 1's loss and gradients (of the initial parameters) are finite, but the
  # parameters it produces have an infinite norm; they must not become a checkpoint.
  config = tiny_config("nope", steps=5, lr=1e30, warmup_steps=0, checkpoint_every=1, clip_norm=0.0)
  with pytest.raises(
    train.NonFiniteLossError,
    match=r"^non-finite \{'param_norm': inf\} at step 1; stopping",
  ):
    train.train(config, str(tmp_path))
  assert _saved_steps(tmp_path) == []


def test_param_norm_is_the_norm_of_the_updated_parameters(rope_trainer):
  """param_norm guards what a checkpoint would save: the parameters after the update."""
  trainer, batch = rope_trainer
  state = trainer.init_state()
  before = float(optax.tree.norm(state["params"]))  # read now: the step donates the buffers
  params, _, metrics = trainer.step(state["params"], state["opt_state"], batch, jnp.int32(0))
  after = float(optax.tree.norm(params))
  assert float(metrics["param_norm"]) == pytest.approx(after, rel=1e-6)
  assert abs(after - before) > 1e-5 * after  # 10x the tolerance: the two are told apart


@pytest.mark.slow
def test_sigterm_during_setup_exits_cleanly(tmp_path, monkeypatch):
  build = train.data.make_train_iterator

  def build_then_sigterm(*args, **kwargs):  # the signal arrives while the dataset is built
    os.kill(os.getpid(), signal.SIGTERM)
    return build(*args, **kwargs)

  monkeypatch.setattr(train.data, "make_train_iterator", build_then_sigterm)
  before = signal.getsignal(signal.SIGTERM)
  outcome = train.train(tiny_config(steps=20), str(tmp_path))
  assert outcome.interrupted and outcome.metrics == {}
  assert _saved_steps(tmp_path) == [] and not (tmp_path / "metrics.jsonl").exists()
  assert signal.getsignal(signal.SIGTERM) is before


def _position_params(config) -> list[np.ndarray]:
  """The position scheme's initial parameters (the train loop's init: Rngs(config.seed))."""
  model = Decoder(config_lib.resolve(config, 259).model, rngs=nnx.Rngs(config.seed))
  return [
    np.asarray(x) for x in jax.tree.leaves(nnx.to_pure_dict(nnx.state(model.position, nnx.Param)))
  ]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(train.positions.SCHEMES))
def test_every_scheme_trains_without_nan_and_learns(name, tmp_path):
  """The loss falls, and a scheme's own parameters (a table, a bias MLP), if it has any, get
  gradients and move."""
  config = tiny_config(name, steps=40, warmup_steps=5, log_every=5, checkpoint_every=1000, lr=3e-3)
  train.train(config, str(tmp_path))  # raises on any NaN/Inf
  metrics = read_metrics(tmp_path)
  assert metrics[40]["loss"] < metrics[5]["loss"] - 0.5
  params, meta = checkpoint.restore_params(str(tmp_path))
  assert meta["step"] == 40
  initial, trained = _position_params(config), jax.tree.leaves(params.get("position", {}))
  assert [x.shape for x in trained] == [x.shape for x in initial]
  for before, after in zip(initial, trained):
    assert np.abs(after - before).max() > 1e-4


@pytest.mark.parametrize(
  "options",
  [
    {"model.nope_every": 2, "model.position_window": 8},
    {"model.attention.temperature": "log_n"},
    {"model.attention.temperature": "ssmax"},
    {"model.qk_norm": True},
    {"model.attention.sink": "learned"},
    {"model.attention.kind": "stick_breaking"},
    {"model.attention.gate": "elementwise"},
    {"model.attention.gate": "headwise", "model.nope_every": 2},
  ],
)
def test_attention_options_train_without_nan(options):
  """A few steps on the fixed batch: every loss finite and falling."""
  config = tiny_config("rope", warmup_steps=0, lr=3e-3)
  config.model.vocab_size = 259
  set_fields(config, options)
  losses, _ = train_fixed_batch(config, 6)
  assert np.isfinite(losses).all() and losses[-1] < losses[0] - 0.3, losses
