"""CoPE: positions counted from the gates (hand-counted), the interpolated position logits, the
clamp, dense == chunked in values and gradients (uneven chunks, packed documents, a sparse
pattern, a sink), the cache == the forward pass, and the errors naming the field."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.model import attention, patterns, positions
from lcx.model.decoder import Decoder
from lcx.model.positions import cope, remaps
from tests.helpers import compiled, tiny_config

DIMS = positions.Dims(d_model=32, num_heads=4, head_dim=8, max_len=16)
NO_REMAP = remaps.build(remaps.default_config("none"), DIMS)
BIG = 100.0  # sigmoid(+-BIG) is 1 or 0 in float32


def _scheme(seed=1, **fields):
  """CoPE with random embeddings (they start at zero, where CoPE is NoPE)."""
  cfg = positions.default_config("cope")
  cfg.update(fields)
  scheme = positions.build(cfg, DIMS, rngs=nnx.Rngs(0))
  table = scheme.embedding_NxE
  table[...] = jax.random.normal(jax.random.key(seed), table[...].shape)
  return scheme


def _causal(t):
  return jnp.tril(jnp.ones((t, t), bool))[None]  # 1xQxS


def test_default_table_covers_positions_up_to_the_training_length():
  """npos_max = L + 1 as the paper's code (block size + 1): p lies in [0, L]; zero at init."""
  scheme = positions.build(positions.default_config("cope"), DIMS, rngs=nnx.Rngs(0))
  assert scheme.embedding_NxE[...].shape == (DIMS.max_len + 1, DIMS.head_dim)
  assert not np.asarray(scheme.embedding_NxE[...]).any()
  assert _scheme(npos_max=5).embedding_NxE[...].shape == (5, DIMS.head_dim)


def test_all_gates_open_give_relative_positions():
  """Every gate 1: p_ij = i - j + 1 on the allowed keys (CoPE reduces to relative positions)."""
  t = 7
  gates = cope.gates(jnp.full((1, 1, 1, t, t), BIG), _causal(t))
  got = np.asarray(cope.contextual_positions(gates))[0, 0, 0]
  i, j = np.arange(t)[:, None], np.arange(t)[None, :]
  np.testing.assert_array_equal(np.where(j <= i, got, -1), np.where(j <= i, i - j + 1, -1))


def test_positions_count_only_the_open_gates():
  """One query (the last of 6) with gates 1, 0, 1, 1, 0, 0.5 on keys 0..5: p_j sums them from
  j up to the query; a masked key counts nothing (key 1 masked: same as a closed gate)."""
  logits = jnp.asarray([BIG, BIG, BIG, BIG, -BIG, 0.0]).reshape(1, 1, 1, 1, 6)
  mask = jnp.asarray([[[True, False, True, True, True, True]]])
  pos = np.asarray(cope.contextual_positions(cope.gates(logits, mask)))[0, 0, 0, 0]
  np.testing.assert_allclose(pos, [3.5, 2.5, 2.5, 1.5, 0.5, 0.5])
  # Split into two blocks, nearer one first: the carry adds the nearer block's gates.
  near = cope.contextual_positions(cope.gates(logits[..., 3:], mask[..., 3:]))
  far = cope.contextual_positions(cope.gates(logits[..., :3], mask[..., :3]), near[..., 0])
  np.testing.assert_allclose(np.concatenate([far, near], -1)[0, 0, 0, 0], pos)


def test_gates_gradient_equals_autodiff_of_sigmoid_and_mask():
  """The gates' hand-written backward (from the gates alone) equals autodiff of
  where(mask, sigmoid(z), 0): the sigmoid's slope on allowed keys, exactly 0 on masked ones."""
  z = 3 * jax.random.normal(jax.random.key(0), (2, 3, 1, 5, 5))
  mask = _causal(5).repeat(2, 0)
  c = jax.random.normal(jax.random.key(1), z.shape)

  def plain(z):
    return jnp.sum(jnp.where(mask[:, None, None], jax.nn.sigmoid(z), 0.0) * c)

  got = jax.grad(lambda z: jnp.sum(cope.gates(z, mask) * c))(z)
  np.testing.assert_allclose(got, jax.grad(plain)(z), rtol=1e-6, atol=1e-7)
  assert not np.asarray(got)[..., ~np.asarray(mask[0])].any()


@pytest.mark.parametrize("s", [1, 5, 32, 37, 100])
def test_reverse_cumsum_sums_from_each_key_to_the_last(s):
  """The blocked sum (triangular matmul within blocks of 32, carried across) equals the plain
  reverse cumulative sum, for lengths below, at and past a block, and its gradient too."""
  x = jax.random.uniform(jax.random.key(s), (2, 3, s))
  want = np.cumsum(np.asarray(x)[..., ::-1], axis=-1)[..., ::-1]
  np.testing.assert_allclose(cope.reverse_cumsum(x), want, rtol=1e-6)
  c = jax.random.normal(jax.random.key(7), x.shape)
  grad = jax.grad(lambda x: jnp.sum(cope.reverse_cumsum(x) * c))(x)
  np.testing.assert_allclose(grad, np.cumsum(np.asarray(c), axis=-1), rtol=1e-5, atol=1e-6)


def test_position_table_is_q_dot_each_embedding_then_a_zero_column():
  q = jax.random.normal(jax.random.key(3), (2, 1, 3, 5, 8))
  e = jax.random.normal(jax.random.key(4), (6, 8))
  table = np.asarray(cope.position_table(q, e))
  assert table.shape == (2, 1, 3, 5, 7)
  np.testing.assert_allclose(table[..., :6], np.einsum("bgpqe,ne->bgpqn", q, e), rtol=1e-5)
  assert not table[..., 6].any()


def test_interpolation_between_integer_positions_and_the_clamp():
  """Table row t(n) = n^2 for n < 4, then the padding column: p = 2.5 reads (4 + 9) / 2;
  p = 1 reads 1; past N - 1 = 3, t(3)."""
  table = (jnp.arange(5.0) ** 2).at[4].set(0.0).reshape(1, 1, 1, 1, 5)
  pos = jnp.asarray([2.5, 1.0, 0.25, 3.0, 7.2]).reshape(1, 1, 1, 1, 5)
  got = np.asarray(cope.interpolate(table, pos))[0, 0, 0, 0]
  np.testing.assert_allclose(got, [6.5, 1.0, 0.25, 9.0, 9.0])
  grad = jax.grad(lambda p: cope.interpolate(table, p).sum())(pos)[0, 0, 0, 0]
  # The slope between the two rows read; 0 at an integer (floor = ceil, as the paper's code) and
  # past the clamp.
  np.testing.assert_allclose(grad, [9 - 4, 0, 1 - 0, 0, 0])
  # Each read's weight lands on its rows; nothing on the padding.
  grad = jax.grad(lambda t: cope.interpolate(t, pos).sum())(table)[0, 0, 0, 0]
  np.testing.assert_allclose(grad, [0.75, 1.25, 0.5, 2.5, 0.0])


@pytest.mark.parametrize(
  "rows, parts", [((2, 1, 3, 4), 2), ((1, 1, 1, 3), 2), ((1, 2, 1, 5), 3), ((1, 1, 1, 1), 2)]
)
def test_interpolation_gradients_equal_autodiff_of_the_two_reads(rows, parts, monkeypatch):
  """The hand-written backward (scatter-adds of 2-wide windows, one per range of rows: even,
  uneven and more parts than rows) equals autodiff of the plain floor/ceiling reads
  (`interpolate_batched`, the path for huge tables), at fractional positions, integers and past
  the clamp; the rows' last reads (the clamp) put nothing into the next row."""
  monkeypatch.setattr(cope, "SCATTER_PARTS", parts)
  m, s = 9, 12
  table = jax.random.normal(jax.random.key(0), (*rows, m)).at[..., -1].set(0.0)
  pos = jax.random.uniform(jax.random.key(1), (*rows, s), maxval=m + 3)
  pos = pos.at[..., :3].set(jnp.round(pos[..., :3])).at[..., 3].set(m - 2.0)
  cotangent = jax.random.normal(jax.random.key(2), pos.shape)
  out, vjp = jax.vjp(cope.interpolate_batched, table, pos)
  # The batched reads themselves, by hand at one row: p = 2.5 reads the mean of rows 2 and 3.
  row = np.asarray(table[0, 0, 0, 0])
  np.testing.assert_allclose(
    cope.interpolate_batched(table, jnp.full(pos.shape, 2.5))[0, 0, 0, 0, 0], row[2:4].mean()
  )
  np.testing.assert_allclose(cope.interpolate(table, pos), out, rtol=1e-5, atol=1e-6)
  got = jax.jit(lambda t, p: jax.vjp(cope.interpolate, t, p)[1](cotangent))(table, pos)
  for g, w in zip(got, vjp(cotangent), strict=True):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_hook_adds_q_dot_embedding_at_the_counted_position():
  """The hook's logits are (q / sqrt(E)) . e[p] interpolated, p counted from the gates; with
  npos_max = 3 every key from distance 2 on reads e[2]."""
  scheme = _scheme(npos_max=3)
  t, e = 5, DIMS.head_dim
  q = jax.random.normal(jax.random.key(2), (1, 1, 1, t, e))
  logits = jnp.full((1, 1, 1, t, t), BIG)
  extra, _ = scheme.contextual(q, logits, _causal(t), None)
  dots = np.asarray(q[0, 0, 0] @ scheme.embedding_NxE[...].T)  # Q x N
  i, j = np.arange(t)[:, None], np.arange(t)[None, :]
  want = np.take_along_axis(dots, np.minimum(i - j + 1, 2).clip(0), axis=1)
  np.testing.assert_allclose(np.where(j <= i, extra[0, 0, 0], 0), np.where(j <= i, want, 0), 1e-5)
  # Half-open gates: p = (i - j + 1) / 2, between two rows of the table.
  extra, _ = scheme.contextual(q, jnp.zeros((1, 1, 1, t, t)), _causal(t), None)
  p = np.minimum((i - j + 1) / 2, 2)
  lo, hi = np.floor(p).astype(int).clip(0), np.ceil(p).astype(int).clip(0)
  want = np.take_along_axis(dots, lo, 1) * (1 - (p - lo)) + np.take_along_axis(dots, hi, 1) * (
    p - lo
  )
  np.testing.assert_allclose(np.where(j <= i, extra[0, 0, 0], 0), np.where(j <= i, want, 0), 1e-5)


def _inputs(b=2, t=40, h=4, g=2, k=8, seed=0):
  rng = np.random.default_rng(seed)
  q, kk, v = (jnp.asarray(rng.normal(size=(b, t, n, k)), jnp.float32) for n in (h, g, g))
  return q, kk, v, jnp.broadcast_to(jnp.arange(t), (b, t)), jnp.ones((b, t), jnp.int32)


def _pattern(name, **fields):
  cfg = patterns.default_config(name)
  cfg.update(fields)
  return patterns.build(cfg)


CASES = {
  "divides": dict(t=32, chunk=8),
  "uneven": dict(t=37, chunk=16),
  "packed": dict(t=37, chunk=8, seg=[1] * 13 + [2] * 20 + [0] * 4),
  "strided": dict(t=37, chunk=8, pattern=("strided", {"window": 3, "stride": 4})),
  "sink": dict(t=29, chunk=8, sink=True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_chunked_equals_dense(case):
  c = CASES[case]
  q, k, v, pos, seg = _inputs(t=c["t"])
  if "seg" in c:
    seg = jnp.broadcast_to(jnp.asarray(c["seg"]), seg.shape)
    pos = attention.document_index(seg)
  pattern = _pattern(c["pattern"][0], **c["pattern"][1]) if "pattern" in c else None
  kw = dict(
    scheme=_scheme(),
    remap=NO_REMAP,
    pattern=pattern,
    sink_H=jnp.asarray([0.3, -0.2, 1.5, 0.0]) if c.get("sink") else None,
  )
  args = (q, k, v, pos, seg)
  dense = jax.jit(lambda *a: attention.dense(*a, **kw))(*args)
  chunked = jax.jit(lambda *a: attention.chunked(*a, chunk_size=c["chunk"], **kw))(*args)
  np.testing.assert_allclose(chunked, dense, atol=3e-5, rtol=3e-5)
  # The embeddings matter: CoPE with them is not NoPE.
  nope = compiled(attention.dense)(q, k, v, pos, seg, **{**kw, "scheme": positions.Scheme()})
  assert np.abs(np.asarray(dense) - np.asarray(nope)).max() > 1e-2


def test_the_hook_by_blocks_equals_one_call_in_values_and_gradients(chunk=5):
  """Key blocks visited nearest first with the carry (the chunked kernel's calls) give the
  one-call (dense) logits and the same gradients in q, the logits and the embeddings. (The
  chunked kernel itself is for evaluation: its loop bounds depend on the query block, which
  reverse-mode differentiation does not support, for any scheme.)"""
  t, e = 13, DIMS.head_dim
  graphdef, params = nnx.split(_scheme())
  q = jax.random.normal(jax.random.key(4), (2, 2, 2, t, e))
  logits = 2 * jax.random.normal(jax.random.key(5), (2, 2, 2, t, t))
  seg = jnp.asarray([[1] * 6 + [2] * 7, [1] * 13])
  mask = _causal(t) & (seg[:, :, None] == seg[:, None, :])
  w = jax.random.normal(jax.random.key(6), logits.shape)

  def one_call(params, q, logits):
    extra, _ = nnx.merge(graphdef, params).contextual(q, logits, mask, None)
    return (jnp.where(mask[:, None, None], extra, 0) * w).sum()

  def by_blocks(params, q, logits):
    scheme, carry, total = nnx.merge(graphdef, params), None, 0.0
    for end in range(t, 0, -chunk):  # the nearest keys (the last ones) first
      keys = slice(max(end - chunk, 0), end)
      extra, carry = scheme.contextual(q, logits[..., keys], mask[..., keys], carry)
      total += (jnp.where(mask[:, None, None, :, keys], extra, 0) * w[..., keys]).sum()
    return total

  want, want_grads = jax.jit(jax.value_and_grad(one_call, (0, 1, 2)))(params, q, logits)
  got, got_grads = jax.jit(jax.value_and_grad(by_blocks, (0, 1, 2)))(params, q, logits)
  np.testing.assert_allclose(got, want, rtol=1e-5)
  for g, w_ in zip(jax.tree.leaves(got_grads), jax.tree.leaves(want_grads)):
    assert np.abs(w_).max() > 1e-3  # every input really gets a gradient
    np.testing.assert_allclose(g, w_, atol=1e-4, rtol=1e-4)


def test_a_packed_document_counts_as_if_alone():
  """Gates of other documents are masked, so a document's positions start at its own tokens."""
  q, k, v, _, _ = _inputs(b=1, t=21)
  seg = jnp.asarray([[1] * 5 + [2] * 16])
  pos = attention.document_index(seg)
  scheme = _scheme()
  packed = compiled(attention.chunked)(
    q, k, v, pos, seg, scheme=scheme, remap=NO_REMAP, chunk_size=8
  )
  alone = compiled(attention.dense)(
    q[:, 5:], k[:, 5:], v[:, 5:], pos[:, 5:], seg[:, 5:], scheme=scheme, remap=NO_REMAP
  )
  np.testing.assert_allclose(packed[:, 5:], alone, atol=1e-5, rtol=1e-5)


def test_other_schemes_compile_the_same_dense_program():
  """The hook is None for other schemes: no contextual work enters their programs."""
  q, k, v, pos, seg = _inputs(t=8)

  def hlo(scheme):
    fn = jax.jit(lambda *a: attention.dense(*a, scheme=scheme, remap=NO_REMAP))
    return fn.lower(q, k, v, pos, seg).as_text()

  rope = positions.build(positions.default_config("rope"), DIMS, rngs=nnx.Rngs(0))
  assert "cumsum" in hlo(_scheme()) and "cumsum" not in hlo(rope)
  assert positions.base.is_contextual("cope") and not positions.base.is_contextual("rope")


def test_bad_npos_max_names_the_field():
  cfg = positions.default_config("cope")
  cfg.npos_max = 1
  with pytest.raises(
    ValueError, match=r"^model\.position\.npos_max=1 is not allowed; allowed: >= 2 \(None: "
  ):
    positions.validate(cfg, DIMS)


@pytest.mark.parametrize("remap", ["rerope", "self_extend", "compress", "streaming"])
def test_remaps_are_refused_naming_the_field(remap):
  """CoPE reads no position ids: a remap would change nothing (or only ReRoPE's q scale)."""
  config = tiny_config("cope")
  config.model.vocab_size = 259
  config.model.remap = remaps.default_config(remap)
  assert not remaps.accepts(remap, "cope") and remaps.accepts("none", "cope")
  message = f"model.remap.name='{remap}' moves position ids, but model.position.name='cope'"
  with pytest.raises(ValueError, match="^" + re.escape(message)):
    Decoder(config.model, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_model_past_the_training_length_chunked_equals_dense(dtype):
  """A 2-layer model at 2.5x L (positions clamp at L): the kernels agree; bfloat16 is finite."""
  config = tiny_config("cope")
  cfg = config.model
  cfg.vocab_size, cfg.dtype, cfg.attention.chunk_size = 259, dtype, 16
  model = Decoder(cfg, rngs=nnx.Rngs(0))
  for layer in range(cfg.num_layers):  # per-layer tables (the default): each its own values
    table = model.position.for_layer(layer).embedding_NxE
    table[...] = jax.random.normal(jax.random.key(1 + layer), table[...].shape)
  t = 80
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 259, (1, t)))
  pos, seg = jnp.arange(t)[None], jnp.ones((1, t), jnp.int32)
  run = nnx.jit(lambda m, kernel: m(tokens, pos, seg, kernel=kernel), static_argnums=1)
  dense, chunked = np.asarray(run(model, "dense")), np.asarray(run(model, "chunked"))
  assert np.isfinite(dense).all() and np.isfinite(chunked).all()
  if dtype == "float32":
    np.testing.assert_allclose(chunked, dense, atol=1e-4, rtol=1e-4)


def _cope_model(shared, tables):
  """A tiny 2-layer CoPE decoder whose block i reads `tables[i]` (shared: tables[0] only)."""
  config = tiny_config("cope")
  config.model.vocab_size = 259
  config.model.position.shared = shared
  model = Decoder(config.model, rngs=nnx.Rngs(0))
  for layer in range(1 if shared else config.model.num_layers):
    model.position.for_layer(layer).embedding_NxE[...] = tables[layer]
  return model


def test_one_table_per_layer_by_default_and_shared_as_an_option():
  """The paper's default: each layer reads its own table (its --cope-shared: one for all).
  With equal tables the two layouts give the same logits; a different table in block 1 alone
  changes them, and each table gets its own gradient."""
  assert positions.default_config("cope").shared is False
  shape = (tiny_config().model.max_len + 1, tiny_config().model.head_dim)
  x, y = (jax.random.normal(jax.random.key(k), shape) for k in (1, 2))
  t = 24
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 259, (2, t)))
  pos, seg = jnp.broadcast_to(jnp.arange(t), (2, t)), jnp.ones((2, t), jnp.int32)

  @nnx.jit  # eager, every op of the model compiles its own program
  def forward(model):
    return model(tokens, pos, seg)

  def logits(model):
    return np.asarray(forward(model))

  per_layer = _cope_model(False, [x, x])
  assert per_layer.position.for_layer(1) is not per_layer.position.for_layer(0)
  shared = _cope_model(True, [x])
  assert shared.position.for_layer(1) is shared.position and not len(shared.position.others)
  np.testing.assert_allclose(logits(per_layer), logits(shared), atol=1e-5, rtol=1e-5)
  assert np.abs(logits(_cope_model(False, [x, y])) - logits(shared)).max() > 1e-3

  def loss(model):
    return model(tokens, pos, seg).mean()

  grads = nnx.jit(nnx.grad(loss))(_cope_model(False, [x, y])).position
  g0, g1 = np.asarray(grads.embedding_NxE[...]), np.asarray(grads.others[0].embedding_NxE[...])
  assert np.abs(g0).max() > 0 and np.abs(g1).max() > 0 and np.abs(g0 - g1).max() > 0
