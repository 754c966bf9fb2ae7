"""Attention temperature: the factors' formulas, SSMax learns, dense == chunked, beta@C."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.config import defaults, variants
from lcx.model import positions, temperature
from lcx.model.decoder import Decoder
from tests.helpers import set_fields, tiny_config

L = 32  # the tiny config's training length


def test_log_n_is_one_up_to_the_training_length_then_ln_n_over_ln_l():
  pos_1xN = jnp.arange(4 * L)[None]
  got = np.asarray(temperature.query_factor("log_n", pos_1xN, None, train_len=L))[0, :, 0]
  n = np.arange(1, 4 * L + 1)
  np.testing.assert_array_equal(got[:L], 1.0)  # n = pos + 1 <= L
  np.testing.assert_allclose(got[L:], np.log(n[L:]) / math.log(L), rtol=1e-6)
  assert got[-1] == pytest.approx(math.log(128) / math.log(32))  # 1.4


def test_none_is_no_factor_and_ssmax_is_s_times_ln_n():
  pos_1xN = jnp.arange(10)[None]
  assert temperature.query_factor("none", pos_1xN, None, train_len=L) is None
  s_H = jnp.asarray([0.5, 2.0])
  got = np.asarray(temperature.query_factor("ssmax", pos_1xN, None, train_len=L, ssmax_H=s_H))
  np.testing.assert_allclose(got[0], np.log(np.arange(1, 11))[:, None] * [0.5, 2.0], rtol=1e-6)
  assert temperature.ssmax_init(L) * math.log(L) == pytest.approx(1.0)


def test_beta_is_one_up_to_the_training_length_then_one_plus_c_ln_t_over_l():
  len_1xN = jnp.asarray([[1, 16, 32, 64, 128]])
  got = np.asarray(
    temperature.query_factor("none", jnp.zeros((1, 5), jnp.int32), len_1xN, train_len=L, beta_c=0.4)
  )[0, :, 0]
  np.testing.assert_allclose(
    got, [1, 1, 1, 1 + 0.4 * math.log(2), 1 + 0.4 * math.log(4)], rtol=1e-6
  )
  both = temperature.query_factor(
    "log_n", jnp.asarray([[127]]), jnp.asarray([[128]]), train_len=L, beta_c=0.4
  )
  assert float(both[0, 0, 0]) == pytest.approx(1.4 * (1 + 0.4 * math.log(4)), rel=1e-6)


def _model(**options):
  config = tiny_config("rope")
  config.model.vocab_size = 259
  config.model.attention.chunk_size = 8
  set_fields(config, options)
  return Decoder(config.model, rngs=nnx.Rngs(0))


def _args(t):
  return jnp.arange(t)[None] * 7 % 259, jnp.arange(t)[None], jnp.ones((1, t), jnp.int32)


def _logits(model, t, kernel="dense"):
  """The forward pass over `_args(t)` as one compiled program (eager calls dispatch op by op)."""
  return jax.jit(lambda *a: model(*a, kernel=kernel))(*_args(t))


@pytest.mark.parametrize(
  "options, per_query",
  [({"model.attention.temperature": "log_n"}, True), ({"model.attention.beta_c": 0.5}, False)],
)
def test_length_temperatures_leave_the_training_length_alone(options, per_query):
  """Within L = 32 the logits are the plain model's; at T = 48 they are not past position 31
  (log_n reads each query's position: the first 32 are unchanged), or anywhere (beta reads
  the sequence's length T)."""
  plain, tempered = _model(), _model(**options)
  np.testing.assert_allclose(_logits(tempered, 32), _logits(plain, 32), atol=1e-6)
  a, b = _logits(tempered, 48), _logits(plain, 48)
  assert np.abs(a[:, 32:] - b[:, 32:]).max() > 1e-3
  assert np.allclose(a[:, 1:32], b[:, 1:32], atol=1e-6) == per_query


@pytest.mark.parametrize(
  "options",
  [
    {"model.attention.temperature": "log_n"},
    {"model.attention.temperature": "ssmax"},
    {"model.attention.beta_c": 0.5},
  ],
)
def test_temperature_chunked_equals_dense(options):
  model = _model(**options)
  np.testing.assert_allclose(
    _logits(model, 45, "chunked"), _logits(model, 45), atol=2e-4, rtol=2e-4
  )


def test_ssmax_s_gets_a_gradient_in_every_layer():
  model = _model(**{"model.attention.temperature": "ssmax"})
  tokens, pos, seg = _args(20)

  def loss(m):
    logits = m(tokens, pos, seg)
    return -jnp.mean(jax.nn.log_softmax(logits)[0, :-1, :][jnp.arange(19), tokens[0, 1:]])

  grads = nnx.to_pure_dict(nnx.jit(nnx.grad(loss))(model))
  for block in grads["blocks"].values():
    g = np.asarray(block["attn"]["ssmax_H"])
    assert g.shape == (4,) and np.isfinite(g).all() and np.abs(g).min() > 0


def test_beta_variant_sets_the_eval_time_field():
  assert variants.overrides("beta@0.4", {}) == {"model.attention.beta_c": 0.4}
  config = variants.apply(defaults.get_config("pos=rope"), variants.overrides("beta@0.4", {}))
  assert config.model.attention.beta_c == 0.4
  with pytest.raises(ValueError, match=r"'beta@-1' needs C >= 0"):
    variants.overrides("beta@-1", {})
  with pytest.raises(ValueError, match=r"'beta@x' needs a number after '@'"):
    variants.overrides("beta@x", {})
  trained = defaults.get_config("pos=rope").to_dict()
  variants.check_trained(config.to_dict(), trained)  # eval-time: allowed
  config.model.attention.temperature = "ssmax"
  with pytest.raises(ValueError, match=r"model.attention.temperature='ssmax' differs"):
    variants.check_trained(config.to_dict(), trained)  # trained: refused


def _brute_keys(seg_T, pattern):
  """Per query: its allowed keys, by a loop over every (query, key) pair."""
  t = len(seg_T)
  first = [min(k for k in range(i + 1) if len(set(seg_T[k : i + 1])) == 1) for i in range(t)]
  doc = [i - first[i] for i in range(t)]
  return [
    sum(
      1
      for j in range(i + 1)
      if seg_T[j] == seg_T[i] and (pattern is None or pattern(doc[i], doc[j]))
    )
    for i in range(t)
  ]


@pytest.mark.parametrize(
  "name, fields",
  [
    ("dense", {}),
    ("sliding_window", {"window": 4}),
    ("streaming", {"sink": 2, "window": 3}),
    ("strided", {"window": 3, "stride": 4}),
    ("block_global", {"block": 4}),
  ],
)
def test_visible_keys_count_the_mask_in_both_kernels(name, fields):
  """Packed documents (7 and 13 tokens), positions randomized: n counts the allowed keys, by
  in-document index, never by position; the chunked plan (no mask) agrees with the dense one."""
  from lcx.model import attention, patterns, positions
  from lcx.model.positions import remaps

  cfg = patterns.default_config(name)
  cfg.update(fields)
  pattern = patterns.build(cfg)
  seg = jnp.asarray([[1] * 7 + [2] * 13])
  pos = positions.randomized_positions(
    jax.random.key(0), jnp.asarray([list(range(7)) + list(range(13))]), 500, seg
  )
  scheme = positions.Scheme()
  remap = remaps.build(remaps.default_config("none"), positions.Dims(8, 2, 4, 16))
  want = _brute_keys(list(np.asarray(seg[0])), pattern)
  for prepare in (attention.prepare_dense, attention.prepare_chunked):
    plan = prepare(pos, seg, scheme=scheme, remap=remap, pattern=pattern)
    np.testing.assert_array_equal(np.asarray(temperature.visible_keys(plan))[0], want)


def test_ssmax_n_is_the_keys_seen_not_the_position():
  """NoPE + SSMax, a window of 4 keys: the logits do not depend on the positions (randomized
  ones change nothing, n counts keys); ssmax_n=position (lcx before) reads them."""
  t = 24
  tokens, plain_pos, seg = _args(t)
  far_pos = plain_pos * 37 + 5  # increasing, far past L
  fields = {"model.position": positions.default_config("nope")}
  fields.update({"model.attention.temperature": "ssmax", "model.position_window": 4})
  model = _model(**fields)
  run = jax.jit(lambda pos: model(tokens, pos, seg))
  np.testing.assert_allclose(run(far_pos), run(plain_pos), atol=1e-5)
  a = model.blocks[0].attn
  plan_keys = np.minimum(np.arange(t) + 1, 4)  # the window: min(i + 1, 4) keys
  from lcx.model import attention

  plan = model.plans(lambda **kw: attention.prepare_dense(plain_pos, seg, **kw))[0]
  np.testing.assert_array_equal(np.asarray(temperature.visible_keys(plan))[0], plan_keys)
  assert a.ssmax_keys
  old = _model(**fields, **{"model.attention.ssmax_n": "position"})
  run_old = jax.jit(lambda pos: old(tokens, pos, seg))
  assert np.abs(np.asarray(run_old(far_pos)) - np.asarray(run_old(plain_pos))).max() > 1e-3


def test_log_n_run_with_rerope_applies_log_n_once():
  """A log_n run evaluated with rerope@W (log_n_scaling on, its default): the query factor is
  applied once, so the logits equal those of the same weights with no temperature and ReRoPE's
  own log-n; at i = 63 with L = 8 the factor is ln 64 / ln 8 = 2, not its square 4."""
  from lcx.model.positions import remaps

  def model(temp):
    config = tiny_config("rope")
    config.model.vocab_size, config.model.max_len, config.model.attention.temperature = 259, 8, temp
    config.model.remap = remaps.default_config("rerope")
    config.model.remap.window = 4
    return Decoder(config.model, rngs=nnx.Rngs(0))

  log_n, plain = model("log_n"), model("none")
  assert float(remaps.log_n_scale(jnp.asarray(63), 8)) == pytest.approx(2.0)
  np.testing.assert_allclose(_logits(log_n, 64), _logits(plain, 64), atol=1e-5, rtol=1e-5)
  pos = _args(64)[1]
  assert all(b.q_scale is None for b in log_n.remap.branches(pos, pos))  # the remap's: off
  assert all(b.q_scale is not None for b in plain.remap.branches(pos, pos))
