"""FoX (the Forgetting Transformer): an independent loop over (i, j) written from the paper,
values and gradients; dense == chunked; packed documents, causality; FoX with every gate 1 is
NoPE; the bias is non-positive and fades with distance; bad fields are one-line errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.config import checks as config_lib
from lcx.model import attention, positions
from lcx.model.decoder import Decoder
from lcx.model.positions import remaps
from tests.helpers import TINY_FLAGS, compiled, run_lcx, set_fields, tiny_config

B, T, D, H, G, E = 2, 7, 16, 4, 2, 8  # GQA: 2 query heads per kv head
DIMS = positions.Dims(D, H, E, 16, num_layers=3)


def _fox(**fields):
  cfg = positions.default_config("fox")
  cfg.update(fields)
  return positions.build(cfg, DIMS, rngs=nnx.Rngs(0))


def _random(seed, *shape):
  return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def _paper(x_BxTxD, w_DxH, b_H, q_BxTxHxE, k_BxTxGxE, v_BxTxGxE):
  """Attention with a forget gate, as the paper writes it, one (i, j) at a time:
  f_t = sigmoid(w_h . x_t + b_h), o_i = sum_{j<=i} softmax_j(q_i . k_j / sqrt(E) +
  sum_{l=j+1..i} log f_l) v_j; query head h reads kv head h // (H / G)."""
  f_BxTxH = jax.nn.sigmoid(jnp.einsum("btd,dh->bth", x_BxTxD, w_DxH) + b_H[None, None])
  k_BxTxHxE, v_BxTxHxE = (jnp.repeat(a, H // G, axis=2) for a in (k_BxTxGxE, v_BxTxGxE))
  outs = []  # every (batch, head) at once: a loop over them would only repeat the same ops
  for i in range(T):
    logits = []
    for j in range(i + 1):
      decay_BxH = sum((jnp.log(f_BxTxH[:, n]) for n in range(j + 1, i + 1)), jnp.zeros((B, H)))
      qk_BxH = jnp.einsum("bhe,bhe->bh", q_BxTxHxE[:, i], k_BxTxHxE[:, j])
      logits.append(qk_BxH / np.sqrt(E) + decay_BxH)
    p_BxHxJ = jax.nn.softmax(jnp.stack(logits, -1), -1)
    outs.append(sum(p_BxHxJ[..., j, None] * v_BxTxHxE[:, j] for j in range(i + 1)))
  return jnp.stack(outs, 1)  # BxTxHxE


def _lcx(scheme, x_BxTxD, q, k, v, kernel="dense", chunk_size=3, seg_BxT=None):
  """lcx's path: the scheme's `from_input`, the per-document prefix sums, a kernel."""
  seg = jnp.ones(x_BxTxD.shape[:2], jnp.int32) if seg_BxT is None else seg_BxT

  def run(x_BxTxD, q, k, v, seg):
    pos = jnp.broadcast_to(jnp.arange(x_BxTxD.shape[1]), x_BxTxD.shape[:2])
    prefix = attention.document_cumsum(scheme.from_input(x_BxTxD, pos, seg), seg)
    nope = positions.Scheme()
    no_remap = remaps.build(remaps.default_config("none"), DIMS)
    if kernel == "dense":
      return attention.dense(q, k, v, pos, seg, scheme=nope, remap=no_remap, prefix_BxSxH=prefix)
    return attention.chunked(
      q, k, v, pos, seg, scheme=nope, remap=no_remap, prefix_BxSxH=prefix, chunk_size=chunk_size
    )

  return compiled(run)(x_BxTxD, q, k, v, seg)


def _inputs():
  return (
    _random(1, B, T, D),
    _random(2, B, T, H, E),
    _random(3, B, T, G, E),
    _random(4, B, T, G, E),
  )


def test_values_and_gradients_equal_the_papers_formula():
  """Gradients with respect to the hidden states x, the gate's weights and bias, and q."""
  scheme = _fox(bias_init=1.0)
  scheme.b_H[...] = _random(5, H)  # a different gate bias per head
  graphdef, state = nnx.split(scheme)
  x, q, k, v = _inputs()
  cotangent = _random(6, B, T, H, E)

  def ours(state, x, q):
    return jnp.sum(_lcx(nnx.merge(graphdef, state), x, q, k, v) * cotangent)

  def paper(w, b, x, q):
    return jnp.sum(_paper(x, w, b, q, k, v) * cotangent)

  w, b = scheme.w_DxH[...], scheme.b_H[...]
  # Under jit: eager, the paper's loop compiles each of its B H T^2 small ops on its own.
  np.testing.assert_allclose(
    _lcx(scheme, x, q, k, v), jax.jit(_paper)(x, w, b, q, k, v), atol=2e-5, rtol=2e-5
  )
  d_state, d_x, d_q = jax.jit(jax.grad(ours, argnums=(0, 1, 2)))(state, x, q)
  d_w, d_b, d_x_ref, d_q_ref = jax.jit(jax.grad(paper, argnums=(0, 1, 2, 3)))(w, b, x, q)
  for got, want in ((d_state["w_DxH"][...], d_w), (d_state["b_H"][...], d_b), (d_x, d_x_ref)):
    assert np.abs(want).max() > 1e-3  # the gate matters
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-4)
  np.testing.assert_allclose(d_q, d_q_ref, atol=2e-5, rtol=2e-4)


def test_the_gate_is_the_references_at_init():
  """One linear map per block, d_model -> heads, bias 0 (every gate 1/2); each block its own."""
  scheme = _fox()
  blocks = [scheme.for_layer(i) for i in range(3)]
  assert len({id(s) for s in blocks}) == 3
  for s in blocks:
    assert s.w_DxH[...].shape == (D, H) and s.b_H[...].shape == (H,)
    np.testing.assert_array_equal(s.b_H[...], 0.0)
  assert not np.allclose(blocks[0].w_DxH[...], blocks[1].w_DxH[...])
  std = np.std(np.concatenate([np.ravel(s.w_DxH[...]) for s in blocks]))
  assert 0.6 * D**-0.5 < std < 1.4 * D**-0.5  # as the model's projections
  small = _fox(weight_std=0.02)  # the reference's initializer_range
  assert np.std(small.w_DxH[...]) < 0.04
  x = _random(1, B, T, D)
  log_f = _fox(weight_std=1e-9).from_input(x, None, None)
  np.testing.assert_allclose(log_f, np.log(0.5), atol=1e-6)


@pytest.mark.parametrize("chunk_size", [3, 4, 16])
def test_chunked_equals_dense_at_block_sizes_not_dividing_the_length(chunk_size):
  scheme = _fox()
  x, q, k, v = _inputs()
  np.testing.assert_allclose(
    _lcx(scheme, x, q, k, v, "chunked", chunk_size),
    _lcx(scheme, x, q, k, v),
    atol=3e-5,
    rtol=3e-5,
  )


def test_the_bias_is_non_positive_and_fades_with_distance():
  """c_i - c_j = sum of log f over j+1..i: <= 0, 0 at j = i, and non-increasing as the key
  moves away from a fixed query (the gates lie in (0, 1))."""
  x = _random(7, B, 40, D)
  seg = jnp.ones((B, 40), jnp.int32)
  c = np.asarray(attention.document_cumsum(_fox().from_input(x, None, seg), seg))
  bias_BxHxQxS = np.moveaxis(c[:, :, None, :] - c[:, None, :, :], -1, 1)
  causal = np.tril(np.ones((40, 40), bool))
  assert np.all(np.where(causal, bias_BxHxQxS, 0.0) <= 1e-5)
  np.testing.assert_allclose(np.diagonal(bias_BxHxQxS, axis1=2, axis2=3), 0.0, atol=1e-5)
  step = np.diff(bias_BxHxQxS, axis=-1)  # bias(i, j + 1) - bias(i, j): >= 0 below the diagonal
  assert np.all(np.where(causal[:, 1:], step, 0.0) >= -1e-5)
  assert np.where(causal, bias_BxHxQxS, 0.0).min() < -5.0  # and it does fade


# --- The model: each block's gates from its own hidden states. ---


def _model(pos="fox", fields=None):
  config = tiny_config(pos)
  config.model.vocab_size = 259
  set_fields(config.model, fields or {})
  return Decoder(config.model, rngs=nnx.Rngs(0))


def _tokens(t, seed=0):
  return jnp.asarray(np.random.default_rng(seed).integers(0, 256, (2, t)), jnp.int32)


@nnx.jit(static_argnames="kernel")
def _forward(model, tokens, pos, seg, kernel):
  """One program per shape and kernel: eager, every op of the model compiles on its own."""
  return model(tokens, pos, seg, kernel=kernel)


def _run(model, tokens, pos=None, seg=None, kernel="dense"):
  shape = tokens.shape
  pos = jnp.broadcast_to(jnp.arange(shape[1]), shape) if pos is None else pos
  seg = jnp.ones(shape, jnp.int32) if seg is None else seg
  return np.asarray(_forward(model, tokens, pos, seg, kernel=kernel))


def test_with_every_gate_one_fox_is_nope():
  """w = 0 and a large bias: log f = 0 to float32, so the logits are NoPE's, same weights."""
  fox, nope = _model(), _model("nope")
  for i in range(len(fox.blocks)):
    gate = fox.position.for_layer(i)
    gate.w_DxH[...] = jnp.zeros_like(gate.w_DxH[...])
    gate.b_H[...] = jnp.full_like(gate.b_H[...], 60.0)
  nnx.update(fox, nnx.state(nope, nnx.Param))  # every parameter but the gates' (NoPE has none)
  tokens = _tokens(20)
  np.testing.assert_allclose(_run(fox, tokens), _run(nope, tokens), atol=1e-5, rtol=1e-5)
  gate = fox.position.for_layer(1)
  gate.b_H[...] = jnp.zeros_like(gate.b_H[...])  # one block forgets: no longer NoPE
  assert not np.allclose(_run(fox, tokens), _run(nope, tokens), atol=1e-3)


@pytest.mark.parametrize("chunk_size", [8, 16, 64])
def test_the_model_chunked_equals_dense_past_the_training_length(chunk_size):
  """T = 45 (the training length 32 and more; no multiple of 8 or 16), two packed documents."""
  model = _model(fields={"attention.chunk_size": chunk_size})
  tokens = _tokens(45)
  seg = jnp.asarray([[1] * 45, [1] * 19 + [2] * 26])
  pos = jnp.where(seg == 1, jnp.arange(45), jnp.arange(45) - 19)
  dense = _run(model, tokens, pos, seg)
  chunked = _run(model, tokens, pos, seg, kernel="chunked")
  np.testing.assert_allclose(chunked, dense, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kernel", ["dense", "chunked"])
def test_a_packed_document_is_as_if_alone(kernel):
  """The gates' prefix sums restart at a document: its logits are those of the document alone,
  whatever precedes it in the row."""
  model = _model(fields={"attention.chunk_size": 8})
  tokens = _tokens(30)
  seg = jnp.asarray([[1] * 12 + [2] * 18] * 2)
  pos = jnp.where(seg == 1, jnp.arange(30), jnp.arange(30) - 12)
  packed = _run(model, tokens, pos, seg, kernel)
  alone = _run(model, tokens[:, 12:], kernel=kernel)
  np.testing.assert_allclose(packed[:, 12:], alone, atol=1e-4, rtol=1e-4)
  other = tokens.at[:, :12].set((tokens[:, :12] + 7) % 256)  # another first document
  np.testing.assert_allclose(
    _run(model, other, pos, seg, kernel)[:, 12:], packed[:, 12:], atol=1e-5
  )


def test_causal_the_future_does_not_change_the_past():
  model = _model()
  tokens = _tokens(24)
  changed = tokens.at[:, 15:].set((tokens[:, 15:] + 11) % 256)
  np.testing.assert_allclose(_run(model, changed)[:, :15], _run(model, tokens)[:, :15], atol=1e-6)
  assert not np.allclose(_run(model, changed)[:, 15:], _run(model, tokens)[:, 15:])


# --- Fields and the combinations that cannot run it: one line naming the field. ---


@pytest.mark.parametrize(
  "fields, message",
  [
    (
      {"model.position.weight_std": 0.0},
      r"^model.position.weight_std=0.0 is not allowed; allowed: > 0 "
      r"\(None: 1/sqrt\(model.d_model\)\)$",
    ),
    (
      {"model.attention.kind": "stick_breaking"},
      r"^model.position.name='fox' is not allowed with model.attention.kind='stick_breaking'",
    ),
  ],
)
def test_bad_values_name_the_field(fields, message):
  config = tiny_config("fox")
  set_fields(config, fields)
  with pytest.raises(ValueError, match=message):
    config_lib.check_fields(config)


def test_a_bad_field_on_the_command_line_is_one_error_line(tmp_path):
  workdir = tmp_path / "run"
  flags = ["--config=configs/base.py:pos=fox,size=tiny", *TINY_FLAGS[1:]]
  flags += [f"--workdir={workdir}", "--config.model.position.weight_std=-1.0"]
  proc = run_lcx(flags, check=False, timeout=120)
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert proc.stderr.strip().splitlines()[-1] == (
    "error: model.position.weight_std=-1.0 is not allowed; allowed: > 0 (None: "
    "1/sqrt(model.d_model))"
  )
  assert "Traceback" not in proc.stderr
  assert not workdir.exists()
