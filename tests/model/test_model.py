"""The decoder: packed documents are independent, options build, params carry logical axes."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.model import attention, decoder, positions
from lcx.model.decoder import Decoder, gelu, rms_norm
from lcx.model.positions import remaps
from lcx.run import train
from lcx.tools.bench import residuals
from tests.helpers import batch_of, block_out, compiled, schemes_with, tiny_config


def _model(pos="rope", **model):
  cfg = tiny_config(pos).model
  cfg.vocab_size = 259
  for k, v in model.items():
    cfg[k] = v
  return Decoder(cfg, rngs=nnx.Rngs(0))


def test_packed_document_equals_document_alone():
  """Doc 2 packed after doc 1 (positions restarting at 0) gives the logits it gets alone."""
  model = _model("rope")
  rng = np.random.default_rng(0)
  doc1, doc2 = rng.integers(0, 256, 11), rng.integers(0, 256, 9)
  tokens = jnp.asarray(np.concatenate([doc1, doc2])[None])
  pos = jnp.asarray(np.concatenate([np.arange(11), np.arange(9)])[None])
  seg = jnp.asarray(np.array([1] * 11 + [2] * 9)[None])
  packed = compiled(model)(tokens, pos, seg)
  alone = compiled(model)(jnp.asarray(doc2[None]), jnp.arange(9)[None], jnp.ones((1, 9), jnp.int32))
  np.testing.assert_allclose(packed[:, 11:], alone, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
  "options",
  [dict(mlp="swiglu"), dict(tie_embeddings=True), dict(num_kv_heads=1), dict(dtype="bfloat16")],
)
def test_model_options_give_finite_logits(options):
  model = _model("rope", **options)
  tokens = jnp.arange(16)[None] % 259
  logits = compiled(model)(tokens, jnp.arange(16)[None], jnp.ones((1, 16), jnp.int32))
  assert logits.shape == (1, 16, 259) and logits.dtype == jnp.float32
  assert np.isfinite(np.asarray(logits)).all()


def test_every_param_has_logical_axes_matching_its_rank():
  params = nnx.state(_model("rope", mlp="swiglu"), nnx.Param)
  leaves = jax.tree.leaves(params, is_leaf=lambda x: isinstance(x, nnx.Variable))
  for v in leaves:
    axes = v.get_metadata().get("logical_axes")
    assert axes is not None and len(axes) == v.get_value().ndim, v


def test_untied_and_tied_parameter_counts():
  def count(m):
    return sum(x.size for x in jax.tree.leaves(nnx.state(m, nnx.Param)))

  assert count(_model("rope")) - count(_model("rope", tie_embeddings=True)) == 64 * 259


@pytest.mark.parametrize("pos", schemes_with("embed"))
def test_compress_remap_reaches_absolute_embeddings(pos):
  """Absolute schemes embed the remapped positions: compress changes logits past its start."""
  cfg = tiny_config(pos).model
  cfg.vocab_size = 259
  cfg.max_len = 64  # the learned table covers every position; compress starts at 16
  plain_model = Decoder(cfg, rngs=nnx.Rngs(0))
  cfg.remap = remaps.default_config("compress")
  cfg.remap.start, cfg.remap.alpha = 16, 0.25
  compressed = Decoder(cfg, rngs=nnx.Rngs(0))
  tokens = jnp.arange(40)[None] % 259
  args = (tokens, jnp.arange(40)[None], jnp.ones((1, 40), jnp.int32))
  a, b = compiled(plain_model)(*args), compiled(compressed)(*args)
  np.testing.assert_allclose(a[:, :17], b[:, :17], atol=1e-5)
  assert not np.allclose(a[:, 17:], b[:, 17:], atol=1e-3)


@pytest.mark.parametrize("remap", ["self_extend", "rerope"])
def test_relative_remap_on_absolute_scheme_names_the_fields(remap):
  cfg = tiny_config("sinusoidal").model
  cfg.vocab_size = 259
  cfg.remap = remaps.default_config(remap)
  with pytest.raises(
    ValueError,
    match=rf"model.remap.name='{remap}' remaps relative distances, "
    r"but model.position.name='sinusoidal' embeds absolute positions; with it "
    r"use model.remap.name in \['compress', 'none'\]",
  ):
    Decoder(cfg, rngs=nnx.Rngs(0))


def test_gelu_matches_jax_with_its_gradient():
  x = jnp.linspace(-8, 8, 1001)
  np.testing.assert_allclose(gelu(x), jax.nn.gelu(x, approximate=True), atol=1e-6)

  def grad(f):
    return jax.vmap(jax.grad(f))(x)

  np.testing.assert_allclose(
    grad(gelu), grad(lambda v: jax.nn.gelu(v, approximate=True)), atol=1e-5
  )


@pytest.mark.parametrize("shape", [(3, 5, 16), (2, 4, 3, 8)])
def test_rms_norm_and_its_gradients_equal_autodiff_of_the_formula(shape):
  """The hand-written backward (rows, a matvec for the scale) against autodiff, any rank."""
  kx, ks, kc = jax.random.split(jax.random.key(0), 3)
  x = 3 * jax.random.normal(kx, shape)
  scale = 1 + jax.random.normal(ks, shape[-1:])
  cotangent = jax.random.normal(kc, shape)

  def plain(x, scale):
    r = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6)
    return x * r * jnp.broadcast_to(scale, shape)

  np.testing.assert_allclose(rms_norm(x, scale, 1e-6), plain(x, scale), rtol=1e-6, atol=1e-6)
  ours = jax.grad(lambda x, s: jnp.sum(rms_norm(x, s, 1e-6) * cotangent), (0, 1))(x, scale)
  ref = jax.grad(lambda x, s: jnp.sum(plain(x, s) * cotangent), (0, 1))(x, scale)
  for a, b in zip(ours, ref):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def _x(t=12, seed=0):
  return jax.random.normal(jax.random.key(seed), (1, t, 64))


@pytest.mark.parametrize("pos, move", [("fire", lambda p: p + 100), ("rope", lambda p: 3 * p + 5)])
def test_nope_every_layer_ignores_positions_and_the_other_does_not(pos, move):
  """nope_every=2 of 2 blocks: block 1 has identity hooks (its output is the same at moved
  positions), block 0 keeps the scheme (FIRE reads the query's position past its threshold
  L = 32, RoPE the distances)."""
  model = _model(pos, nope_every=2)
  assert [model.has_positions(i) for i in range(2)] == [True, False]
  x, seg = _x(), jnp.ones((1, 12), jnp.int32)
  p = jnp.arange(12)[None]
  for layer, invariant in ((0, False), (1, True)):
    a, b = block_out(model, layer, x, p, seg), block_out(model, layer, x, move(p), seg)
    if invariant:
      np.testing.assert_allclose(a, b, atol=1e-5)
    else:
      assert np.abs(a - b).max() > 1e-3


def test_position_window_masks_far_keys_in_positioned_layers_only():
  """Window 4: queries 10 and 11 see keys 7.. and 8.. only in block 0 (positioned); block 1
  (NoPE) sees all. Changing tokens 0..6 changes block 0's rows from 10 on not at all."""
  model = _model("rope", nope_every=2, position_window=4)
  x, seg, p = _x(), jnp.ones((1, 12), jnp.int32), jnp.arange(12)[None]
  x2 = x.at[:, :7].add(1.0)
  a0, b0 = block_out(model, 0, x, p, seg), block_out(model, 0, x2, p, seg)
  np.testing.assert_allclose(a0[:, 10:], b0[:, 10:], atol=1e-6)
  assert np.abs(a0[:, 9] - b0[:, 9]).max() > 1e-3  # query 9 sees key 6
  a1, b1 = block_out(model, 1, x, p, seg), block_out(model, 1, x2, p, seg)
  assert np.abs(a1[:, 10:] - b1[:, 10:]).max() > 1e-3
  windowless = _model("rope", nope_every=2)  # the same weights without the window
  c0 = block_out(windowless, 0, x, p, seg)
  np.testing.assert_allclose(a0[:, :4], c0[:, :4], atol=1e-6)  # within 4 keys: unchanged
  assert np.abs(a0[:, 4:] - c0[:, 4:]).max() > 1e-3


@pytest.mark.parametrize("pos", ["rope", "alibi"])
def test_layer_schedule_chunked_equals_dense(pos):
  model = _model(pos, nope_every=2, position_window=5)
  model.chunk_size = 8
  np.testing.assert_allclose(
    compiled(model)(*_tokens(21), kernel="chunked"),
    compiled(model)(*_tokens(21)),
    atol=2e-4,
    rtol=2e-4,
  )


class _Recorder(positions.Scheme):
  """Identity hooks that keep the q and k each rotate call is given."""

  def __init__(self):
    self.seen = nnx.data([])

  def rotate(self, q_BxLxHxE, k_BxLxGxE, q_pos_BxL, k_pos_BxL, **lengths):
    self.seen.append((q_BxLxHxE, k_BxLxGxE))
    return q_BxLxHxE, k_BxLxGxE


@pytest.mark.parametrize("qk_norm", [True, False])
def test_qk_norm_gives_unit_rms_rows_at_the_position_hook(qk_norm):
  model = _model("rope", qk_norm=qk_norm)
  model.position = _Recorder()
  model(*_tokens(12))
  ((q, k),) = model.position.seen[:1]
  assert len(model.position.seen) == 2  # one per layer
  for x in (q, k):
    rms = np.sqrt(np.mean(np.square(np.asarray(x)), axis=-1))
    assert np.allclose(rms, 1.0, atol=1e-4) == qk_norm


def test_qk_norm_over_heads_gives_unit_rms_over_all_heads_not_per_head():
  """OLMo 2's and the DroPE reference's QK-norm: one RMS over heads x head_dim per token."""
  model = _model("rope", qk_norm=True, qk_norm_over="heads", num_kv_heads=2)
  assert model.blocks[0].attn.q_norm.scale[...].shape == (4, 16)
  assert model.blocks[0].attn.k_norm.scale[...].shape == (2, 16)
  model.position = _Recorder()
  model(*_tokens(12))
  for x in model.position.seen[0]:
    x = np.asarray(x)
    whole = np.sqrt(np.mean(np.square(x.reshape(*x.shape[:2], -1)), axis=-1))
    per_head = np.sqrt(np.mean(np.square(x), axis=-1))
    np.testing.assert_allclose(whole, 1.0, atol=1e-4)
    assert not np.allclose(per_head, 1.0, atol=1e-2)


@pytest.mark.parametrize("over", ["head", "heads"])
def test_qk_norm_chunked_equals_dense_and_its_scales_act(over):
  model = _model("rope", qk_norm=True, qk_norm_over=over)
  model.chunk_size = 8
  before = compiled(model)(*_tokens(21))
  chunked = compiled(model)(*_tokens(21), kernel="chunked")
  np.testing.assert_allclose(chunked, before, atol=2e-4, rtol=2e-4)
  scale = model.blocks[0].attn.k_norm.scale
  scale[...] = jnp.full(scale[...].shape, 2.0)
  assert np.abs(compiled(model)(*_tokens(21)) - before).max() > 1e-3


def _tokens(t):
  return jnp.arange(t)[None] * 7 % 259, jnp.arange(t)[None], jnp.ones((1, t), jnp.int32)


@pytest.mark.parametrize("pos", ["rope", "cope"])  # CoPE: the contextual hook's carries too
def test_remat_block_keeps_only_block_inputs_with_the_same_loss_and_gradients(pos):
  tokens_BxL = jax.random.randint(jax.random.key(1), (2, 16), 0, 32)
  pos_BxL = jnp.broadcast_to(jnp.arange(16), (2, 16))
  seg_BxL = jnp.ones((2, 16), jnp.int32)
  results = {}
  for remat in ("none", "block"):
    cfg = tiny_config(pos).model
    cfg.vocab_size, cfg.remat = 32, remat
    graphdef, params = nnx.split(Decoder(cfg, rngs=nnx.Rngs(0)), nnx.Param)

    def loss(p, graphdef=graphdef):
      return nnx.merge(graphdef, p)(tokens_BxL, pos_BxL, seg_BxL).sum()

    value, vjp = jax.vjp(loss, params)
    # what the backward pass keeps: the vjp's leaves, per-token arrays (B x L x ...) counted
    kept = [leaf for leaf in jax.tree.leaves(vjp) if leaf.shape[:2] == (2, 16)]
    results[remat] = value, vjp(jnp.ones_like(value))[0], len(kept)
  (v0, g0, kept0), (v1, g1, kept1) = results["none"], results["block"]
  np.testing.assert_allclose(v1, v0, rtol=1e-6)
  for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g0)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  assert kept1 < kept0 / 2, (kept0, kept1)  # 30 -> 8 for RoPE with 2 blocks


def _remat_steps(config, remats=("none", "matmuls")):
  """Per model.remat: (the residuals its train loss's backward keeps, (loss, gradients)) on a
  fixed batch of `config`'s shape."""
  b, t = config.data.batch_size, config.data.seq_len
  batch = batch_of(jax.random.randint(jax.random.key(1), (b, t + 1), 0, config.model.vocab_size))
  out = {}
  for remat in remats:
    config.model.remat = remat
    graphdef, params = nnx.split(Decoder(config.model, rngs=nnx.Rngs(0)), nnx.Param)

    def loss(p, graphdef=graphdef):
      return train.loss_fn(nnx.merge(graphdef, p), batch, batch["positions"])

    out[remat] = residuals.step_residuals(config), jax.jit(jax.value_and_grad(loss))(params)
  return out


def _assert_same_step_in_fewer_bytes(steps):
  """matmuls' backward keeps fewer bytes than none's, and gives the same loss and gradients."""
  (kept0, (v0, g0)), (kept1, (v1, g1)) = steps["none"], steps["matmuls"]
  assert sum(r.nbytes for r in kept1) < sum(r.nbytes for r in kept0)
  np.testing.assert_array_equal(v1, v0)
  for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g0)):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("impl", ["xla", "pallas"])  # the Pallas kernel's custom_vjp residuals too
def test_remat_matmuls_keeps_no_rotated_q_or_k_and_equals_none(impl):
  """model.remat=matmuls: every q/k-shaped array the backward keeps is a named projection (the
  rotated q and k are recomputed from them), fewer bytes than none keeps, same loss and
  gradients."""
  config = tiny_config("rope")
  config.model.vocab_size, config.model.attention.impl = 32, impl
  b, t, m = config.data.batch_size, config.data.seq_len, config.model
  q_shapes = {(b, t, m.num_heads, m.head_dim), (b, t, m.num_kv_heads, m.head_dim)}
  steps = _remat_steps(config)

  def q_shaped(remat):
    return [r.name for r in steps[remat][0] if r.aval.shape in q_shapes]

  assert None in q_shaped("none")  # rotated q and k, unnamed: the check sees them
  layers = m.num_layers
  assert collections.Counter(q_shaped("matmuls")) == {"q_proj": layers, "k_proj": layers}
  # the Pallas kernel's output and log-sum-exp are kept: its backward never reruns it
  lse = {attention.LSE} if impl == "pallas" else set()
  assert {attention.OUT, *lse} <= {r.name for r in steps["matmuls"][0]} <= {None, *decoder.KEPT}
  _assert_same_step_in_fewer_bytes(steps)


@pytest.mark.parametrize(
  "pos, impl, model",
  [
    ("alibi", "pallas", {}),  # the kernel's distance table: its names inside a lax.cond
    ("cope", "xla", {"mlp": "swiglu", "num_kv_heads": 2, "qk_norm": True}),  # contextual carries
  ],
)
def test_remat_matmuls_equals_none_with_other_kernels_and_options(pos, impl, model):
  config = tiny_config(pos)
  config.data.batch_size = 2
  config.model.vocab_size, config.model.attention.impl = 32, impl
  for key, value in model.items():
    config.model[key] = value
  _assert_same_step_in_fewer_bytes(_remat_steps(config))
