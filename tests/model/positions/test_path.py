"""PaTH attention (lcx/model/positions/path.py): its three forms of the logits against an explicit
product of the Householder matrices written from the paper (numpy, float64), values and
gradients, dense == chunked kernels at several blocks, causality, packed documents, the
beta = 0 (NoPE) and beta = 2 (orthogonal) cases, and the field errors."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.config import checks as config_lib
from lcx.model import attention, positions
from lcx.model.kernels import impl
from lcx.model.positions import path, remaps
from tests.helpers import compiled, tiny_config

B, T, H, G, E = 2, 11, 4, 2, 8  # T = 11: no block size below divides it


def _inputs(seed=0, beta_low=0.0, beta_high=2.0):
  rng = np.random.default_rng(seed)
  q = rng.normal(size=(B, T, H, E)).astype(np.float32)
  k = rng.normal(size=(B, T, G, E)).astype(np.float32)
  w = rng.normal(size=(B, T, G, E))
  w = (w / np.linalg.norm(w, axis=-1, keepdims=True)).astype(np.float32)
  beta = rng.uniform(beta_low, beta_high, size=(B, T, G)).astype(np.float32)
  return q, k, w, beta


def explicit_logits(q, k, w, beta):
  """BxGxPxTxT: q_i^T H_i H_{i-1} ... H_{j+1} k_j / sqrt(E) for j <= i (0 above), each H_t an
  explicit E x E matrix and the product built one factor at a time (the paper's eq.)."""
  q, k, w, beta = (np.asarray(a, np.float64) for a in (q, k, w, beta))
  per = H // G
  out = np.zeros((B, G, per, T, T))
  for b in range(B):
    for g in range(G):
      hh = [np.eye(E) - beta[b, t, g] * np.outer(w[b, t, g], w[b, t, g]) for t in range(T)]
      for i in range(T):
        product = np.eye(E)  # H_i ... H_{j+1}, for j = i down to 0
        for j in range(i, -1, -1):
          for p in range(per):
            out[b, g, p, i, j] = q[b, i, g * per + p] @ product @ k[b, j, g] / np.sqrt(E)
          product = product @ hh[j]
  return out


def _heads_major(q, k, w, beta):
  """The layouts `dense_logits` takes, q scaled as the kernels scale it."""
  q_BxGxPxTxE = jnp.transpose(jnp.reshape(q, (B, T, G, H // G, E)), (0, 2, 3, 1, 4)) * E**-0.5
  return (
    q_BxGxPxTxE,
    jnp.moveaxis(k, 1, 2),
    jnp.moveaxis(w, 1, 2),
    jnp.moveaxis(beta, 1, 2),
  )


def _nope():
  return positions.build(
    positions.default_config("nope"), positions.Dims(32, H, E, 16), rngs=nnx.Rngs(0)
  )


NO_REMAP = remaps.build(remaps.default_config("none"), positions.Dims(32, H, E, 16))


def _attend(kernel, q, k, v, w, beta, seg=None, **kw):
  """BxTxHxE attention output through a kernel with PaTH's Householders."""
  pos = jnp.broadcast_to(jnp.arange(T), (B, T))
  seg = jnp.ones((B, T), jnp.int32) if seg is None else seg
  run = compiled(kernel)
  return run(q, k, v, pos, seg, scheme=_nope(), remap=NO_REMAP, householder=(w, beta), **kw)


def _softmax_reference(q, k, v, w, beta, seg):
  """softmax over the explicit logits, masked by causality and documents (numpy)."""
  logits = explicit_logits(q, k, w, beta)
  allowed = np.tril(np.ones((T, T), bool))[None] & (seg[:, :, None] == seg[:, None, :])
  logits = np.where(allowed[:, None, None], logits, -np.inf)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  v_BxGxTxE = np.moveaxis(np.asarray(v, np.float64), 1, 2)
  out = np.einsum("bgpqs,bgse->bgpqe", probs, v_BxGxTxE).reshape(B, H, T, E)
  return np.moveaxis(out, 1, 2)


def test_reference_and_block_forms_equal_the_explicit_product():
  q, k, w, beta = _inputs()
  expected = explicit_logits(q, k, w, beta)
  np.testing.assert_allclose(jax.jit(path.reference_logits)(q, k, w, beta), expected, atol=2e-5)
  dense_logits = jax.jit(path.dense_logits, static_argnames="block")  # one program per block
  for block in (1, 3, 4, 8, 64):  # 64 > T: one block, the UT form alone
    got = dense_logits(*_heads_major(q, k, w, beta), block=block)
    np.testing.assert_allclose(got, expected, atol=2e-5, err_msg=f"block {block}")


def test_beta_zero_is_nope_and_beta_two_keeps_norms():
  q, k, w, beta = _inputs()
  plain = np.einsum("bqgpe,bsge->bgpqs", q.reshape(B, T, G, H // G, E), k) / np.sqrt(E)
  zero = path.dense_logits(*_heads_major(q, k, w, np.zeros_like(beta)), block=4)
  np.testing.assert_allclose(zero, np.tril(plain), atol=1e-5)
  # beta = 2: every H_t a reflection, so each block's product is orthogonal and keys carried
  # through it keep their norms; an explicit H_t is orthogonal too.
  two = np.full_like(beta, 2.0)
  blocked = [path.blocked(jnp.moveaxis(a, 1, 2), 4, 2) for a in (k, w, two)]
  q_b = path.blocked(_heads_major(q, k, w, two)[0], 4, 3)
  _, _, k_end, p = path.block_terms(q_b, *blocked)
  np.testing.assert_allclose(
    np.einsum("bgnde,bgnfe->bgndf", p, p), np.broadcast_to(np.eye(E), p.shape), atol=1e-5
  )
  np.testing.assert_allclose(
    np.linalg.norm(k_end, axis=-1), np.linalg.norm(blocked[0], axis=-1), rtol=1e-5
  )
  h = np.eye(E) - 2.0 * np.outer(w[0, 0, 0], w[0, 0, 0])
  np.testing.assert_allclose(h @ h.T, np.eye(E), atol=1e-6)
  # beta in (0, 2) is no reflection: the norm shrinks along w.
  short = path.reference_logits(q, k, w, np.full_like(beta, 1.0))
  assert not np.allclose(short, plain * np.tril(np.ones((T, T))), atol=1e-3)


@pytest.mark.parametrize("chunk", [3, 4, 8, 16])
def test_dense_and_chunked_kernels_equal_the_explicit_softmax(chunk):
  """Two packed documents per row (the product never crosses into the other), T = 11 not a
  multiple of the chunk."""
  q, k, w, beta = _inputs(1)
  v = np.random.default_rng(2).normal(size=(B, T, G, E)).astype(np.float32)
  seg = np.array([[1] * 6 + [2] * 5, [1] * 11])
  expected = _softmax_reference(q, k, v, w, beta, seg)
  dense = _attend(attention.dense, q, k, v, w, beta, jnp.asarray(seg))
  chunked = _attend(attention.chunked, q, k, v, w, beta, jnp.asarray(seg), chunk_size=chunk)
  np.testing.assert_allclose(dense, expected, atol=2e-5)
  np.testing.assert_allclose(chunked, expected, atol=2e-5)


def explicit_output(q, k, v, w, beta, seg):
  """BxTxHxE softmax attention over the explicit products (jnp, so autodiff gives gradients):
  every H_t an E x E matrix, H_i ... H_{j+1} built one factor at a time, keys of other
  documents masked."""
  per = H // G
  eye = jnp.eye(E)
  hh = eye[None, None, None] - beta[..., None, None] * w[..., :, None] * w[..., None, :]
  rows = []
  for i in range(T):
    product = jnp.broadcast_to(eye, (B, G, E, E))
    cols = []
    for j in range(i, -1, -1):
      cols.append(jnp.einsum("bgpd,bgde,bge->bgp", q[:, i].reshape(B, G, per, E), product, k[:, j]))
      product = product @ hh[:, j]
    logits = jnp.stack(cols[::-1], -1) / np.sqrt(E)  # BxGxPx(i+1)
    same = (seg[:, : i + 1] == seg[:, i : i + 1])[:, None, None]
    probs = jax.nn.softmax(jnp.where(same, logits, -jnp.inf), -1)
    rows.append(jnp.einsum("bgpj,bjge->bgpe", probs, v[:, : i + 1]).reshape(B, H, E))
  return jnp.stack(rows, 1)


SEG = np.array([[1] * 6 + [2] * 5, [1] * 11])


def test_gradients_of_the_dense_kernel_equal_the_explicit_products():
  """d/d(q, k, v, w, beta) of a weighted sum of the outputs (the chunked kernel is for
  evaluation: its loops have dynamic bounds, which reverse mode does not take)."""
  q, k, w, beta = _inputs(3, 0.5, 1.9)
  v = np.random.default_rng(4).normal(size=(B, T, G, E)).astype(np.float32)
  weights = np.random.default_rng(5).normal(size=(B, T, H, E)).astype(np.float32)
  args = tuple(jnp.asarray(a) for a in (q, k, v, w, beta))
  # Under jit: eager, the explicit products' T^2 ops and their transposes compile one by one.
  expected = jax.jit(
    jax.grad(lambda *a: jnp.sum(explicit_output(*a, jnp.asarray(SEG)) * weights), range(5))
  )(*args)
  got = jax.jit(
    jax.grad(lambda *a: jnp.sum(_attend(attention.dense, *a, jnp.asarray(SEG)) * weights), range(5))
  )(*args)
  for which, a, b in zip("q k v w beta".split(), got, expected):
    assert np.abs(b).max() > 1e-3, which
    np.testing.assert_allclose(a, b, atol=2e-4, rtol=2e-4, err_msg=f"d{which}")


def test_outputs_are_causal():
  """Changing every input after token 5 (q, k, v, w, beta) leaves tokens 0..5 unchanged."""
  q, k, w, beta = _inputs(6)
  v = np.random.default_rng(7).normal(size=(B, T, G, E)).astype(np.float32)
  q2, k2, w2, beta2 = _inputs(8)
  v2 = np.random.default_rng(9).normal(size=(B, T, G, E)).astype(np.float32)
  later = (np.arange(T) > 5)[None, :, None, None]
  mixed = [np.where(later, b, a) for a, b in ((q, q2), (k, k2), (v, v2), (w, w2))] + [
    np.where(later[..., 0], beta2, beta)
  ]
  for kernel, kw in ((attention.dense, {}), (attention.chunked, {"chunk_size": 4})):
    a = _attend(kernel, q, k, v, w, beta, **kw)
    b = _attend(kernel, mixed[0], mixed[1], mixed[2], mixed[3], mixed[4], **kw)
    np.testing.assert_allclose(a[:, :6], b[:, :6], atol=1e-6)
    assert not np.allclose(a[:, 6:], b[:, 6:], atol=1e-3)


def _scheme(layers=2, **fields):
  cfg = positions.default_config("path")
  cfg.update(fields)
  return positions.build(cfg, positions.Dims(32, H, E, 16, layers, G), rngs=nnx.Rngs(0))


def test_householders_from_the_input_are_unit_in_range_and_stay_in_their_document():
  scheme = _scheme()
  householder = nnx.jit(lambda s, x, seg: s.householder(x, seg))  # eager: one compile per op
  x = jax.random.normal(jax.random.key(0), (B, T, 32))
  seg = jnp.asarray(np.array([[1] * 6 + [2] * 5] * B))
  w, beta = householder(scheme, x, seg)
  assert w.shape == (B, T, G, E) and beta.shape == (B, T, G)
  np.testing.assert_allclose(np.linalg.norm(w, axis=-1), 1.0, atol=1e-5)
  assert ((beta > 0) & (beta < 2)).all()
  # The short convolution reads 2 tokens back, never across a document or from later tokens.
  w_doc2, beta_doc2 = householder(scheme, x[:, 6:], seg[:, 6:])
  np.testing.assert_allclose(w[:, 6:], w_doc2, atol=1e-6)
  np.testing.assert_allclose(beta[:, 6:], beta_doc2, atol=1e-6)
  w_head, _ = householder(scheme, x[:, :4], seg[:, :4])
  np.testing.assert_allclose(w[:, :4], w_head, atol=1e-6)
  changed, _ = householder(scheme, x.at[:, 3].add(1.0), seg)
  assert not np.allclose(changed[:, 3:6], w[:, 3:6], atol=1e-4)  # tokens 3, 4, 5 read token 3
  np.testing.assert_allclose(changed[:, 6:], w[:, 6:], atol=1e-6)
  # Layers have their own parameters; rank 0 and conv_size 0 are a full projection, no conv.
  assert scheme.for_layer(1) is not scheme
  full = _scheme(rank=0, conv_size=0)
  u = full.project(x)
  np.testing.assert_allclose(
    householder(full, x, seg)[0], u / np.linalg.norm(u, axis=-1, keepdims=True), atol=1e-5
  )


def test_gradients_reach_the_projection_parameters_as_through_the_explicit_products():
  """d/d(the scheme's parameters) through its householder(x) and the dense kernel equal those
  through the explicit products, and reach every parameter of the layer."""
  scheme = _scheme(layers=1)
  x = jax.random.normal(jax.random.key(1), (B, T, 32))
  q, k, _, _ = _inputs(10)
  v = np.random.default_rng(11).normal(size=(B, T, G, E)).astype(np.float32)
  seg = jnp.asarray(SEG)
  graphdef, params = nnx.split(scheme)

  def loss(params, attend):
    w, beta = nnx.merge(graphdef, params).householder(x, seg)
    return jnp.sum(attend(q, k, v, w, beta, seg) ** 2)

  grad = jax.jit(jax.grad(loss), static_argnums=1)  # eager, T^2 ops compile one by one
  dense = nnx.to_pure_dict(grad(params, functools.partial(_attend, attention.dense)))
  expected = nnx.to_pure_dict(grad(params, explicit_output))
  expected.pop("others", None)  # no other layer
  assert sorted(expected) == ["b_beta", "conv_KxGxE", "w_beta", "w_down", "w_up"]
  for name, want in expected.items():
    assert np.abs(want).max() > 1e-4, name
    np.testing.assert_allclose(dense[name], want, atol=1e-4, rtol=1e-4, err_msg=name)


def test_to_document_end_carries_each_key_through_its_documents_householders():
  _, k, w, beta = _inputs(12)
  seg = np.array([[1] * 6 + [2] * 5, [1] * 11])
  got = path.to_document_end(k, w, beta, seg)
  for b, j, g in ((0, 1, 1), (0, 5, 0), (0, 7, 1), (1, 2, 0)):
    end = 5 if seg[b, j] == 1 and b == 0 else T - 1
    carried = k[b, j, g].astype(np.float64)
    for t in range(j + 1, end + 1):
      carried = carried - beta[b, t, g] * w[b, t, g] * (w[b, t, g] @ carried)
    np.testing.assert_allclose(got[b, j, g], carried, atol=1e-5)


def test_bad_fields_and_combinations_are_one_line_errors():
  dims = positions.Dims(32, H, E, 16)
  for field, value in (("rank", -1), ("conv_size", -2)):
    cfg = positions.default_config("path")
    cfg[field] = value
    with pytest.raises(
      ValueError, match=rf"^model\.position\.{field}=.* is not allowed; allowed: an integer >= 0"
    ):
      positions.validate(cfg, dims)
  with pytest.raises(ValueError, match="reads none .*Householder"):
    remaps.check_scheme(remaps.default_config("self_extend"), "path")
  config = tiny_config("path")
  config.model.attention.kind = "stick_breaking"
  with pytest.raises(ValueError, match="model.position.name='path' is not allowed with"):
    config_lib.check_fields(config)
  config = tiny_config("path")
  config.model.attention.impl = "pallas"
  with pytest.raises(ValueError, match="Householder transforms, PaTH"):
    impl.check_impl(config.model)
  assert impl.resolve_impl(tiny_config("path").model, "gpu") == "xla"  # auto falls back


def _decoder(window: int):
  from lcx.model import patterns
  from lcx.model.decoder import Decoder

  cfg = tiny_config("path").model
  cfg.vocab_size, cfg.attention.chunk_size = 259, 8
  cfg.attention.pattern = patterns.default_config("sliding_window")
  cfg.attention.pattern.window = window
  return Decoder(cfg, rngs=nnx.Rngs(0))


def test_model_packed_documents_sparse_pattern_and_both_kernels():
  """A 2-layer PaTH model on two packed documents with a sliding window: the chunked kernel
  (chunk 8, T = 40) gives the dense kernel's logits, and the second document's logits are
  those of the document alone (the convolution and the products stay inside it)."""
  model = _decoder(window=7)
  tokens = np.random.default_rng(0).integers(0, 256, (2, 40)).astype(np.int32)
  pos = np.concatenate([np.arange(25), np.arange(15)])[None].repeat(2, 0)
  seg = np.array([1] * 25 + [2] * 15)[None].repeat(2, 0)
  # Under jit: eager, every op of the two layers compiles its own program.
  forward = nnx.jit(lambda m, *a, kernel: m(*a, kernel=kernel), static_argnames="kernel")
  dense = forward(model, tokens, pos, seg, kernel="dense")
  chunked = forward(model, tokens, pos, seg, kernel="chunked")
  np.testing.assert_allclose(chunked, dense, atol=2e-5, rtol=2e-5)
  alone = forward(model, tokens[:, 25:], pos[:, 25:], np.ones((2, 15), np.int32), kernel="dense")
  np.testing.assert_allclose(alone, dense[:, 25:], atol=2e-5, rtol=2e-5)
  model.init_cache(2, 12)
  forward(model, tokens[:, :12], pos[:, :12], np.ones((2, 12), np.int32), kernel="dense")
  with pytest.raises(ValueError, match="a PaTH generation step takes one new token, not 2"):
    model.decode(tokens[:, 12:14], 10)


def test_analysis_maps_are_the_path_logits_the_model_attends_with():
  """lcx.tools.analysis records each layer's (w, beta) beside q and k: its logits are the explicit
  products' (not plain q.k), in the dense and the chosen-rows paths."""
  from lcx.config import defaults
  from lcx.model.decoder import Decoder
  from lcx.tools import analysis

  config = defaults.get_config("pos=path,size=tiny")
  config.model.vocab_size, config.model.num_layers = 259, 1
  model = analysis.Model(config, Decoder(config.model, rngs=nnx.Rngs(0)))
  t = 12
  tokens = np.random.default_rng(0).integers(0, 259, (1, t))
  values = analysis.qk(model, tokens)
  assert values.w.shape[:3] == (1, 1, t) and values.beta.shape == (1, 1, t, values.k.shape[3])
  expected = path.reference_logits(values.q[0], values.k[0], values.w[0], values.beta[0])
  heads = values.q.shape[3]
  expected = np.asarray(expected).reshape(1, heads, t, t)
  causal = np.tril(np.ones((t, t), bool))
  maps = analysis.attention_maps(model, tokens, qk_values=values)
  np.testing.assert_allclose(np.where(causal, maps.logits[0], 0.0), expected, atol=1e-4)
  rows = analysis.attention_maps(model, tokens, rows=[3, 11], qk_values=values)
  np.testing.assert_allclose(rows.probs[..., [0, 1], :], maps.probs[..., [3, 11], :], atol=1e-6)


def test_unit_lower_solve_and_its_gradients_equal_a_dense_solve():
  rng = np.random.default_rng(13)
  n = np.tril(rng.normal(size=(3, 6, 6)), -1).astype(np.float32)
  rhs = rng.normal(size=(3, 6, 5)).astype(np.float32)
  eye = np.eye(6, dtype=np.float32)[None]
  np.testing.assert_allclose(
    path.unit_lower_solve(n, rhs), np.linalg.solve(eye + n.astype(np.float64), rhs), atol=1e-4
  )
  weights = rng.normal(size=(3, 6, 5)).astype(np.float32)
  got = jax.grad(lambda a, b: jnp.sum(path.unit_lower_solve(a, b) * weights), (0, 1))(n, rhs)
  want = jax.grad(lambda a, b: jnp.sum(jnp.linalg.solve(eye + a, b) * weights), (0, 1))(n, rhs)
  np.testing.assert_allclose(got[0], np.tril(want[0], -1), atol=1e-4)  # N is strictly lower
  np.testing.assert_allclose(got[1], want[1], atol=1e-4)


def test_chunked_prefill_and_cached_steps_equal_dense_generation():
  """Generation's prefill through the chunked kernel (4-token blocks, a 10-token prompt) writes
  the same carried keys and projections as the dense one; every step then matches."""
  from lcx.model.decoder import Decoder
  from lcx.tools import generate

  cfg = tiny_config("path").model
  cfg.vocab_size, cfg.attention.chunk_size = 259, 4
  model = Decoder(cfg, rngs=nnx.Rngs(0))
  graphdef, params = nnx.split(model, nnx.Param)
  prompt = np.random.default_rng(0).integers(0, 256, (2, 10)).astype(np.int32)
  dense = generate.generate(graphdef, params, prompt, 12, with_logits=True)
  chunked = generate.generate(graphdef, params, prompt, 12, kernel="chunked", with_logits=True)
  np.testing.assert_array_equal(dense[0], chunked[0])
  np.testing.assert_allclose(dense[1], chunked[1], atol=1e-4, rtol=1e-4)
