"""Randomized positions (Ruoss 2023): distinct increasing positions per packed document, and
training every scheme on them through the real train step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.model import positions
from lcx.model.decoder import Decoder
from lcx.run import train
from tests.helpers import batch_of, schemes_with, tiny_config


def test_each_document_gets_distinct_increasing_positions():
  pos_BxL = jnp.array([[0, 1, 2, 3, 4, 0, 1, 2], [0, 1, 2, 3, 4, 5, 6, 7]])
  out = jax.jit(positions.randomized_positions, static_argnums=2)(jax.random.key(0), pos_BxL, 1000)
  out = np.asarray(out)
  assert out.dtype == np.int32 and out.shape == (2, 8)
  assert out.min() >= 0 and out.max() < 1000
  for doc in (out[0, :5], out[0, 5:], out[1]):
    assert np.all(np.diff(doc) > 0)
  assert not set(out[0, 5:]) & set(out[0, :5])  # each document its own sample
  assert len(set(out[1])) == 8 and not np.array_equal(out[0, :5], out[1, :5])


def test_short_document_packed_with_a_long_one_is_not_squeezed():
  """A 40-token document packed before a 2000-token one samples like a standalone 40-token
  document (with one sample per row, its max sat near 40/2041 of the range)."""
  n, long, m, keys = 40, 2000, 8192, 64
  pos = jnp.tile(jnp.concatenate([jnp.arange(n), jnp.arange(long)]), (keys, 1))
  packed = np.asarray(positions.randomized_positions(jax.random.key(0), pos, m))
  alone = np.asarray(
    positions.randomized_positions(jax.random.key(1), jnp.tile(jnp.arange(n), (keys, 1)), m)
  )
  short, rest = packed[:, :n], packed[:, n:]
  for doc in (short, rest, alone):
    assert np.all(np.diff(doc, axis=1) > 0) and doc.min() >= 0 and doc.max() < m
  want = n * (m + 1) / (n + 1) - 1  # E[max] of a uniform n-subset of [0, m): 7991.7
  assert short[:, -1].mean() == pytest.approx(want, rel=0.01)
  assert alone[:, -1].mean() == pytest.approx(want, rel=0.01)
  assert short.mean() == pytest.approx(alone.mean(), rel=0.05)  # both near (m - 1) / 2


def test_segment_ids_split_documents_and_padding():
  """Padding (segment 0) after a document is not part of it, though its positions run on."""
  pos = jnp.array([[0, 1, 2, 3, 4, 5]])
  seg = jnp.array([[1, 1, 1, 1, 0, 0]])
  np.testing.assert_array_equal(positions.randomized.document_ids(pos, seg), [[1, 1, 1, 1, 2, 2]])
  np.testing.assert_array_equal(positions.randomized.document_ids(pos), [[1] * 6])
  out = np.asarray(positions.randomized_positions(jax.random.key(0), pos, 64, seg))[0]
  assert np.all(np.diff(out[:4]) > 0) and np.all(np.diff(out[4:]) > 0)
  assert len(set(out)) == 6


def test_same_key_same_positions_new_key_new_ones():
  pos = jnp.tile(jnp.arange(16), (3, 1))
  a = positions.randomized_positions(jax.random.key(1), pos, 64)
  np.testing.assert_array_equal(a, positions.randomized_positions(jax.random.key(1), pos, 64))
  assert not np.array_equal(a, positions.randomized_positions(jax.random.key(2), pos, 64))


def test_max_position_equal_to_length_gives_plain_positions():
  pos = jnp.tile(jnp.arange(8), (2, 1))
  np.testing.assert_array_equal(positions.randomized_positions(jax.random.key(0), pos, 8), pos)


def test_too_few_positions_is_an_error():
  with pytest.raises(ValueError, match="train.random_positions=4 must be >= the row length 8"):
    positions.randomized_positions(jax.random.key(0), jnp.zeros((1, 8), jnp.int32), 4)


def _learnable_batch(b=4, t=16):
  """A fixed batch of repeating byte patterns: a few steps on it lower the loss."""
  return batch_of((np.arange(b * (t + 1)).reshape(b, t + 1) % 7 * 31 + np.arange(b)[:, None]) % 256)


RANDOM_MAX, STEPS = 128, 6
# Compiling is most of the cost: one program for all schemes (one each took ~40 s on 2 busy
# cores, this ~15 s), at XLA's lowest backend optimization level (a quarter less CPU).
FAST_COMPILE = {"xla_backend_optimization_level": 0}


@pytest.fixture(scope="module")
def runs():
  """Per scheme: the losses of STEPS make_step steps with train.random_positions=RANDOM_MAX,
  and the loss of the initial parameters at plain positions (before and after those steps)
  and at the positions the first step samples."""
  batch = _learnable_batch()
  graphdefs, steps, states = {}, {}, {}
  for name in sorted(positions.SCHEMES):
    config = tiny_config(name, random_positions=RANDOM_MAX, lr=1e-2, warmup_steps=0, steps=STEPS)
    config.data.seq_len = 16
    config.model.vocab_size = 259
    config.model.num_layers = 1
    if name == "learned":
      config.model.position.num_positions = RANDOM_MAX  # the table covers sampled positions
    graphdefs[name], params = nnx.split(Decoder(config.model, rngs=nnx.Rngs(0)), nnx.Param)
    tx = train.optimizer(config.train)
    steps[name] = train.make_step(graphdefs[name], tx, config)
    states[name] = (params, tx.init(params))
  initial = {name: params for name, (params, _) in states.items()}

  def distances(name, d_L):  # a distance-only bias samples distances (train.random_bias)
    return d_L if positions.spec(name).cls.bias_of_distance else None

  losses_at = jax.jit(
    lambda params, pos, d_L=None: {
      name: train.loss_fn(nnx.merge(graphdefs[name], p), batch, pos, distances(name, d_L))
      for name, p in params.items()
    },
    compiler_options=FAST_COMPILE,
  )
  step_all = jax.jit(
    lambda states, i: {name: steps[name](*state, batch, i) for name, state in states.items()},
    compiler_options=FAST_COMPILE,
  )
  plain = jnp.asarray(batch["positions"])
  first_key = jax.random.fold_in(jax.random.key(0), 0)  # make_step's key at step 0, seed 0
  out = {
    "plain_before": losses_at(initial, plain),
    "sampled": losses_at(initial, positions.randomized_positions(first_key, plain, RANDOM_MAX)),
    "distances": losses_at(initial, plain, positions.random_distances(first_key, 16, RANDOM_MAX)),
  }
  losses = {name: [] for name in states}
  for i in range(STEPS):
    results = step_all(states, jnp.int32(i))
    for name, (params, opt_state, metrics) in results.items():
      states[name] = (params, opt_state)
      losses[name].append(float(metrics["loss"]))
  out["plain_after"] = losses_at(initial, plain)
  out["trained_plain"] = losses_at({name: s[0] for name, s in states.items()}, plain)
  return {
    name: {"losses": losses[name], **{k: float(v[name]) for k, v in out.items()}} for name in states
  }


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(positions.SCHEMES))
def test_train_step_randomizes_and_plain_forward_is_untouched(runs, name):
  """make_step with random positions: finite, decreasing loss; its first loss is the model's at
  the sampled positions, and the model at plain positions is the same before and after
  training steps (randomization lives in the train step, never in the model)."""
  run = runs[name]
  losses = run["losses"]
  assert np.all(np.isfinite(losses)) and losses[-1] < losses[0] - 0.1, losses
  if positions.spec(name).cls.bias_of_distance:  # the paper's sorted distances
    assert losses[0] == pytest.approx(run["distances"], rel=1e-5)
    if name != "t5":
      assert abs(run["distances"] - run["sampled"]) > 1e-4
  else:
    assert losses[0] == pytest.approx(run["sampled"], rel=1e-5)
  # T5's table starts at zero: no position signal yet; NoPE, CoPE, FoX and PaTH read no
  # position ids (no embed, rotate or bias hook).
  if name in schemes_with("embed", "rotate", "bias") and name != "t5":
    assert abs(run["sampled"] - run["plain_before"]) > 1e-4
  assert run["plain_after"] == run["plain_before"]
  assert np.isfinite(run["trained_plain"])


def _runs(row):
  """Maximal runs of consecutive positions (steps of exactly 1) in a row, as (start, length)."""
  breaks = np.flatnonzero(np.diff(row) != 1) + 1
  return [(int(r[0]), len(r)) for r in np.split(row, breaks)]


def test_pose_two_contiguous_chunks_per_document_below_the_target():
  """Documents of 9, 5 and 1 tokens, then 3 padding tokens (segment 0) in one row."""
  pos = jnp.array([[*range(9), *range(5), 0, 0, 1, 2]] * 64)
  seg = jnp.array([[1] * 9 + [2] * 5 + [3] + [0] * 3] * 64)
  out = np.asarray(
    jax.jit(positions.pose_positions, static_argnums=2)(jax.random.key(0), pos, 100, seg)
  )
  assert out.dtype == np.int32 and out.shape == (64, 18)
  firsts, skips = [], []
  for row in out:
    for doc in (row[:9], row[9:14]):
      assert doc[0] == 0 and np.all(np.diff(doc) > 0) and doc[-1] < 100
      runs = _runs(doc)
      assert len(runs) <= 2 and runs[0][0] == 0  # a chunk at 0, then one skipped chunk
      first = runs[0][1] if len(runs) == 2 else None
      if first is not None:
        assert 1 <= first <= (len(doc) + 1) // 2
        assert runs[1][0] - first <= 100 - len(doc)  # skip u <= target - n
      if len(doc) == 9:
        firsts.append(first)
        skips.append(doc[-1] - 8)
    assert row[14] == 0  # a one-token document stays at 0
  # Over 64 rows: every first-chunk length 1..5 occurs, and skips cover [0, 91].
  assert {f for f in firsts if f is not None} == {1, 2, 3, 4, 5}
  assert min(skips) < 10 and max(skips) > 80 and max(skips) <= 91


def test_pose_documents_draw_their_own_chunks_and_are_seeded():
  pos = jnp.tile(jnp.concatenate([jnp.arange(16), jnp.arange(16)]), (8, 1))
  a = np.asarray(positions.pose_positions(jax.random.key(1), pos, 256))
  np.testing.assert_array_equal(a, positions.pose_positions(jax.random.key(1), pos, 256))
  assert not np.array_equal(a, positions.pose_positions(jax.random.key(2), pos, 256))
  assert not np.array_equal(a[:, :16], a[:, 16:])  # the two documents of a row differ
  assert len({tuple(r) for r in a[:, :16]}) > 4  # and so do rows


def test_pose_target_equal_to_length_gives_plain_positions():
  pos = jnp.tile(jnp.arange(8), (4, 1))
  np.testing.assert_array_equal(positions.pose_positions(jax.random.key(0), pos, 8), pos)


def test_pose_too_small_target_is_an_error():
  with pytest.raises(ValueError, match="train.pose_target=4 must be >= the row length 8"):
    positions.pose_positions(jax.random.key(0), jnp.zeros((1, 8), jnp.int32), 4)


def test_train_step_with_pose_learns_and_sees_skipped_positions():
  """make_step with train.pose_target: finite, falling loss; its first loss is the model's at
  the PoSE positions of step 0, not at plain positions."""
  batch = _learnable_batch()
  config = tiny_config("alibi", pose_target=RANDOM_MAX, lr=1e-2, warmup_steps=0, steps=STEPS)
  config.data.seq_len = 16
  config.model.vocab_size = 259
  config.model.num_layers = 1
  graphdef, params = nnx.split(Decoder(config.model, rngs=nnx.Rngs(0)), nnx.Param)
  tx = train.optimizer(config.train)
  step = jax.jit(train.make_step(graphdef, tx, config), compiler_options=FAST_COMPILE)
  plain = jnp.asarray(batch["positions"])
  skipped = positions.pose_positions(jax.random.fold_in(jax.random.key(0), 0), plain, RANDOM_MAX)
  assert int(skipped.max()) > 16
  model = nnx.merge(graphdef, params)
  at_skipped = float(train.loss_fn(model, batch, skipped))
  at_plain = float(train.loss_fn(model, batch, plain))
  state, losses = (params, tx.init(params)), []
  for i in range(STEPS):
    *state, metrics = step(*state, batch, jnp.int32(i))
    losses.append(float(metrics["loss"]))
  assert np.all(np.isfinite(losses)) and losses[-1] < losses[0] - 0.1, losses
  assert losses[0] == pytest.approx(at_skipped, rel=1e-5)
  assert abs(at_skipped - at_plain) > 1e-4


def test_random_distances_are_zero_then_a_sorted_sample():
  """Ruoss et al.'s noisy ALiBi: offset 0 reads 0, offsets 1..L-1 read L - 1 distinct sorted
  distances from [1, N_max); a new key draws new ones."""
  d = np.asarray(positions.random_distances(jax.random.key(0), 16, 1000))
  assert d.dtype == np.int32 and d[0] == 0 and d.min() >= 0 and d.max() < 1000
  assert np.all(np.diff(d) > 0)
  assert not np.array_equal(d, np.asarray(positions.random_distances(jax.random.key(1), 16, 1000)))
  np.testing.assert_array_equal(positions.random_distances(jax.random.key(2), 16, 16), range(16))
  with pytest.raises(ValueError, match="train.random_positions=8 must be >= the row length 16"):
    positions.random_distances(jax.random.key(0), 16, 8)


@pytest.mark.parametrize("name", ["alibi", "t5", "kerple_log", "sandwich"])
def test_a_distance_bias_reads_offset_k_as_distance_d_k(name):
  """The wrapped bias at (i, j) is the scheme's bias at distance D[i - j]: a function of the
  offset alone, the same for every query (unlike differences of sampled positions)."""
  from lcx.model.positions import randomized

  dims = positions.Dims(32, 4, 8, 64)
  scheme = randomized_params(
    positions.build(positions.default_config(name), dims, rngs=nnx.Rngs(0))
  )
  assert type(scheme).bias_of_distance
  d_L = positions.random_distances(jax.random.key(3), 12, 500)
  pos = jnp.asarray([list(range(5)) + list(range(7))])  # two packed documents
  got = np.asarray(randomized.RandomDistances(scheme, d_L).bias(pos, pos))[0]  # HxQxS
  for i in range(12):
    for j in range(12):
      k = max(int(pos[0, i] - pos[0, j]), 0)
      want = scheme.bias(jnp.asarray([[int(d_L[k])]]), jnp.asarray([[0]]))
      np.testing.assert_allclose(got[:, i, j], np.asarray(want).reshape(-1), rtol=1e-5, atol=1e-6)


def randomized_params(scheme):
  """Random values for the learned parameters (T5's table starts at zero)."""
  graphdef, state = nnx.split(scheme)
  leaves, tree = jax.tree.flatten(state)
  keys = jax.random.split(jax.random.key(1), max(len(leaves), 1))
  leaves = [x + jax.random.uniform(k, x.shape) for x, k in zip(leaves, keys)]
  return nnx.merge(graphdef, jax.tree.unflatten(tree, leaves))


def test_the_model_reads_the_distances_and_training_samples_them(monkeypatch, tmp_path):
  """distances_L = 0..L-1 is plain ALiBi; sampled ones change the logits; FIRE and RoPE ignore
  them (not distance-only). The train step samples distances for ALiBi by default and
  positions with train.random_bias=positions."""
  config = tiny_config("alibi")
  config.model.vocab_size = 259
  model = Decoder(config.model, rngs=nnx.Rngs(0))
  t = 16
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 259, (1, t)))
  pos, seg = jnp.arange(t)[None], jnp.ones((1, t), jnp.int32)
  # Under jit: eager, every op of the model compiles its own program.
  forward = nnx.jit(lambda m, d_L: m(tokens, pos, seg, distances_L=d_L))
  plain = np.asarray(forward(model, None))
  np.testing.assert_allclose(forward(model, jnp.arange(t)), plain, atol=1e-5)
  d_L = positions.random_distances(jax.random.key(0), t, 1000)
  assert np.abs(np.asarray(forward(model, d_L)) - plain).max() > 1e-2
  rope_config = tiny_config("rope")
  rope_config.model.vocab_size = 259
  rope = Decoder(rope_config.model, rngs=nnx.Rngs(0))
  np.testing.assert_array_equal(forward(rope, d_L), forward(rope, None))

  calls = []
  original = positions.random_distances
  monkeypatch.setattr(positions, "random_distances", lambda *a: calls.append(a[1:]) or original(*a))
  config = tiny_config("alibi", steps=2, random_positions=256, checkpoint_every=100)
  train.train(config, str(tmp_path / "distances"))
  assert calls and calls[0] == (32, 256)
  calls.clear()
  config.train.random_bias = "positions"
  train.train(config, str(tmp_path / "positions"))
  assert not calls
