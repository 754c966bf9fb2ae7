"""Stick-breaking attention: the weights are the stick-breaking closed form over the allowed
keys (nearest first, diagonal excluded), the chunked kernel equals the dense one with gradients,
and the config refuses what it cannot run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.config import defaults
from lcx.model import attention, kernels, patterns, positions
from lcx.model.decoder import Decoder
from lcx.model.positions import remaps
from lcx.run import sharding, train
from lcx.tools import analysis
from tests.helpers import compiled, read_metrics, set_fields, tiny_config

DIMS = positions.Dims(32, 4, 8, 16)


def _scheme(name, heads=4):
  dims = positions.Dims(32, heads, 8, 16)
  return positions.build(positions.default_config(name), dims, rngs=nnx.Rngs(0))


def _remap(name, **fields):
  cfg = remaps.default_config(name)
  cfg.update(fields)
  return remaps.build(cfg, DIMS)


def _inputs(b=2, t=24, h=4, g=2, e=8, seed=0):
  rng = np.random.default_rng(seed)
  q, k, v = (jnp.asarray(rng.normal(size=(b, t, n, e)), jnp.float32) for n in (h, g, g))
  return q, k, v


def _attend(kernel, q, k, v, pos, seg, *, scheme, remap, pattern=None, chunk_size=8, **options):
  """Stick-breaking through `kernels.get_kernel`, all token-major."""
  kern = kernels.get_kernel(kernel, chunk_size, "stick_breaking")

  def attend(q, k, v, pos, seg):
    plan = kern.prepare(pos, seg, scheme=scheme, remap=remap, pattern=pattern)
    out = kern.attend(q, k, jnp.swapaxes(v, 1, 2), plan, scheme=scheme, **options)
    return jnp.swapaxes(out, 1, 2)  # BxTxHxE

  return compiled(attend)(q, k, v, pos, seg)


def _closed_form(logits_HxTxT, allowed_TxT):
  """A plain loop: each query breaks a stick over its allowed keys, nearest first."""
  h, t, _ = logits_HxTxT.shape
  weights = np.zeros((h, t, t))
  for head in range(h):
    for i in range(t):
      left = 1.0
      for j in range(i - 1, -1, -1):
        if allowed_TxT[i, j]:
          beta = 1 / (1 + np.exp(-logits_HxTxT[head, i, j]))
          weights[head, i, j] = left * beta
          left *= 1 - beta
  return weights


@pytest.mark.parametrize("kernel", ["dense", "chunked"])
def test_weights_are_the_closed_form_and_sum_to_at_most_one(kernel):
  """v = one-hot of the key index, so the outputs are the weights. Two packed documents (4 and
  5 tokens) and a pattern that drops the key 2 back: a dropped key neither takes weight nor
  breaks the stick, and no query sees itself or the other document."""
  t, e = 9, 16
  q, k, _ = _inputs(b=1, t=t, h=2, g=1, e=e)
  v = jnp.broadcast_to(jnp.eye(t, e)[None, :, None, :], (1, t, 1, e))
  seg = jnp.asarray([[1] * 4 + [2] * 5])
  pos = jnp.asarray([list(range(4)) + list(range(5))])
  got = _attend(
    kernel,
    q,
    k,
    v,
    pos,
    seg,
    scheme=_scheme("nope", heads=2),
    remap=_remap("none"),
    pattern=lambda qi, ki: qi - ki != 2,
    chunk_size=4,
  )
  weights_HxTxT = np.moveaxis(np.asarray(got)[0, :, :, :t], 1, 0)
  logits = np.einsum("qhe,se->hqs", np.asarray(q[0]), np.asarray(k[0, :, 0])) / np.sqrt(e)
  doc = np.asarray(pos[0])
  same = np.asarray(seg[0])[:, None] == np.asarray(seg[0])[None, :]
  allowed = same & (doc[:, None] - doc[None, :] != 2)
  want = _closed_form(logits, allowed)
  np.testing.assert_allclose(weights_HxTxT, want, atol=1e-6)
  assert want[:, 6, 4].max() == 0 and want[:, 5, 3].max() == 0  # masked: pattern, document
  assert (weights_HxTxT[:, [0, 4]] == 0).all()  # each document's first token: no keys
  sums = weights_HxTxT.sum(-1)
  assert (sums <= 1).all() and (sums[:, [1, 2, 3, 5, 6, 7, 8]] > 0).all()


@pytest.mark.parametrize("kernel", ["dense", "chunked"])
def test_the_remainder_times_a_vector_per_head_joins_the_output(kernel):
  """The reference model's o_i + rem_i b_h, rem_i = 1 - sum_j A_ij (1 at a document's first
  token, which sees no key), with GQA (4 heads on 2 kv heads): values and gradients."""
  t, e = 11, 8
  q, k, v = _inputs(b=1, t=t, h=4, g=2, e=e)
  b_HxE = jnp.asarray(np.random.default_rng(3).normal(size=(4, e)), jnp.float32)
  seg = jnp.asarray([[1] * 5 + [2] * 6])
  pos = jnp.asarray([list(range(5)) + list(range(6))])

  def run(q, k, v, b_HxE):
    return _attend(
      kernel,
      q,
      k,
      v,
      pos,
      seg,
      scheme=_scheme("nope"),
      remap=_remap("none"),
      chunk_size=4,
      remainder_HxE=b_HxE,
    )

  got = np.asarray(run(q, k, v, b_HxE))[0]  # TxHxE
  kv_head = np.arange(4) // 2
  logits = np.einsum("qhe,she->hqs", np.asarray(q[0]), np.asarray(k[0])[:, kv_head]) / np.sqrt(e)
  same = np.asarray(seg[0])[:, None] == np.asarray(seg[0])[None, :]
  weights_HxTxT = _closed_form(logits, same)
  rem_HxT = 1 - weights_HxTxT.sum(-1)
  want = np.einsum("hqs,she->qhe", weights_HxTxT, np.asarray(v[0])[:, kv_head])
  want = want + rem_HxT.T[:, :, None] * np.asarray(b_HxE)[None]
  np.testing.assert_allclose(got, want, atol=1e-5)
  np.testing.assert_allclose(rem_HxT[:, [0, 5]], 1.0)  # first tokens: all remainder
  cotangent = jnp.asarray(np.random.default_rng(4).normal(size=(1, t, 4, e)), jnp.float32)
  grad_b = jax.grad(lambda b: (run(q, k, v, b) * cotangent).sum())(b_HxE)
  want_grad = np.einsum("hq,qhe->he", rem_HxT, np.asarray(cotangent[0]))
  np.testing.assert_allclose(grad_b, want_grad, atol=1e-5)


def test_the_model_holds_the_remainder_vector_by_default():
  """model.attention.remainder_bias: True (the reference) gives each layer a zero H x E
  vector; False, none (the stick's remainder then goes to no value)."""
  config = tiny_config("nope")
  config.model.vocab_size, config.model.attention.kind = 64, "stick_breaking"
  assert config.model.attention.remainder_bias is True
  attn = Decoder(config.model, rngs=nnx.Rngs(0)).blocks[0].attn
  assert attn.remainder_HxE[...].shape == (config.model.num_heads, config.model.head_dim)
  assert not np.asarray(attn.remainder_HxE[...]).any()
  config.model.attention.remainder_bias = False
  assert Decoder(config.model, rngs=nnx.Rngs(0)).blocks[0].attn.remainder_HxE is None
  config.model.attention.kind = "softmax"  # softmax has no stick: no vector
  config.model.attention.remainder_bias = True
  assert Decoder(config.model, rngs=nnx.Rngs(0)).blocks[0].attn.remainder_HxE is None


def _strided():
  cfg = patterns.default_config("strided")
  cfg.update(window=3, stride=4)
  return patterns.build(cfg)


def _loss(kernel, pattern, scheme, remap, chunk_size, cotangent):
  def loss(q, k, v, pos, seg):
    out = _attend(
      kernel, q, k, v, pos, seg, scheme=scheme, remap=remap, pattern=pattern, chunk_size=chunk_size
    )
    return (out * cotangent).sum(), out

  return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))


@pytest.mark.parametrize(
  "name,remap,pattern,chunk_size",
  [
    ("alibi", "none", None, 8),  # a bias scheme; 8 divides T = 24
    ("rope", "rerope", None, 7),  # a rotary scheme with two branches; 7 does not divide 24
    ("rope", "none", "strided", 5),  # a sparse pattern (window 3, stride 4)
  ],
)
def test_chunked_equals_dense_with_gradients(name, remap, pattern, chunk_size):
  q, k, v = _inputs()
  seg = jnp.asarray([[1] * 10 + [2] * 14, [1] * 24])  # two packed documents in row 0
  pos = jnp.asarray([list(range(10)) + list(range(14)), list(range(24))])
  cotangent = jnp.asarray(np.random.default_rng(1).normal(size=(2, 24, 4, 8)), jnp.float32)
  scheme, remap = _scheme(name), _remap(remap, **({"window": 6} if remap == "rerope" else {}))
  pattern = _strided() if pattern == "strided" else None
  (_, dense), dense_grads = _loss("dense", pattern, scheme, remap, 8, cotangent)(q, k, v, pos, seg)
  (_, chunked), chunked_grads = _loss("chunked", pattern, scheme, remap, chunk_size, cotangent)(
    q, k, v, pos, seg
  )
  np.testing.assert_allclose(chunked, dense, atol=2e-5, rtol=2e-5)
  for c, d in zip(chunked_grads, dense_grads):
    np.testing.assert_allclose(c, d, atol=5e-5, rtol=5e-5)
  assert np.abs(np.asarray(dense_grads[1])).max() > 1e-3  # keys get gradients


def test_it_is_not_softmax_and_a_sink_is_refused():
  q, k, v = _inputs()
  pos, seg = jnp.broadcast_to(jnp.arange(24), (2, 24)), jnp.ones((2, 24), jnp.int32)
  kw = dict(scheme=_scheme("rope"), remap=_remap("none"))
  softmax = attention.dense(q, k, v, pos, seg, **kw)
  assert np.abs(_attend("dense", q, k, v, pos, seg, **kw) - softmax).max() > 1e-2
  kern = kernels.get_kernel("dense", 8, "stick_breaking")
  plan = kern.prepare(pos, seg, pattern=None, **kw)
  with pytest.raises(ValueError, match="stick-breaking attention has no sink"):
    kern.attend(q, k, jnp.swapaxes(v, 1, 2), plan, scheme=kw["scheme"], sink_H=jnp.zeros(4))


def test_unknown_kind_at_the_kernel_names_the_field():
  with pytest.raises(ValueError, match=r"model.attention.kind='sb' is not allowed; allowed: "):
    kernels.get_kernel("dense", 8, "sb")


def test_a_learned_sink_with_stick_breaking_is_one_error_naming_both_fields():
  config = tiny_config("rope")
  set_fields(config, {"model.attention.kind": "stick_breaking", "model.attention.sink": "learned"})
  with pytest.raises(
    ValueError,
    match=r"^model.attention.sink='learned' is not allowed with "
    r"model.attention.kind='stick_breaking'.*; allowed: 'none'$",
  ):
    sharding.validate(config)
  set_fields(config, {"model.attention.sink": "none"})
  sharding.validate(config)


def test_a_contextual_scheme_with_stick_breaking_is_refused():
  """CoPE's positions come from softmax logits, which the stick-breaking kernels never make."""
  config = tiny_config("cope")
  set_fields(config, {"model.attention.kind": "stick_breaking"})
  with pytest.raises(ValueError, match=r"^model.position.name='cope' is not allowed with "):
    sharding.validate(config)


def test_analysis_maps_are_the_kernels_weights():
  """An SB model's attention maps are its stick-breaking weights (no diagonal, rows summing to
  <= 1), the same on all rows at once and on chosen rows."""
  config = defaults.get_config("pos=rope,size=tiny")
  config.model.vocab_size, config.model.num_layers = 64, 1
  del config.model["max_len"]
  config.model.max_len, config.model.attention.kind = 16, "stick_breaking"
  model = analysis.Model(config, Decoder(config.model, rngs=nnx.Rngs(0)))
  tokens = np.random.default_rng(0).integers(0, 64, (1, 20))
  maps = analysis.attention_maps(model, tokens)
  diag = np.eye(20, dtype=bool)
  assert (maps.probs[..., diag] == 0).all() and (maps.probs[..., 0, :] == 0).all()
  sums = maps.probs.sum(-1)[..., 1:]
  assert (sums > 0).all() and (sums <= 1 + 1e-6).all()
  part = analysis.attention_maps(model, tokens, rows=[3, 19])
  np.testing.assert_allclose(part.probs, maps.probs[..., [3, 19], :], atol=1e-6)
  # the maps' weights times v are what the layer attends: check against the kernel, layer 0
  values = analysis.qk(model, tokens)
  q, k = jnp.asarray(values.q[0]), jnp.asarray(values.k[0])
  v = jnp.asarray(np.random.default_rng(2).normal(size=k.shape), jnp.float32)
  pos, seg = jnp.arange(20)[None], jnp.ones((1, 20), jnp.int32)
  decoder = model.decoder
  out = _attend("dense", q, k, v, pos, seg, scheme=decoder.position, remap=decoder.remap)
  want = np.einsum("bgqs,bsge->bqge", maps.probs[0], np.asarray(v))  # 4 heads, 4 kv heads
  np.testing.assert_allclose(out, want, atol=1e-5)


@pytest.mark.slow
def test_a_nope_model_learns_the_copy_task(tmp_path):
  """The paper's setting, no position encoding: stick-breaking's recency alone lets a tiny
  model learn to copy (sizes 1-4; ~25 s on a CPU)."""
  config = tiny_config(
    "nope", steps=150, warmup_steps=20, lr=3e-3, checkpoint_every=10000, log_every=25
  )
  config.data.update(name="task", task="copy", task_min_len=1, task_max_len=4, batch_size=16)
  config.model.attention.kind = "stick_breaking"
  train.train(config, str(tmp_path))  # raises on any NaN/Inf
  metrics = read_metrics(tmp_path)
  assert metrics[150]["loss"] < 0.6 < 3 < metrics[25]["loss"], metrics
