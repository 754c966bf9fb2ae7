"""Dense and chunked kernels agree; masks keep documents apart; remap branches merge."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.model import attention, kernels, patterns, positions
from lcx.model.positions import remaps
from tests.helpers import compiled, schemes_with

_dense, _chunked = compiled(attention.dense), compiled(attention.chunked)


def _inputs(b=2, t=40, h=4, g=2, k=8, seed=0):
  rng = np.random.default_rng(seed)
  q, kk, v = (jnp.asarray(rng.normal(size=(b, t, n, k)), jnp.float32) for n in (h, g, g))
  pos = jnp.broadcast_to(jnp.arange(t), (b, t))
  seg = jnp.ones((b, t), jnp.int32)
  return q, kk, v, pos, seg


def _scheme(name, head_dim=8, heads=4):
  return positions.build(
    positions.default_config(name), positions.Dims(32, heads, head_dim, 16), rngs=nnx.Rngs(0)
  )


NO_REMAP = remaps.build(remaps.default_config("none"), positions.Dims(32, 4, 8, 16))


def _dynamic_rope():
  cfg = positions.default_config("rope")
  cfg.scaling.rope_type = "dynamic"
  cfg.scaling.factor = 2.0
  return positions.build(cfg, positions.Dims(32, 4, 8, 16), rngs=nnx.Rngs(0))


def _remap(name, **fields):
  cfg = remaps.default_config(name)
  cfg.update(fields)
  return remaps.build(cfg, positions.Dims(32, 4, 8, 16))


@pytest.mark.parametrize("name", ["nope", *schemes_with("rotate", "bias", "contextual"), "dynamic"])
@pytest.mark.parametrize("remap", ["none", "rerope", "self_extend"])
def test_chunked_equals_dense(name, remap):
  """T=40 is not a multiple of the chunk: padding must not change dynamic scaling either."""
  q, k, v, pos, seg = _inputs()
  scheme = _dynamic_rope() if name == "dynamic" else _scheme(name)
  remap = {
    "none": NO_REMAP,
    "rerope": _remap("rerope", window=6),
    "self_extend": _remap("self_extend", window=8, group=4),
  }[remap]
  dense = _dense(q, k, v, pos, seg, scheme=scheme, remap=remap)
  chunked = _chunked(q, k, v, pos, seg, scheme=scheme, remap=remap, chunk_size=16)
  np.testing.assert_allclose(chunked, dense, atol=3e-5, rtol=3e-5)


def test_chunked_equals_dense_with_pattern_and_two_branches():
  q, k, v, pos, seg = _inputs(t=33)

  class Clip:  # ReRoPE-like: exact within 4, else relative distance 4
    def branches(self, q_pos, k_pos):
      near = remaps.Branch(q_pos, k_pos, lambda qp, kp: qp - kp < 4)
      far = remaps.Branch(jnp.full_like(q_pos, 4), jnp.zeros_like(k_pos), None)
      return [near, far]

  def window(qi, ki):
    return qi - ki < 9

  scheme = _scheme("rope")
  dense = _dense(q, k, v, pos, seg, scheme=scheme, remap=Clip(), pattern=window)
  chunked = _chunked(q, k, v, pos, seg, scheme=scheme, remap=Clip(), pattern=window, chunk_size=8)
  np.testing.assert_allclose(chunked, dense, atol=2e-5, rtol=2e-5)
  plain = _dense(q, k, v, pos, seg, scheme=scheme, remap=NO_REMAP, pattern=window)
  assert not np.allclose(plain, dense, atol=1e-3)  # the far branch really changed something


def _packed(lengths_per_row, t):
  """pos and seg of rows packing documents of these lengths, the rest padding (segment 0)."""
  pos, seg = (
    np.zeros((len(lengths_per_row), t), np.int32),
    np.zeros((len(lengths_per_row), t), np.int32),
  )
  for b, lengths in enumerate(lengths_per_row):
    start = 0
    for s, n in enumerate(lengths, 1):
      pos[b, start : start + n], seg[b, start : start + n] = np.arange(n), s
      start += n
    pos[b, start:] = np.arange(start, t)
  return jnp.asarray(pos), jnp.asarray(seg)


@pytest.mark.parametrize("name", ["nope", "rope", "alibi", "cope", "window"])
def test_chunked_equals_dense_on_packed_documents(name):
  """Chunked (the evaluation kernel) skips key blocks before a query block's first document and
  unmasks blocks inside one document: documents across block edges, on them, within one block,
  and padding (segment 0, whose outputs nobody reads)."""
  t = 70
  q, k, v, _, _ = _inputs(b=3, t=t)
  pos, seg = _packed([[5, 40, 20], [70], [16, 16, 30, 8]], t)
  kw = dict(
    scheme=_scheme("rope" if name == "window" else name),
    remap=NO_REMAP,
    pattern=(lambda qi, ki: qi - ki < 20) if name == "window" else None,
  )
  real = np.asarray(seg > 0)
  np.testing.assert_allclose(
    np.asarray(_run_kernel("chunked", q, k, v, pos, seg, **kw))[real],
    np.asarray(_run_kernel("dense", q, k, v, pos, seg, **kw))[real],
    atol=3e-5,
    rtol=3e-5,
  )


def test_segments_never_attend_across_documents():
  q, k, v, pos, seg = _inputs(b=1, t=20)
  seg = jnp.asarray([[1] * 12 + [2] * 8])
  scheme = _scheme("rope")
  out = _dense(q, k, v, pos, seg, scheme=scheme, remap=NO_REMAP)
  v2 = v.at[:, :12].set(100.0)  # change only document 1's values
  out2 = _dense(q, k, v2, pos, seg, scheme=scheme, remap=NO_REMAP)
  np.testing.assert_allclose(out[:, 12:], out2[:, 12:], atol=1e-6)
  assert not np.allclose(out[:, :12], out2[:, :12])


def test_causal_future_does_not_leak():
  q, k, v, pos, seg = _inputs(b=1, t=16)
  scheme = _scheme("nope")
  out = _dense(q, k, v, pos, seg, scheme=scheme, remap=NO_REMAP)
  out2 = _dense(
    q, k.at[:, 10:].set(5.0), v.at[:, 10:].set(-3.0), pos, seg, scheme=scheme, remap=NO_REMAP
  )
  np.testing.assert_allclose(out[:, :10], out2[:, :10], atol=1e-6)


def test_unknown_kernel_names_the_field():
  with pytest.raises(ValueError, match=r"^kernel='flash' is not allowed; allowed: chunked, dense$"):
    kernels.get_kernel("flash", 64)


def test_document_index_restarts_at_each_segment():
  seg = jnp.asarray([[1, 1, 1, 2, 2, 3, 0, 0], [5, 5, 5, 5, 5, 5, 5, 5]])
  np.testing.assert_array_equal(
    attention.document_index(seg), [[0, 1, 2, 0, 1, 0, 0, 1], list(range(8))]
  )


@pytest.mark.parametrize(
  "name, fields",
  [
    ("block_global", {"block": 4}),
    ("sliding_window", {"window": 3}),
    ("strided", {"window": 2, "stride": 3}),
  ],
)
@pytest.mark.parametrize("kernel", ["dense", "chunked"])
def test_pattern_sees_a_packed_document_as_if_alone(name, fields, kernel):
  """A document starting mid-row keeps its own first block (block_global's global block)."""
  cfg = patterns.default_config(name)
  cfg.update(fields)
  pattern = patterns.build(cfg)
  q, k, v, _, _ = _inputs(b=1, t=21)
  pos = jnp.asarray([list(range(5)) + list(range(16))])
  seg = jnp.asarray([[1] * 5 + [2] * 16])
  scheme = _scheme("rope")

  def run(*a):
    return (
      _dense(*a, scheme=scheme, remap=NO_REMAP, pattern=pattern)
      if kernel == "dense"
      else _chunked(*a, scheme=scheme, remap=NO_REMAP, pattern=pattern, chunk_size=8)
    )

  packed = run(q, k, v, pos, seg)
  alone = run(q[:, 5:], k[:, 5:], v[:, 5:], pos[:, 5:], seg[:, 5:])
  np.testing.assert_allclose(packed[:, 5:], alone, atol=1e-5, rtol=1e-5)


def test_plan_holds_each_bias_once_for_all_layers():
  """prepare_dense evaluates the learned bias once; attend reads it from the plan."""
  q, k, v, pos, seg = _inputs()
  scheme = _scheme("fire")
  calls = []
  bias = scheme.bias
  scheme.bias = lambda *a: calls.append(1) or bias(*a)
  plan = attention.prepare_dense(pos, seg, scheme=scheme, remap=NO_REMAP)
  for _ in range(3):
    attention.attend_dense(q, k, jnp.swapaxes(v, 1, 2), plan, scheme=scheme)
  assert len(calls) == 1


def test_logits_are_the_scaled_dot_product_plus_the_bias_where_allowed():
  """attention.logits, the one assembly the kernels and lcx.tools.analysis share, against numpy:
  q.k / sqrt(E) with query head h reading kv head h // P, plus ALiBi's -slope_h (i - j), where
  the key is at or before the query in its document; NEG_INF elsewhere (two packed documents)."""
  q, k, _, pos, _ = _inputs(t=12)
  seg = jnp.asarray([[1] * 5 + [2] * 7, [1] * 12])
  pos = jnp.asarray([list(range(5)) + list(range(7)), list(range(12))])
  scheme = _scheme("alibi")
  plan = attention.prepare_dense(pos, seg, scheme=scheme, remap=NO_REMAP)
  got_BxHxTxT = np.asarray(attention.logits(q, k, plan, scheme))
  k_BxTxHxE = np.repeat(np.asarray(k), 2, axis=2)  # P = 2 query heads per kv head
  dot_BxHxTxT = np.einsum("bqhe,bshe->bhqs", np.asarray(q), k_BxTxHxE) / np.sqrt(8)
  distance_BxTxT = np.asarray(pos)[:, :, None] - np.asarray(pos)[:, None, :]
  slopes_H = np.asarray(scheme.slopes_H)
  want = dot_BxHxTxT - slopes_H[None, :, None, None] * distance_BxTxT[:, None]
  idx = np.arange(12)
  seg_np = np.asarray(seg)
  allowed_BxTxT = (idx[:, None] >= idx[None, :]) & (seg_np[:, :, None] == seg_np[:, None, :])
  allowed = np.broadcast_to(allowed_BxTxT[:, None], want.shape)
  np.testing.assert_allclose(got_BxHxTxT[allowed], want[allowed], rtol=1e-5, atol=1e-5)
  assert np.all(got_BxHxTxT[~allowed] == attention.NEG_INF)


def test_document_length_is_each_packed_documents_own_length():
  # Row 0: documents of 3 and 2 tokens then 2 padding tokens (segment 0, positions run on);
  # row 1: one document cut by packing, positions from 0, then a document of 1.
  seg = jnp.asarray([[1, 1, 1, 2, 2, 0, 0], [1, 1, 1, 1, 1, 1, 2]])
  pos = jnp.asarray([[0, 1, 2, 0, 1, 5, 6], [0, 1, 2, 3, 4, 5, 0]])
  np.testing.assert_array_equal(
    attention.document_length(pos, seg), [[3, 3, 3, 2, 2, 7, 7], [6, 6, 6, 6, 6, 6, 1]]
  )


def _length_scheme(rope_type):
  """A length-dependent scaling with L = 16 (Dims.max_len): 12 tokens lie within it, 40 beyond."""
  cfg = positions.default_config("rope")
  cfg.scaling.rope_type = rope_type
  cfg.scaling.factor = 4.0
  if rope_type == "longrope":
    cfg.scaling.short_factor = (1.0, 1.5, 2.0, 3.0)
    cfg.scaling.long_factor = (1.0, 2.0, 4.0, 8.0)
  return positions.build(cfg, positions.Dims(32, 4, 8, 16), rngs=nnx.Rngs(0))


def _run(kernel, scheme):
  if kernel == "dense":
    return lambda *a: _dense(*a, scheme=scheme, remap=NO_REMAP)
  return lambda *a: _chunked(*a, scheme=scheme, remap=NO_REMAP, chunk_size=16)


@pytest.mark.parametrize("rope_type", ["dynamic", "longrope"])
@pytest.mark.parametrize("kernel", ["dense", "chunked"])
def test_right_padding_leaves_length_dependent_scaling_unchanged(rope_type, kernel):
  """12 tokens right-padded to 40 (segment 0) give what they give unpadded: the scaling reads
  the sequence's own length (12 <= L), not the row's (40 > L). Reading the row's length, as
  before per-token lengths, changed the outputs here by up to 0.29 (dynamic) and 0.16 (longrope)."""
  run = _run(kernel, _length_scheme(rope_type))
  q, k, v, pos, seg = _inputs(b=1, t=40)
  alone = run(q[:, :12], k[:, :12], v[:, :12], pos[:, :12], seg[:, :12])
  padded = run(q, k, v, pos, jnp.asarray([[1] * 12 + [0] * 28]))
  np.testing.assert_allclose(padded[:, :12], alone, atol=1e-5, rtol=1e-5)
  longer = run(q, k, v, pos, seg)  # the same tokens as the start of a 40-token sequence
  assert np.abs(longer[:, :12] - alone).max() > 0.1  # the length really matters here


@pytest.mark.parametrize("rope_type", ["dynamic", "longrope"])
@pytest.mark.parametrize("kernel", ["dense", "chunked"])
def test_packed_documents_each_get_their_own_length_scaling(rope_type, kernel):
  """A row packing a 24-token document (> L = 16), a 10-token one (<= L) and 6 padding tokens:
  each document's outputs equal those it gets alone."""
  run = _run(kernel, _length_scheme(rope_type))
  q, k, v, _, _ = _inputs(b=1, t=40)
  pos = jnp.asarray([list(range(24)) + list(range(10)) + list(range(34, 40))])
  seg = jnp.asarray([[1] * 24 + [2] * 10 + [0] * 6])
  packed = run(q, k, v, pos, seg)
  for start, end in ((0, 24), (24, 34)):
    alone = run(
      q[:, start:end], k[:, start:end], v[:, start:end], pos[:, start:end], seg[:, start:end]
    )
    np.testing.assert_allclose(packed[:, start:end], alone, atol=1e-5, rtol=1e-5)


def _run_kernel(kernel, *args, **kwargs):
  if kernel == "dense":
    return _dense(*args, **kwargs)
  return _chunked(*args, **kwargs, chunk_size=16)


@pytest.mark.parametrize("name", schemes_with("bias"))
def test_every_bias_is_finite_on_masked_keys_too(name):
  """The dense kernel masks by adding NEG_INF, which leaves a finite logit at NEG_INF but not a
  NaN or an infinity: every bias must be finite for keys after the query and in other
  documents as well."""
  pos = jnp.broadcast_to(jnp.arange(40), (2, 40))
  bias = _scheme(name).bias(pos, jnp.broadcast_to(jnp.arange(40)[::-1], (2, 40)))
  assert np.isfinite(np.asarray(bias)).all()


@pytest.mark.parametrize("kernel", ["dense", "chunked"])
def test_a_very_negative_sink_is_no_sink(kernel):
  q, k, v, pos, seg = _inputs()
  kw = dict(scheme=_scheme("rope"), remap=NO_REMAP)
  plain = _run_kernel(kernel, q, k, v, pos, seg, **kw)
  sunk = _run_kernel(kernel, q, k, v, pos, seg, sink_H=jnp.full((4,), -1e4), **kw)
  np.testing.assert_allclose(sunk, plain, atol=1e-6)
  assert (
    np.abs(_run_kernel(kernel, q, k, v, pos, seg, sink_H=jnp.zeros(4), **kw) - plain).max() > 1e-2
  )


@pytest.mark.parametrize("kernel", ["dense", "chunked"])
def test_sink_weights_are_the_closed_form_and_sum_below_one(kernel):
  """v = one-hot of the key index, so the outputs are the weights: exp(l_s) / (sum_j exp(l_j)
  + exp(sink_h)) over the causal keys j, with l = q.k / sqrt(E) (NoPE)."""
  t, e = 6, 8
  q, k, _, pos, seg = _inputs(b=1, t=t, h=2, g=1, k=e)
  v = jnp.broadcast_to(jnp.eye(t, e)[None, :, None, :], (1, t, 1, e))
  sink_H = jnp.asarray([0.5, -1.0])
  got = np.asarray(
    _run_kernel(
      kernel, q, k, v, pos, seg, scheme=_scheme("nope", heads=2), remap=NO_REMAP, sink_H=sink_H
    )
  )[0]  # T x H x E
  logits = np.einsum("qhe,se->hqs", np.asarray(q[0]), np.asarray(k[0, :, 0])) / np.sqrt(e)
  causal = np.tril(np.ones((t, t), bool))
  num = np.where(causal, np.exp(logits), 0.0)
  want = num / (num.sum(-1, keepdims=True) + np.exp(np.asarray(sink_H))[:, None, None])
  np.testing.assert_allclose(np.moveaxis(got[:, :, :t], 1, 0), want, atol=1e-5)
  assert (got.sum(-1) < 1 - 1e-3).all()


@pytest.mark.parametrize("sink", [False, True])
def test_softmax_gradients_equal_autodiff_of_a_plain_softmax(sink):
  """The softmax's hand-written backward equals autodiff of jax.nn.softmax over the logits
  (with a sink: and the sink as one more key, its own weight dropped), for the logits and the
  per-head sink, with a masked key (NEG_INF) in each row and a fully masked row."""
  logits = jax.random.normal(jax.random.key(0), (2, 2, 3, 5, 7)).at[..., 6].set(attention.NEG_INF)
  logits = logits.at[:, :, :, 0].set(attention.NEG_INF)
  sink_H = jnp.asarray([0.3, -0.2, 1.5, 0.0, -2.0, 0.7])
  c = jax.random.normal(jax.random.key(1), logits.shape)

  def reference(logits, sink_H):
    if not sink:
      return jax.nn.softmax(logits, axis=-1)
    sink_col = jnp.broadcast_to(sink_H.reshape(1, 2, 3, 1, 1), (*logits.shape[:-1], 1))
    return jax.nn.softmax(jnp.concatenate([logits, sink_col], -1), axis=-1)[..., :-1]

  def ours(logits, sink_H):
    return attention.softmax(logits, sink_H if sink else None)

  def grads(fn):
    return jax.grad(lambda lg, sk: jnp.sum(fn(lg, sk) * c.reshape(lg.shape)), argnums=(0, 1))

  np.testing.assert_allclose(ours(logits, sink_H), reference(logits, sink_H), rtol=1e-6, atol=1e-7)
  for got, want in zip(jax.jit(grads(ours))(logits, sink_H), grads(reference)(logits, sink_H)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  # the dense kernel's layout, one head axis (B x H x Q x S): the same values and gradients
  want = grads(reference)(logits, sink_H)
  got = jax.jit(grads(ours))(logits.reshape(2, 6, 5, 7), sink_H)
  np.testing.assert_allclose(got[0], want[0].reshape(2, 6, 5, 7), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["rope", "alibi"])
def test_sink_chunked_equals_dense(name):
  q, k, v, pos, seg = _inputs()
  kw = dict(
    scheme=_scheme(name),
    remap=_remap("rerope", window=6),
    sink_H=jnp.asarray([0.3, -0.2, 1.5, 0.0]),
  )
  np.testing.assert_allclose(
    _chunked(q, k, v, pos, seg, chunk_size=16, **kw),
    _dense(q, k, v, pos, seg, **kw),
    atol=3e-5,
    rtol=3e-5,
  )


# --- An input hook's prefix sums (FoX): logit (i, j) gets c_i - c_j. ---


def test_document_cumsum_restarts_at_each_segment():
  """A loop over the tokens, the running sum reset where the segment id changes."""
  rng = np.random.default_rng(3)
  seg = np.asarray([[1, 1, 1, 2, 2, 3, 0, 0], [5, 5, 5, 5, 5, 5, 5, 5]])
  a = rng.normal(size=(2, 8, 3)).astype(np.float32)
  expected = np.zeros_like(a)
  for b in range(2):
    for t in range(8):
      same = t > 0 and seg[b, t] == seg[b, t - 1]
      expected[b, t] = a[b, t] + (expected[b, t - 1] if same else 0.0)
  got = attention.document_cumsum(jnp.asarray(a), jnp.asarray(seg))
  np.testing.assert_allclose(got, expected, atol=1e-6)


class _TableBias(positions.Scheme):
  """A bias read from a B x T x H table of prefix sums c at the positions (here token indices,
  one document per row): c_i - c_j, the prefix hook's bias spelled out as an ordinary bias."""

  def __init__(self, prefix_BxTxH):
    self.prefix_BxHxT = jnp.swapaxes(prefix_BxTxH, 1, 2)

  def bias(self, q_pos_BxQ, k_pos_BxS):
    def at(pos):
      return jnp.take_along_axis(self.prefix_BxHxT, pos[:, None].astype(jnp.int32), axis=2)

    return at(q_pos_BxQ)[..., :, None] - at(k_pos_BxS)[..., None, :]


def _prefix(b, t, h=4, seed=5):
  """Prefix sums of random log-sigmoids (FoX's log forget gates): c decreasing, as FoX's."""
  a = jax.nn.log_sigmoid(jnp.asarray(np.random.default_rng(seed).normal(size=(b, t, h)) + 1.0))
  return a.astype(jnp.float32)


def test_prefix_sums_bias_the_logits_by_their_difference():
  q, k, v, pos, seg = _inputs(t=24)
  prefix = attention.document_cumsum(_prefix(2, 24), seg)
  nope = _scheme("nope")
  got = _dense(q, k, v, pos, seg, scheme=nope, remap=NO_REMAP, prefix_BxSxH=prefix)
  expected = _dense(q, k, v, pos, seg, scheme=_TableBias(prefix), remap=NO_REMAP)
  np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)
  plain = _dense(q, k, v, pos, seg, scheme=nope, remap=NO_REMAP)
  assert not np.allclose(got, plain, atol=1e-3)  # the bias matters


@pytest.mark.parametrize("chunk", [5, 16, 64])
@pytest.mark.parametrize("name", ["nope", "alibi"])
def test_prefix_sums_chunked_equal_dense_on_packed_documents(chunk, name):
  """Block by block (c of a query block minus c of a key block) as over the whole T x T: blocks
  not dividing T = 70, documents across block edges, padding; beside another scheme's bias."""
  t = 70
  q, k, v, _, _ = _inputs(b=3, t=t)
  pos, seg = _packed([[5, 40, 20], [70], [16, 16, 30, 8]], t)
  prefix = attention.document_cumsum(_prefix(3, t), seg)
  kw = dict(scheme=_scheme(name), remap=NO_REMAP, prefix_BxSxH=prefix)
  real = np.asarray(seg > 0)
  dense = _dense(q, k, v, pos, seg, **kw)
  chunked = _chunked(q, k, v, pos, seg, chunk_size=chunk, **kw)
  np.testing.assert_allclose(np.asarray(chunked)[real], np.asarray(dense)[real], atol=3e-5)
