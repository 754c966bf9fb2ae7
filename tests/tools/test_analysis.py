"""Analysis of attention and rotary bands on cases with known answers, every scheme and remap."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.config import defaults
from lcx.model import attention, positions
from lcx.model.decoder import Decoder
from lcx.model.positions import remaps
from lcx.run import checkpoint
from lcx.tools import analysis
from tests import pairwise
from tests.helpers import hooks_of

VOCAB = 64


def _model(pos="rope", remap="none", *, max_len=16, layers=1, **position):
  config = defaults.get_config(f"pos={pos},size=tiny")
  config.model.vocab_size = VOCAB
  config.model.num_layers = layers
  del config.model["max_len"]  # a reference to data.seq_len
  config.model.max_len = max_len
  config.model.remap = remaps.default_config(remap)
  if remap in ("self_extend", "rerope"):
    config.model.remap.window = 8
  if remap == "self_extend":
    config.model.remap.group = 2
  config.model.position.update(position)
  return analysis.Model(config, Decoder(config.model, rngs=nnx.Rngs(0)))


def _tokens(b=2, t=40, seed=0):
  return np.random.default_rng(seed).integers(0, VOCAB, (b, t))


def _hand_maps(probs_NxBxHxQxT, train_len=4):
  """Maps of one causal document per row, every row a query, from given probabilities."""
  n, b, h, t, _ = probs_NxBxHxQxT.shape
  allowed = np.broadcast_to(np.tril(np.ones((t, t), bool)), (b, t, t))
  idx = np.broadcast_to(np.arange(t), (b, t))
  logits = np.where(allowed[None, :, None], np.log(np.maximum(probs_NxBxHxQxT, 1e-30)), np.nan)
  return analysis.Maps(
    probs_NxBxHxQxT,
    logits,
    allowed,
    np.arange(t),
    idx,
    np.ones((b, t), np.int32),
    idx,
    tuple(range(n)),
    train_len,
  )


def _pattern(kind, t):
  """T x T attention of one head: previous token, first token, uniform, itself, 3 back."""
  p = np.zeros((t, t))
  for i in range(t):
    if kind == "previous":
      p[i, max(i - 1, 0)] = 1
    elif kind == "first":
      p[i, 0] = 1
    elif kind == "uniform":
      p[i, : i + 1] = 1 / (i + 1)
    elif kind == "self":
      p[i, i] = 1
    elif kind == "three_back":
      p[i, i - 3 if i >= 3 else i] = 1
  return p


KINDS = ("previous", "first", "uniform", "self", "three_back")


def test_hand_built_pattern_stats_and_labels():
  t = 20
  probs = np.stack([_pattern(k, t) for k in KINDS])[None, None]  # 1 x 1 x 5 x T x T
  maps = _hand_maps(probs)
  stats = analysis.query_stats(maps)
  np.testing.assert_allclose(stats["entropy"][0, 0, 2], np.log(np.arange(1, t + 1)), atol=1e-12)
  np.testing.assert_allclose(stats["normalized_entropy"][0, 0, 2, 1:], 1.0, atol=1e-12)
  assert np.isnan(stats["normalized_entropy"][0, 0, 2, 0])  # one key: undefined
  np.testing.assert_array_equal(stats["entropy"][0, 0, [0, 1, 3, 4]], 0.0)
  np.testing.assert_array_equal(stats["previous_token"][0, 0, 0, 1:], 1.0)
  np.testing.assert_array_equal(stats["first_token"][0, 0, 1], 1.0)
  np.testing.assert_array_equal(stats["self"][0, 0, 3], 1.0)
  np.testing.assert_allclose(stats["first_token"][0, 0, 2], 1 / np.arange(1, t + 1))
  offsets = analysis.offset_mass(maps, 4)
  np.testing.assert_array_equal(offsets[0, 0, 4, 3:, 3], 1.0)
  np.testing.assert_array_equal(offsets[0, 0, 4, 3:, [0, 1, 2, 4]], 0.0)
  positions_P, first = analysis.by_position(maps, stats["first_token"])
  np.testing.assert_array_equal(positions_P, np.arange(t))
  np.testing.assert_allclose(first[0, 2], 1 / np.arange(1, t + 1))
  starts, bucketed = analysis.by_position(maps, stats["first_token"], edges=[0, 2, 8, 100])
  np.testing.assert_array_equal(starts, [0, 2, 8])
  np.testing.assert_allclose(
    bucketed[0, 2],
    [np.mean(1 / np.arange(1, 3)), np.mean(1 / np.arange(3, 9)), np.mean(1 / np.arange(9, t + 1))],
  )
  heads = analysis.classify_heads(maps)
  assert list(heads.labels[0]) == ["previous-token", "sink", "content", "positional", "positional"]
  assert heads.offset[0, 3] == 0 and heads.offset[0, 4] == 3
  np.testing.assert_allclose(heads.previous_token[0, 0], 1.0)
  table = analysis.head_table(heads)
  assert len(table.splitlines()) == 2 + 5 and "previous-token" in table


def test_classify_needs_queries_with_context():
  maps = _hand_maps(np.stack([_pattern("uniform", 5)])[None, None])
  with pytest.raises(ValueError, match="min_context=8"):
    analysis.classify_heads(maps)
  assert analysis.classify_heads(maps, min_context=2).labels[0, 0] == "content"


def test_entropy_of_uniform_attention_is_log_n():
  for n in (1, 2, 7, 1000):
    assert analysis.entropy(np.full(n, 1 / n)) == pytest.approx(math.log(n))
  assert analysis.entropy(np.array([1.0, 0.0, 0.0])) == 0.0


def test_logit_stats_split_at_the_training_length():
  t, length = 12, 4
  maps = _hand_maps(np.stack([_pattern("uniform", t)])[None, None], train_len=length)
  dist = np.arange(t)[:, None] - np.arange(t)[None]
  logits = np.where(dist < length, 1.0, 3.0)
  maps = analysis.Maps(
    maps.probs,
    np.where(maps.allowed[None, :, None], logits, np.nan),
    maps.allowed,
    maps.rows,
    maps.pos,
    maps.seg,
    maps.doc,
    maps.layers,
    length,
  )
  stats = analysis.logit_stats(maps)
  assert stats["within_mean"][0, 0] == 1.0 and stats["past_mean"][0, 0] == 3.0
  assert stats["within_std"][0, 0] == 0.0 and stats["past_max"][0, 0] == 3.0
  assert stats["past_count"][0, 0] == sum(max(0, i - length + 1) for i in range(t))
  assert stats["row_max_within"][0, 0] == 1.0 and stats["row_max_past"][0, 0] == 3.0
  within, past = analysis.logit_samples(maps, 0, 0)
  assert set(within) == {1.0} and set(past) == {3.0} and len(past) == stats["past_count"][0, 0]


def _previous_token_t5():
  """T5 whose bucket for distance 1 holds +100 in every head and whose q, k are zero: every
  query attends (up to e^-100) to the token before it, at any length."""
  model = _model("t5", layers=2)
  for block in model.decoder.blocks:
    block.attn.wq[...] = jnp.zeros_like(block.attn.wq[...])
    block.attn.wk[...] = jnp.zeros_like(block.attn.wk[...])
  table = np.zeros(model.decoder.position.table_NxH[...].shape, np.float32)
  table[int(positions.t5_bucket(-1))] = 100.0
  model.decoder.position.table_NxH[...] = jnp.asarray(table)
  return model


@pytest.mark.parametrize("rows", [None, [0, 1, 9, 37, 39]])
def test_previous_token_model_is_classified_previous_token(rows):
  model = _previous_token_t5()
  maps = analysis.attention_maps(model, _tokens(t=40), rows=rows)  # past L = 16
  stats = analysis.query_stats(maps)
  np.testing.assert_allclose(stats["previous_token"][..., 1:], 1.0, atol=1e-6)
  heads = analysis.classify_heads(maps)
  assert (heads.labels == "previous-token").all()
  np.testing.assert_allclose(heads.previous_token, 1.0, atol=1e-6)


def test_pair_norms_square_sum_to_the_full_norm():
  x = np.random.default_rng(0).normal(size=(3, 5, 12))
  full = np.sum(x**2, -1)
  for pairing in ("rotate_half", "interleaved"):
    for rotary_dim in (None, 8, 2):
      pairs, rest = analysis.pair_norms(x, pairing, rotary_dim)
      assert pairs.shape == (3, 5, (rotary_dim or 12) // 2)
      np.testing.assert_allclose(np.sum(pairs**2, -1) + rest**2, full, rtol=1e-12)
  v = np.array([3.0, 4.0, 0.0, 0.0])
  np.testing.assert_allclose(analysis.pair_norms(v, "interleaved")[0], [5, 0])
  np.testing.assert_allclose(analysis.pair_norms(v, "rotate_half")[0], [3, 4])
  with pytest.raises(ValueError, match="pairing='other'"):
    analysis.pair_norms(v, "other")


@pytest.mark.parametrize("position", [{}, {"pairing": "interleaved", "rotary_dim": 8}])
def test_frequency_bands_of_a_model(position):
  model = _model("rope", layers=2, **position)
  tokens = _tokens()
  values = analysis.qk(model, tokens)
  bands = analysis.frequency_bands(model, tokens, qk_values=values)
  r = (position.get("rotary_dim") or 16) // 2
  assert bands.q.shape == (2, 4, r) and bands.k.shape == (2, 4, r)

  def mean_sq(x):
    return np.mean(np.sum(x.astype(np.float64) ** 2, -1), axis=(1, 2))

  np.testing.assert_allclose((bands.q**2).sum(-1) + bands.q_rest**2, mean_sq(values.q), rtol=1e-5)
  np.testing.assert_allclose((bands.k**2).sum(-1) + bands.k_rest**2, mean_sq(values.k), rtol=1e-5)
  np.testing.assert_allclose(bands.wavelength, 2 * np.pi / bands.inv_freq)
  q_fast, _ = bands.fraction_below(10**9)
  np.testing.assert_allclose(
    q_fast, (bands.q**2).sum(-1) / ((bands.q**2).sum(-1) + bands.q_rest**2), rtol=1e-12
  )


@pytest.mark.parametrize(
  "pos,position",
  [
    ("rope", {}),
    ("p_rope", {"p": 0.5}),
    ("xpos", {}),
    ("rope", {"scaling": {"rope_type": "yarn", "factor": 4.0}}),
  ],
)
def test_rotary_frequencies_are_the_ones_the_scheme_rotates_by(pos, position):
  model = _model(pos, **position)
  scheme = model.decoder.position
  angle, _ = scheme.angles(jnp.ones((1, 1), jnp.int32), 16)
  np.testing.assert_allclose(analysis.rotary_frequencies(model), np.asarray(angle)[0, 0], rtol=1e-6)
  if pos == "p_rope":
    assert np.isinf(analysis.wavelengths(analysis.rotary_frequencies(model))[4:]).all()
  assert analysis.rotary_frequencies(_model("alibi")) is None


def test_qk_records_the_models_own_forward_in_both_kernels():
  model = _model("rope", "self_extend", layers=2)
  tokens = _tokens()
  dense, logits = analysis.qk(model, tokens, with_logits=True)
  t = tokens.shape[1]
  expected = model.decoder(
    jnp.asarray(tokens),
    jnp.broadcast_to(jnp.arange(t), tokens.shape),
    jnp.ones(tokens.shape, jnp.int32),
  )
  np.testing.assert_allclose(logits, expected, atol=1e-5, rtol=1e-5)
  model.config.eval.chunked_from = 16  # the chunked kernel from 16 tokens on
  chunked = analysis.qk(model, tokens)
  np.testing.assert_allclose(chunked.q, dense.q, atol=1e-4, rtol=1e-4)
  np.testing.assert_allclose(chunked.k, dense.k, atol=1e-4, rtol=1e-4)


# The maps are the model's own logits (attention.logits), which the generate matrix checks
# against the full forward; here each scheme, each remap, and each remap on each kind of scheme
# (the hooks it overrides: how a remap reaches the logits) is enough: 27 of the 72 valid pairs.
FACTORS = (sorted(positions.SCHEMES), sorted(remaps.REMAPS))


def _accepted(case) -> bool:
  return remaps.accepts(case[1], case[0])


VALID = pairwise.valid_product(FACTORS, _accepted)
COVER = pairwise.pairwise(FACTORS, _accepted, kind=lambda case: (hooks_of(case[0]), case[1]))


def test_a_refused_scheme_and_remap_fail_to_build():
  """Relative-distance remaps on absolute embeddings, and every remap but none on CoPE and
  PaTH, are refused when the model is built."""
  refused = pairwise.valid_product(FACTORS, lambda case: not _accepted(case))
  assert ("learned", "rerope") in refused and ("cope", "streaming") in refused
  for scheme, remap in refused:
    with pytest.raises(ValueError, match=f"model.remap.name='{remap}'.*'{scheme}'"):
      _model(scheme, remap)


@pytest.mark.parametrize("scheme,remap", COVER)
def test_every_scheme_and_remap_past_the_training_length(scheme, remap):
  """Probabilities are finite, sum to 1 over allowed keys and are 0 elsewhere, at 2.5x L, with
  two documents in one row; the row path gives the dense path's rows."""
  position = {"max_len_policy": "clamp"} if scheme == "learned" else {}
  model = _model(scheme, remap, **position)
  t = 40
  pos = np.concatenate([np.arange(30), np.arange(10)])[None].repeat(2, 0)
  seg = np.array([1] * 30 + [2] * 10)[None].repeat(2, 0)
  maps = analysis.attention_maps(model, _tokens(t=t), pos, seg)
  assert maps.probs.shape == (1, 2, 4, t, t)
  assert np.isfinite(maps.probs).all()
  np.testing.assert_allclose(maps.probs.sum(-1), 1.0, atol=1e-5)
  allowed = maps.allowed[None, :, None]
  assert (np.where(allowed, 0.0, maps.probs) == 0).all()
  assert np.isfinite(np.where(allowed, maps.logits, 0.0)).all()
  assert np.isnan(np.where(allowed, np.nan, maps.logits)).all()
  rows = [0, 15, 16, 29, 30, 39]
  part = analysis.attention_maps(model, _tokens(t=t), pos, seg, rows=rows)
  np.testing.assert_allclose(part.probs, maps.probs[..., rows, :], atol=1e-5)
  np.testing.assert_array_equal(part.allowed, maps.allowed[:, rows])


@pytest.mark.parametrize("dense_max", [1024, 16])
def test_fox_maps_hold_each_blocks_forget_gates(dense_max):
  """Layer 1's logits are q.k / sqrt(E) plus c_i - c_j, c the prefix sums of log f from that
  block's own input (its attention norm of the first block's output), per packed document;
  the row path (T > dense_max) gives the same rows."""
  model = _model("fox", layers=2)
  decoder, t = model.decoder, 40
  tokens = jnp.asarray(_tokens(t=t))
  pos = np.concatenate([np.arange(30), np.arange(10)])[None].repeat(2, 0)
  seg = np.array([1] * 30 + [2] * 10)[None].repeat(2, 0)
  values = analysis.qk(model, tokens, pos, seg)
  maps = analysis.attention_maps(model, tokens, pos, seg, qk_values=values, dense_max=dense_max)
  x = decoder.embed[...][tokens]
  plans = decoder.plans(lambda **kw: attention.prepare_dense(pos, seg, **kw))
  x = decoder.blocks[0](
    x, kernel=decoder.kernel("dense"), q_pos_BxL=pos, **decoder.layer_inputs(0, plans)
  )
  x = decoder.blocks[1].attn_norm(x)
  log_f = decoder.position.for_layer(1).from_input(x, pos, seg)
  c = np.asarray(attention.document_cumsum(log_f, jnp.asarray(seg)))
  np.testing.assert_allclose(values.prefix[1], c, atol=1e-5)
  q, k = values.q[1], values.k[1]
  k = np.repeat(k, q.shape[2] // k.shape[2], axis=2)  # a kv head per group of query heads
  expected = np.einsum("bqhe,bshe->bhqs", q, k) / np.sqrt(q.shape[-1])
  expected = expected + np.moveaxis(c[:, :, None, :] - c[:, None, :, :], -1, 1)
  allowed = maps.allowed[:, None]
  np.testing.assert_allclose(
    np.where(allowed, maps.logits[1], 0.0), np.where(allowed, expected, 0.0), atol=1e-4
  )


def test_learned_table_refuses_lengths_past_it():
  model = _model("learned")
  with pytest.raises(ValueError, match="max_len_policy='error'"):
    analysis.attention_maps(model, _tokens(t=20))


def test_long_sequences_use_chosen_rows_in_blocks(monkeypatch):
  monkeypatch.setattr(analysis.maps, "ROW_BLOCK", 4)  # read where it is defined
  model = _model("alibi")
  tokens = _tokens(b=1, t=40)
  maps = analysis.attention_maps(model, tokens, dense_max=32)
  np.testing.assert_array_equal(maps.rows, np.arange(40))  # DEFAULT_ROWS >= 40: every row
  full = analysis.attention_maps(model, tokens)
  np.testing.assert_allclose(maps.probs, full.probs, atol=1e-6)
  np.testing.assert_array_equal(analysis.default_rows(1000, 5), [0, 250, 500, 749, 999])
  sweep = analysis.length_sweep(model, tokens, [16, 40], dense_max=32, rows=10)
  assert [r["length"] for r in sweep] == [16, 40] and sweep[1]["rows"] == 10
  assert np.isnan(sweep[0]["entropy_past"]).all() and np.isfinite(sweep[1]["entropy_past"]).all()
  with pytest.raises(ValueError, match="rows must be query indices"):
    analysis.attention_maps(model, tokens, rows=[40])
  with pytest.raises(ValueError, match="layers="):
    analysis.attention_maps(model, tokens, layers=[3])


def test_with_params_checks_shapes_and_accepts_string_indices():
  model = _model("rope", layers=2)
  state = nnx.to_pure_dict(nnx.state(model.decoder, nnx.Param))

  def as_strings(d):
    return {str(k): as_strings(v) for k, v in d.items()} if isinstance(d, dict) else np.asarray(d)

  decoder = analysis.with_params(model.config, as_strings(state))
  tokens = jnp.asarray(_tokens())
  args = (tokens, jnp.broadcast_to(jnp.arange(40), tokens.shape), jnp.ones(tokens.shape, int))
  np.testing.assert_array_equal(decoder(*args), model.decoder(*args))
  bad = as_strings(state)
  bad["embed"] = bad["embed"][:3]
  with pytest.raises(ValueError, match=r"params.embed: shape \(3, 64\)"):
    analysis.with_params(model.config, bad)
  del bad["blocks"]
  with pytest.raises(ValueError, match="no entry 'blocks'"):
    analysis.with_params(model.config, bad)


def test_load_restores_a_run_with_its_variant(tiny_run):
  model = analysis.load(tiny_run)
  assert model.step == 2 and model.train_len == 32
  params, _ = checkpoint.restore_params(tiny_run)
  np.testing.assert_array_equal(
    model.decoder.blocks[1].attn.wq[...], params["blocks"]["1"]["attn"]["wq"]
  )
  yarn = analysis.load(tiny_run, variant="yarn@4")
  assert yarn.decoder.position.scaling.rope_type == "yarn"
  np.testing.assert_array_equal(yarn.decoder.embed[...], model.decoder.embed[...])
  slowest = analysis.rotary_frequencies(yarn)[-1] / analysis.rotary_frequencies(model)[-1]
  assert slowest == pytest.approx(1 / 4)
  with pytest.raises(ValueError, match="only eval-time fields"):
    analysis.load(tiny_run, variant={"model.num_heads": 2})


def test_maps_follow_the_layer_schedule_and_the_sink():
  """Block 0 (positioned) sees the last 4 keys only, block 1 (NoPE) all; the sink (0 at init)
  takes some of every row's mass."""
  model = _model("rope", layers=2)
  model.config.model.nope_every, model.config.model.position_window = 2, 4
  model.config.model.attention.sink = "learned"
  model = analysis.Model(model.config, Decoder(model.config.model, rngs=nnx.Rngs(0)))
  maps = analysis.attention_maps(model, _tokens(t=12))
  far_QxT = np.subtract.outer(np.arange(12), np.arange(12)) >= 4
  assert (maps.probs[0][..., far_QxT] == 0).all()
  assert (maps.probs[1][..., far_QxT & maps.allowed[0]] > 0).all()
  sums = maps.probs.sum(-1)
  assert (sums < 1 - 1e-3).all() and (sums > 0).all()
