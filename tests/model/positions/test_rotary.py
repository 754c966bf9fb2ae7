"""The rotary family through its `rotate` hook: relative positions, pairings, p-RoPE limits,
xPos decay, the attention factor, dynamic scaling without state, and LongRoPE's n_hat."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.model import attention, positions
from lcx.model.positions import rotary, scaling
from tests.helpers import compiled

DIMS = positions.Dims(d_model=64, num_heads=2, head_dim=16, max_len=32)


def build(name, dims=DIMS, **fields):
  cfg = positions.default_config(name)
  scale = fields.pop("scaling", {})
  cfg.update(fields)
  cfg.scaling.update(scale)
  return positions.build(cfg, dims, rngs=nnx.Rngs(0))


def qk(length=12, head_dim=16, seed=0):
  kq, kk = jax.random.split(jax.random.key(seed))
  return (
    jax.random.normal(kq, (1, length, 2, head_dim)),
    jax.random.normal(kk, (1, length, 1, head_dim)),
  )


def logits(scheme, q, k, q_pos, k_pos):
  """BxHxQxK dot products of the rotated q and k (GQA: one key head)."""
  return compiled(_logits)(q, k, q_pos, k_pos, scheme=scheme)


def _logits(q, k, q_pos, k_pos, *, scheme):
  q, k = scheme.rotate(q, k, q_pos, k_pos)
  return jnp.einsum("bqhd,bkd->bhqk", q, k[:, :, 0])


def arange(length, start=0):
  return (start + jnp.arange(length))[None]


@pytest.mark.parametrize(
  "name, fields",
  [
    ("rope", {}),
    ("rope", {"pairing": "interleaved", "base": 500.0}),
    ("rope", {"rotary_dim": 6}),
    ("rope", {"scaling": {"rope_type": "yarn", "factor": 4.0}}),
    ("p_rope", {"p": 0.5}),
    ("xpos", {"pairing": "interleaved"}),
  ],
)
def test_logits_depend_only_on_relative_position(name, fields):
  scheme = build(name, **fields)
  q, k = qk()
  reference = logits(scheme, q, k, arange(12), arange(12))
  for offset in (1, 7, 100, 1000):
    shifted = logits(scheme, q, k, arange(12, offset), arange(12, offset))
    np.testing.assert_allclose(shifted, reference, atol=2e-3, rtol=1e-3)


def test_logits_change_with_relative_position():
  scheme = build("rope")
  q, k = qk()
  same = logits(scheme, q, k, arange(12), arange(12))
  moved = logits(scheme, q, k, arange(12, 3), arange(12))
  assert not np.allclose(same, moved, atol=1e-2)


@pytest.mark.parametrize("rotary_dim", [None, 8])
def test_pairings_agree_after_permutation(rotary_dim):
  """Interleaved feature 2i, 2i+1 <- rotate-half features i, i + R; the rest stay in place."""
  r = (rotary_dim or 16) // 2
  perm = np.concatenate(
    [np.stack([np.arange(r), r + np.arange(r)], -1).reshape(-1), np.arange(2 * r, 16)]
  )
  half = build("rope", rotary_dim=rotary_dim)
  inter = build("rope", rotary_dim=rotary_dim, pairing="interleaved")
  q, k = qk()
  pos = arange(12, 5)
  q_half, k_half = half.rotate(q, k, pos, pos)
  q_inter, k_inter = inter.rotate(q[..., perm], k[..., perm], pos, pos)
  np.testing.assert_allclose(q_inter, q_half[..., perm], atol=1e-6)
  np.testing.assert_allclose(k_inter, k_half[..., perm], atol=1e-6)
  np.testing.assert_allclose(
    logits(inter, q[..., perm], k[..., perm], pos, pos), logits(half, q, k, pos, pos), atol=1e-5
  )


def test_partial_rotary_leaves_the_rest_untouched():
  q, k = qk()
  pos = arange(12, 3)
  out_q, out_k = build("rope", rotary_dim=6, scaling={"rope_type": "yarn", "factor": 8.0}).rotate(
    q, k, pos, pos
  )
  np.testing.assert_array_equal(out_q[..., 6:], q[..., 6:])
  np.testing.assert_array_equal(out_k[..., 6:], k[..., 6:])


def test_p_rope_limits():
  q, k = qk()
  pos = arange(12, 9)
  nope_q, nope_k = build("p_rope", p=0.0).rotate(q, k, pos, pos)
  np.testing.assert_allclose(nope_q, q, atol=1e-6)
  np.testing.assert_allclose(nope_k, k, atol=1e-6)
  for got, want in zip(
    build("p_rope", p=1.0).rotate(q, k, pos, pos), build("rope").rotate(q, k, pos, pos)
  ):
    np.testing.assert_array_equal(got, want)


def test_p_rope_keeps_the_highest_frequencies():
  """p=0.25 of 8 pairs: pairs 0, 1 (highest frequencies) rotate, pairs 2..7 do not."""
  q, k = qk()
  pos = arange(12, 9)
  out_q, _ = build("p_rope", p=0.25).rotate(q, k, pos, pos)
  full_q, _ = build("rope").rotate(q, k, pos, pos)
  moved = [0, 1, 8, 9]
  kept = [i for i in range(16) if i not in moved]
  np.testing.assert_allclose(out_q[..., moved], full_q[..., moved], atol=1e-6)
  np.testing.assert_allclose(out_q[..., kept], q[..., kept], atol=1e-6)


def test_xpos_decays_each_pair_by_zeta_to_the_distance():
  q, k = qk()
  pos = arange(12, 40)
  rope_q, rope_k = build("rope").rotate(q, k, pos, pos)
  pair_dots_BxHxQxKxR = jnp.einsum(
    "bqhd,bkd->bhqkd", rope_q[..., :8], rope_k[:, :, 0, :8]
  ) + jnp.einsum("bqhd,bkd->bhqkd", rope_q[..., 8:], rope_k[:, :, 0, 8:])
  zeta = (np.arange(0, 16, 2) + 0.4 * 16) / (1.4 * 16)
  distance = np.arange(12)[:, None] - np.arange(12)[None, :]
  decay_QxKxR = zeta ** (distance[..., None] / 512.0)
  expected = (pair_dots_BxHxQxKxR * decay_QxKxR[None, None]).sum(-1)
  np.testing.assert_allclose(logits(build("xpos"), q, k, pos, pos), expected, rtol=1e-4, atol=1e-4)


def test_attention_factor_scales_logits_by_its_square():
  q, k = qk()
  pos = arange(12)
  yarn = {"rope_type": "yarn", "factor": 16.0}
  scaled = logits(build("rope", scaling=yarn), q, k, pos, pos)
  plain = logits(build("rope", scaling={**yarn, "attention_factor": 1.0}), q, k, pos, pos)
  np.testing.assert_allclose(scaled, plain * scaling.yarn_mscale(16.0) ** 2, rtol=1e-5)


def test_linear_scaling_equals_interpolated_float_positions():
  q, k = qk()
  pos = arange(12, 3)
  linear = build("rope", scaling={"rope_type": "linear", "factor": 4.0})
  np.testing.assert_allclose(
    logits(linear, q, k, pos, pos), logits(build("rope"), q, k, pos / 4.0, pos / 4.0), atol=1e-5
  )


def test_dynamic_uses_the_window_length_and_keeps_no_state():
  """max_len 32: a 12-token window is plain RoPE, a 64-token one uses rope_frequencies(64)."""
  scheme = build("rope", scaling={"rope_type": "dynamic", "factor": 2.0})
  q, k = qk()
  short = logits(scheme, q, k, arange(12), arange(12))
  np.testing.assert_allclose(short, logits(build("rope"), q, k, arange(12), arange(12)), atol=1e-6)
  q_long, k_long = qk(64, seed=1)
  long_q, _ = scheme.rotate(q_long, k_long, arange(64), arange(64))
  inv_freq, _ = positions.rope_frequencies(
    16,
    scaling={"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 32},
    seq_len=64,
  )
  expected_q = rotary.rotate_pairs(q_long, arange(64)[..., None] * inv_freq[None, None])
  np.testing.assert_allclose(long_q, expected_q, atol=1e-5)
  np.testing.assert_array_equal(logits(scheme, q, k, arange(12), arange(12)), short)


LONGROPE = {
  "rope_type": "longrope",
  "factor": 4.0,
  "short_factor": list(np.linspace(1, 2, 8)),
  "long_factor": list(np.linspace(1, 8, 8)),
}


@pytest.mark.parametrize(
  "name, scale",
  [
    ("rope", {"rope_type": "dynamic", "factor": 4.0}),
    ("rope", LONGROPE),
    ("p_rope", {"rope_type": "dynamic", "factor": 4.0}),
    ("xpos", LONGROPE),
  ],
)
def test_rotate_reads_each_tokens_own_length(name, scale):
  """With document_length, 12 tokens right-padded to 40 (L = 32) give the logits they give
  unpadded; without it the hook reads the window's length, 40, and they change."""
  scheme = build(name, scaling=scale)
  q, k = qk(40)
  pos = arange(40)
  len_BxL = attention.document_length(pos, jnp.asarray([[1] * 12 + [0] * 28]))
  q_rot, k_rot = scheme.rotate(q, k, pos, pos, q_len_BxL=len_BxL, k_len_BxL=len_BxL)
  padded = jnp.einsum("bqhd,bkd->bhqk", q_rot[:, :12], k_rot[:, :12, 0])
  alone = logits(scheme, q[:, :12], k[:, :12], pos[:, :12], pos[:, :12])
  np.testing.assert_allclose(padded, alone, atol=1e-4, rtol=1e-5)
  window = logits(scheme, q, k, pos, pos)[:, :, :12, :12]
  assert np.abs(window - alone).max() > 0.1


def test_rotate_reads_per_token_lengths_under_jit():
  scheme = build("rope", scaling=LONGROPE)
  q, k = qk(40)
  pos = arange(40)
  len_BxL = jnp.asarray([[12] * 12 + [28] * 28])
  rotate = nnx.jit(lambda s, q, k, p, n: s.rotate(q, k, p, p, q_len_BxL=n, k_len_BxL=n))
  for got, want in zip(
    rotate(scheme, q, k, pos, len_BxL),
    scheme.rotate(q, k, pos, pos, q_len_BxL=len_BxL, k_len_BxL=len_BxL),
  ):
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_longrope_n_hat_leaves_initial_positions_unscaled():
  short = list(np.linspace(1.0, 3.0, 8))
  scheme = build(
    "rope",
    scaling={
      "rope_type": "longrope",
      "factor": 4.0,
      "n_hat": 4,
      "short_factor": short,
      "long_factor": [4.0] * 8,
    },
  )
  q, k = qk()
  pos_BxL = arange(12)
  out_q, _ = scheme.rotate(q, k, pos_BxL, pos_BxL)
  theta = scaling.theta(16, 10000.0)
  pos = np.arange(12)[None, :, None]
  angle = np.where(pos < 4, pos * theta, pos * theta / np.asarray(short))
  factor = np.sqrt(1 + np.log(4.0) / np.log(32))
  # Positions below n_hat keep theta and no attention factor (the reference's mixed embedding).
  unscaled = rotary.rotate_pairs(q, jnp.asarray(angle), scale=1.0)
  scaled = rotary.rotate_pairs(q, jnp.asarray(angle), scale=factor)
  np.testing.assert_allclose(out_q[:, :4], unscaled[:, :4], atol=1e-5)
  np.testing.assert_allclose(out_q[:, 4:], scaled[:, 4:], atol=1e-5)


def test_rotate_runs_under_jit_with_bfloat16():
  scheme = build("xpos", scaling={"rope_type": "llama3", "factor": 4.0})
  q, k = qk()
  out_q, out_k = nnx.jit(lambda s, q, k, p: s.rotate(q, k, p, p))(
    scheme, q.astype(jnp.bfloat16), k.astype(jnp.bfloat16), arange(12)
  )
  assert out_q.dtype == out_k.dtype == jnp.bfloat16 and out_q.shape == q.shape


@pytest.mark.parametrize(
  "dims, fields, message",
  [
    (
      positions.Dims(64, 2, 15, 32),
      {},
      "model.position.rotary_dim=15 is not allowed; allowed: even numbers",
    ),
    (
      DIMS,
      {"rotary_dim": 5},
      "model.position.rotary_dim=5 is not allowed; allowed: even numbers in [2, head_dim=16]",
    ),
    (
      DIMS,
      {"pairing": "neox"},
      "model.position.pairing='neox' is not allowed; allowed: interleaved, rotate_half",
    ),
    (
      DIMS,
      {"scaling": {"rope_type": "yarn", "factor": 0.5}},
      "model.position.scaling.factor=0.5 is not allowed; allowed: numbers >= 1",
    ),
    (
      DIMS,
      {"scaling": {"rope_type": "linear", "factor": 2.0, "n_hat": 4}},
      "model.position.scaling.n_hat=4 is not used by rope_type='linear'",
    ),
    (
      DIMS,
      {"scaling": {"rope_type": "ntkk"}},
      "model.position.scaling.rope_type='ntkk' is not "
      "allowed; allowed: default, dynamic, linear, llama3, longrope, ntk, yarn",
    ),
    (
      DIMS,
      {"scaling": {"rope_theta": 5e5}},
      "model.position.scaling.rope_theta=500000.0 differs from model.position.base=10000.0",
    ),
    (
      DIMS,
      {"rotary_dim": 8, "scaling": {"partial_rotary_factor": 0.25}},
      "model.position.scaling.partial_rotary_factor=0.25 gives a rotary dim of int(16 * 0.25) = "
      "4, but model.position.rotary_dim gives 8",
    ),
  ],
)
def test_invalid_rotary_config_names_the_field(dims, fields, message):
  cfg = positions.default_config("rope")
  cfg.scaling.update(fields.pop("scaling", {}))
  cfg.update(fields)
  with pytest.raises(ValueError) as error:
    positions.validate(cfg, dims)
  assert message in str(error.value)


def test_scaling_may_restate_base_and_rotary_dim():
  cfg = positions.default_config("rope")
  cfg.base, cfg.rotary_dim = 500.0, 8
  cfg.scaling.update(
    {"rope_type": "linear", "factor": 2.0, "rope_theta": 500, "partial_rotary_factor": 0.5}
  )
  positions.validate(cfg, DIMS)
  scheme = positions.build(cfg, DIMS, rngs=nnx.Rngs(0))
  q, k = qk()
  np.testing.assert_array_equal(
    logits(scheme, q, k, arange(12), arange(12)),
    logits(
      build("rope", base=500.0, rotary_dim=8, scaling={"rope_type": "linear", "factor": 2.0}),
      q,
      k,
      arange(12),
      arange(12),
    ),
  )


def test_scheme_specific_field_errors():
  cfg = positions.default_config("p_rope")
  cfg.p = 1.5
  with pytest.raises(
    ValueError, match=r"^model.position.p=1.5 is not allowed; allowed: in \[0, 1\]"
  ):
    positions.validate(cfg, DIMS)
  cfg = positions.default_config("xpos")
  cfg.scale_base = 0.0
  with pytest.raises(
    ValueError, match=r"^model.position.scale_base=0.0 is not allowed; allowed: > 0$"
  ):
    positions.validate(cfg, DIMS)


def test_command_line_style_overrides_fill_the_training_length():
  cfg = positions.default_config("rope")
  cfg.scaling.rope_type = "yarn"
  cfg.scaling.factor = 4  # an int from the command line becomes a float
  assert isinstance(cfg.scaling.factor, float)
  scheme = positions.build(cfg, DIMS, rngs=nnx.Rngs(0))
  assert scheme.scaling.original_max_position_embeddings == DIMS.max_len


def test_xpos_length_bound_names_scale_base():
  cfg = positions.default_config("xpos")
  assert rotary.xpos_max_len(512.0) == 67_989
  positions.check_eval_length(cfg, DIMS, 65_536)
  with pytest.raises(ValueError) as error:
    positions.check_eval_length(cfg, DIMS, 70_000)
  assert str(error.value) == (
    "model.position.scale_base=512.0: xPos scales q and k by up to "
    "(1.4/0.4)^(positions/(2*scale_base)), which overflows float32 past 67989 positions, but "
    "70000 are needed; use <= 67989 or model.position.scale_base >= 528"
  )
  cfg.scale_base = 528.0
  positions.check_eval_length(cfg, DIMS, 70_000)


def test_xpos_is_finite_up_to_the_bound_and_not_far_beyond():
  """scale_base=8 scales the bound down to 1063 positions; float32 overflows from ~1135."""
  scheme = build("xpos", scale_base=8.0)
  longest = rotary.xpos_max_len(8.0)
  assert longest == 1063

  def finite(length):
    return all(
      np.all(np.isfinite(x)) for x in scheme.rotate(*qk(length), arange(length), arange(length))
    )

  assert finite(longest)
  assert not finite(1200)


@pytest.mark.parametrize(
  "p, rotary_dim, kept",
  [
    (0.75, 16, 6),
    (0.5, 10, 2),
    (0.5, 6, 1),
    (0.25, 4, 0),
    (0.29, 200, 29),
    (0.3, 64, 9),
    (1.0, 64, 32),
    (0.0, 64, 0),
  ],
)
def test_p_rope_kept_pairs_floor_as_the_paper(p, rotary_dim, kept):
  """floor(p * R) pairs keep a non-zero angle (the paper's code truncates): 2.5 -> 2, 1.5 -> 1,
  9.6 -> 9; float error does not drop a pair: 0.29 * 100 = 28.999.. -> 29."""
  scheme = build("p_rope", positions.Dims(64, 2, 200, 32), p=p, rotary_dim=rotary_dim)
  angle_BxLxR, _ = scheme.angles(arange(4, 1), 4)
  assert np.flatnonzero(np.asarray(angle_BxLxR)[0, 0]).tolist() == list(range(kept))
