"""ALiBi slopes, T5 buckets (reference vectors, HF), FIRE's formula, and every bias
computed block by block equal to the full matrix (what the chunked kernel relies on)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from lcx.model import positions
from tests.helpers import schemes_with

DIMS = positions.Dims(d_model=32, num_heads=4, head_dim=8, max_len=64)


def build(name, dims=DIMS, **fields):
  cfg = positions.default_config(name)
  cfg.update(fields)
  return positions.build(cfg, dims, rngs=nnx.Rngs(0))


def slopes_closed_form(n):
  """p = 2^floor(log2 n): 2^(-8k/p) for k = 1..p, then 2^(-4(2k-1)/p) for k = 1..n-p."""
  p = 2 ** math.floor(math.log2(n))
  return [2 ** (-8 * k / p) for k in range(1, p + 1)] + [
    2 ** (-4 * (2 * k - 1) / p) for k in range(1, n - p + 1)
  ]


@pytest.mark.parametrize("n", range(1, 65))
def test_alibi_slopes(n):
  np.testing.assert_allclose(positions.alibi_slopes(n), slopes_closed_form(n), rtol=1e-12)


@pytest.mark.parametrize(
  "n, exponents",
  [
    (8, [-1, -2, -3, -4, -5, -6, -7, -8]),
    (12, [-1, -2, -3, -4, -5, -6, -7, -8, -0.5, -1.5, -2.5, -3.5]),
    (6, [-2, -4, -6, -8, -1, -3]),
  ],
)
def test_alibi_slope_vectors(n, exponents):
  np.testing.assert_allclose(positions.alibi_slopes(n), 2.0 ** np.array(exponents), rtol=1e-12)


def test_alibi_bias_is_minus_slope_times_distance():
  q_pos, k_pos = jnp.array([[5.0, 9.0]]), jnp.array([[0.0, 2.5, 9.0]])
  bias = build("alibi").bias(q_pos, k_pos)
  slopes = positions.alibi_slopes(4)
  expected = -slopes[:, None, None] * (np.array([5.0, 9.0])[:, None] - np.array([0, 2.5, 9]))
  np.testing.assert_allclose(bias[0], expected, rtol=1e-6)


@pytest.mark.parametrize(
  "n, bucket",
  [
    (0, 0),
    (15, 15),
    (16, 16),
    (20, 17),
    (32, 21),
    (64, 26),
    (100, 30),
    (127, 31),
    (128, 31),
    (5000, 31),
  ],
)
def test_t5_bucket_vectors(n, bucket):
  assert int(positions.t5_bucket(-n)) == bucket
  assert int(positions.t5_bucket(n)) == 0  # causal: future keys share bucket 0


def test_t5_bucket_floors_fractional_distances():
  np.testing.assert_array_equal(positions.t5_bucket(jnp.array([-2.5, -20.9, 0.5])), [2, 17, 0])


@pytest.mark.slow
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (16, 64), (64, 1000)])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_t5_bucket_matches_hugging_face(num_buckets, max_distance, bidirectional):
  torch = pytest.importorskip("torch")
  pytest.importorskip("transformers")
  from transformers.models.t5.modeling_t5 import T5Attention

  rel = np.arange(-3000, 3000)
  expected = T5Attention._relative_position_bucket(
    torch.tensor(rel), bidirectional, num_buckets, max_distance
  ).numpy()
  got = positions.t5_bucket(rel, num_buckets, max_distance, bidirectional)
  np.testing.assert_array_equal(got, expected)


def test_fire_matches_its_formula():
  scheme = build("fire", threshold_init=6.0)
  q_pos, k_pos = jnp.array([[3.0, 7.0, 20.0]]), jnp.array([[0.0, 3.0, 6.5]])
  c, thr = 0.1, 6.0

  def psi(x):
    return np.log(np.abs(c * x) + 1)

  w_in, b_in = np.asarray(scheme.w_in[...]), np.asarray(scheme.b_in[...])
  w_out, b_out = np.asarray(scheme.w_out[...]), np.asarray(scheme.b_out[...])
  expected = np.zeros((4, 3, 3))
  for i, qi in enumerate([3.0, 7.0, 20.0]):
    for j, kj in enumerate([0.0, 3.0, 6.5]):
      x = psi(qi - kj) / (psi(max(qi, thr)) + 1e-6)
      expected[:, i, j] = np.maximum(x * w_in + b_in, 0) @ w_out + b_out
  np.testing.assert_allclose(scheme.bias(q_pos, k_pos)[0], expected, rtol=1e-5, atol=1e-6)


def test_fire_mlp_starts_as_torch_nn_linear():
  """The paper's appendix code: nn.Linear(1, hidden) and nn.Linear(hidden, heads) with
  PyTorch's default init, weights and biases uniform in +-1/sqrt(fan_in). With b_in = 0 (lcx's
  old `init=normal`) every unit with w_in < 0 is dead on inputs in [0, 1]: no gradient."""
  scheme = build("fire", hidden=4096)
  bound_out = 1 / math.sqrt(4096)
  for name, bound in (("w_in", 1.0), ("b_in", 1.0), ("w_out", bound_out), ("b_out", bound_out)):
    x = np.asarray(getattr(scheme, name)[...])
    assert np.abs(x).max() <= bound and np.abs(x).max() > 0.9 * bound, name
    if x.size >= 4096:  # uniform: mean 0, variance bound^2 / 3
      assert abs(x.mean()) < 0.05 * bound and abs(x.var() / bound**2 - 1 / 3) < 0.03, name
  pos = jnp.arange(32)[None]

  def dead_units(s):
    grad = nnx.grad(lambda m: m.bias(pos, pos).sum())(s).w_in[...]
    return int((np.asarray(grad) == 0).sum())

  old = build("fire", hidden=4096, init="normal")
  assert not np.asarray(old.b_in[...]).any()
  assert dead_units(old) == int((np.asarray(old.w_in[...]) <= 0).sum())  # half: ~2048
  assert dead_units(scheme) < 0.9 * dead_units(old)
  x_N = jnp.linspace(0.0, 1.0, 65)  # FIRE's inputs lie in [0, 1]

  def curvature(s):  # second differences of the MLP over x: 0 where it is linear
    return float(jnp.abs(jnp.diff(s._mlp(x_N), n=2, axis=0)).max())

  # at the default width (32 units)
  assert curvature(build("fire", init="normal")) < 1e-5 < 1e-3 < curvature(build("fire"))


def test_fire_threshold_defaults_to_the_training_length():
  assert float(build("fire").threshold()) == DIMS.max_len
  assert float(build("fire", threshold_init=6.0).threshold()) == 6.0


def test_fire_threshold_learns_under_adam():
  """The paper's parameterization |m * L_init|: Adam moves m by ~lr per step, so the threshold
  moves by ~lr relative per step. Learned directly (the old L_thr parameter), 20 steps at
  lr 1e-2 moved it 64 -> 63.84 (0.25%); here it must move by more than 5%."""
  scheme = build("fire")
  target_scheme = build("fire")
  target_scheme.threshold_multiplier[...] = 0.5  # the same MLP, threshold 32
  pos = jnp.arange(2 * DIMS.max_len, dtype=jnp.float32)[None]
  target = target_scheme.bias(pos, pos)
  graphdef, params = nnx.split(scheme, nnx.Param)
  tx = optax.adam(1e-2)

  @jax.jit
  def step(params, opt_state):
    def loss(p):
      return jnp.mean((nnx.merge(graphdef, p).bias(pos, pos) - target) ** 2)

    updates, opt_state = tx.update(jax.grad(loss)(params), opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  opt_state = tx.init(params)
  for _ in range(20):
    params, opt_state = step(params, opt_state)
  moved = float(nnx.merge(graphdef, params).threshold())
  assert moved < 0.95 * DIMS.max_len, moved


def randomized(scheme):
  """Random values for every parameter, so a wrong index or broadcast shows up."""
  graphdef, state = nnx.split(scheme)
  leaves, tree = jax.tree.flatten(state)
  keys = jax.random.split(jax.random.key(1), len(leaves))
  leaves = [x + jax.random.uniform(k, x.shape) for x, k in zip(leaves, keys)]
  return nnx.merge(graphdef, jax.tree.unflatten(tree, leaves))


def test_fire_grid_path_equals_direct_path_with_gradients():
  """Integer positions in [0, T) take the shared-grid path; floats the direct formula."""
  scheme = randomized(build("fire", threshold_init=12.0))
  pos_BxT = jnp.stack([jnp.arange(24), jnp.concatenate([jnp.arange(9), jnp.arange(15)])])
  g = jax.random.normal(jax.random.key(2), (2, 4, 24, 24))
  graphdef, state = nnx.split(scheme)

  def loss(state, pos):
    return (nnx.merge(graphdef, state).bias(pos, pos) * g).sum()

  for grid_pos in (pos_BxT, pos_BxT + 24):  # in the grid, and past it (direct path again)
    value, grads = jax.value_and_grad(loss)(state, grid_pos)
    want, want_grads = jax.value_and_grad(loss)(state, grid_pos.astype(jnp.float32))
    np.testing.assert_allclose(value, want, rtol=1e-5)
    for got, expected in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads)):
      np.testing.assert_allclose(got, expected, rtol=2e-4, atol=1e-4)


@pytest.mark.parametrize("name", schemes_with("bias"))
def test_bias_block_by_block_equals_full(name):
  scheme = randomized(build(name))
  # two packed rows, the second with two documents restarting at 0
  pos_BxT = jnp.stack([jnp.arange(48), jnp.concatenate([jnp.arange(20), jnp.arange(28)])])
  full_BxHxTxT = scheme.bias(pos_BxT, pos_BxT)
  assert full_BxHxTxT.shape == (2, 4, 48, 48)
  c = 16
  for i in range(0, 48, c):
    for j in range(0, i + c, c):
      block = scheme.bias(pos_BxT[:, i : i + c], pos_BxT[:, j : j + c])
      np.testing.assert_allclose(
        block, full_BxHxTxT[:, :, i : i + c, j : j + c], rtol=1e-6, atol=1e-6
      )


def test_t5_bias_reads_the_bucket_table():
  scheme = randomized(build("t5"))
  pos = jnp.array([[0, 1, 20, 200]])
  table = np.asarray(scheme.table_NxH[...])
  bias = scheme.bias(pos, pos)
  assert bias[0, 2, 3, 1] == pytest.approx(table[31, 2])  # distance 199 -> bucket 31
  assert bias[0, 1, 2, 0] == pytest.approx(table[17, 1])  # distance 20 -> bucket 17
  assert bias[0, 3, 1, 1] == pytest.approx(table[0, 3])  # distance 0 -> bucket 0


@pytest.mark.parametrize(
  "name, fields, message",
  [
    ("t5", {"num_buckets": 1}, "model.position.num_buckets=1 is not allowed; allowed: >= 2"),
    ("t5", {"max_distance": 8}, "model.position.max_distance=8 must exceed the exact range 16"),
    ("fire", {"hidden": 0}, "model.position.hidden=0 is not allowed; allowed: > 0"),
    ("fire", {"init": "zeros"}, "model.position.init='zeros' is not allowed; allowed: one of"),
    ("alibi", {"slope": 1.0}, "model.position.slope is not a known field; allowed: (none)"),
  ],
)
def test_invalid_bias_config_names_the_field(name, fields, message):
  cfg = positions.default_config(name)
  for key, value in fields.items():
    cfg[key] = value
  with pytest.raises(ValueError) as error:
    positions.validate(cfg, DIMS)
  assert message in str(error.value)


@pytest.mark.parametrize(
  "name, kernel",
  [
    ("kerple_log", lambda d, r1, r2: -r1 * math.log(1 + r2 * abs(d))),
    ("kerple_power", lambda d, r1, r2: -r1 * abs(d) ** r2),
  ],
)
def test_kerple_bias_by_hand(name, kernel):
  scheme = build(name, init="constant", r1_init=0.5, r2_init=1.5)
  scheme.r1[...] = jnp.array([0.5, 1.0, 2.0, 0.001])  # the last below eps: used as eps
  q_pos, k_pos = jnp.array([[0.0, 3.0, 10.0]]), jnp.array([[0.0, 2.5, 7.0]])
  r1 = [0.5, 1.0, 2.0, 0.01]
  expected = np.array(
    [
      [[kernel(qi - kj, r1[h], 1.5) for kj in (0.0, 2.5, 7.0)] for qi in (0.0, 3.0, 10.0)]
      for h in range(4)
    ]
  )
  np.testing.assert_allclose(scheme.bias(q_pos, k_pos)[0], expected, rtol=1e-6, atol=1e-7)
  assert expected[0, 2, 2] == pytest.approx(
    {"kerple_log": -0.5 * math.log(5.5), "kerple_power": -0.5 * 3**1.5}[name]
  )


def test_kerple_power_exponent_is_clamped_to_two():
  scheme = build("kerple_power", init="constant", r1_init=1.0, r2_init=2.0)
  scheme.r2[...] = jnp.full((4,), 3.0)
  bias = scheme.bias(jnp.array([[4.0]]), jnp.array([[0.0]]))
  np.testing.assert_allclose(bias[0, :, 0, 0], -16.0)


@pytest.mark.parametrize("name", ["kerple_log", "kerple_power"])
def test_kerple_parameters_start_positive_and_get_gradients(name):
  scheme = build(name)
  defaults = positions.default_config(name)
  r1, r2 = np.asarray(scheme.r1[...]), np.asarray(scheme.r2[...])
  assert r1.shape == r2.shape == (4,)
  assert np.all(r1 > 0) and np.all(r1 < defaults.r1_init) and len(set(r1)) == 4  # U(0, init)
  assert np.all(r2 > 0) and np.all(r2 < defaults.r2_init)
  # A parameter pushed below eps keeps a gradient (the value used is eps).
  scheme.r2[...] = scheme.r2[...].at[0].set(-1.0)
  pos = jnp.arange(12)[None]
  graphdef, params = nnx.split(scheme, nnx.Param)
  grads = jax.grad(lambda p: nnx.merge(graphdef, p).bias(pos, pos).sum())(params)
  for g in jax.tree.leaves(grads):
    assert np.all(np.isfinite(g)) and np.all(np.abs(g) > 0), g
  used_r1, used_r2 = scheme.coefficients()
  assert np.all(np.asarray(used_r1) >= 0.01) and float(used_r2[0]) == pytest.approx(0.01)


def test_sandwich_bias_by_hand():
  dims = positions.Dims(d_model=32, num_heads=2, head_dim=16, max_len=64)
  scheme = build("sandwich", dims=dims, dim=4, base=100.0)
  q_pos, k_pos = jnp.array([[0, 5, 9]]), jnp.array([[0, 3, 9]])
  w = [100.0 ** (-2 / 4), 100.0 ** (-4 / 4)]  # i = 1, 2: 0.1, 0.01
  scales = [2 / (8 * 1), 2 / (8 * 2)]  # 1 / (8h/H)
  expected = np.array(
    [
      [
        [scales[h] * (sum(math.cos((qi - kj) * wi) for wi in w) - 2) for kj in (0, 3, 9)]
        for qi in (0, 5, 9)
      ]
      for h in range(2)
    ]
  )
  np.testing.assert_allclose(scheme.bias(q_pos, k_pos)[0], expected, rtol=1e-5, atol=1e-6)


def test_sandwich_depends_on_distance_only_and_peaks_at_zero():
  scheme = build("sandwich")
  pos = jnp.arange(200)[None]
  bias = np.asarray(scheme.bias(pos, pos))[0]  # H x 200 x 200
  shifted = np.asarray(scheme.bias(pos + 1000, pos + 1000))[0]
  np.testing.assert_allclose(shifted, bias, atol=2e-3)
  for h in range(4):
    by_distance = np.array([bias[h, 150, 150 - d] for d in range(150)])
    np.testing.assert_allclose(
      [bias[h, 100, 100 - d] for d in range(100)], by_distance[:100], atol=1e-3
    )
    assert by_distance[0] == pytest.approx(0.0, abs=1e-4)
    assert np.all(by_distance[1:] < -1e-3)  # strictly below its value at distance 0
  # Head 1 is the steepest: 1 / (8h/H) shrinks with h.
  assert bias[0, 150, 50] < bias[1, 150, 50] < bias[3, 150, 50] < 0


@pytest.mark.parametrize(
  "name, fields, message",
  [
    ("kerple_log", {"r1_init": 0.0}, "model.position.r1_init=0.0 is not allowed; allowed: > 0"),
    ("kerple_log", {"init": "ones"}, "model.position.init='ones' is not allowed; allowed: one of"),
    ("kerple_log", {"eps": -1.0}, "model.position.eps=-1.0 is not allowed; allowed: > 0"),
    (
      "kerple_power",
      {"r2_init": 2.5},
      "model.position.r2_init=2.5 is not allowed; allowed: in (0, 2]",
    ),
    ("sandwich", {"dim": 7}, "model.position.dim=7 is not allowed; allowed: an even integer"),
    ("sandwich", {"base": 1.0}, "model.position.base=1.0 is not allowed; allowed: > 1"),
    (
      "sandwich",
      {"compression": 0.0},
      "model.position.compression=0.0 is not allowed; allowed: > 0",
    ),
  ],
)
def test_invalid_new_bias_config_names_the_field(name, fields, message):
  cfg = positions.default_config(name)
  cfg.update(fields)
  with pytest.raises(ValueError) as error:
    positions.validate(cfg, DIMS)
  assert message in str(error.value)
