"""rope_frequencies: reference test vectors, independent re-derivations of every
rope type, the Hugging Face implementation where installed, the validation messages, per-token
lengths, and Hugging Face scaling dicts and config files read verbatim."""

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.model import positions
from lcx.model.positions import scaling

# (head_dim, base, factor, L)
SETTINGS = [(64, 10000.0, 4.0, 512), (128, 500000.0, 8.0, 8192), (32, 10000.0, 2.5, 1024)]


def theta(d, base):
  return np.array([base ** (-2 * i / d) for i in range(d // 2)])


@pytest.mark.parametrize(
  "factor, expected", [(2, 1.0693), (4, 1.1386), (8, 1.2079), (16, 1.2773), (32, 1.3466)]
)
def test_yarn_attention_factor_vectors(factor, expected):
  _, m = positions.rope_frequencies(
    64,
    scaling={"rope_type": "yarn", "factor": float(factor), "original_max_position_embeddings": 512},
  )
  assert round(m, 4) == expected


@pytest.mark.parametrize(
  "d, length, low, high", [(64, 512, 3, 16), (64, 1024, 5, 18), (128, 4096, 20, 46)]
)
def test_yarn_low_high_vectors(d, length, low, high):
  assert scaling.yarn_correction_range(d, 1e4, length, 32, 1) == (low, high)
  inv_freq, _ = positions.rope_frequencies(
    d, scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": length}
  )
  t = theta(d, 1e4)
  np.testing.assert_allclose(inv_freq[: low + 1], t[: low + 1], rtol=1e-12)  # extrapolated
  np.testing.assert_allclose(inv_freq[high:], t[high:] / 4, rtol=1e-12)  # interpolated
  assert np.all(
    (inv_freq[low + 1 : high] < t[low + 1 : high])
    & (inv_freq[low + 1 : high] > t[low + 1 : high] / 4)
  )


def test_llama3_band_edges():
  """d=128, b=5e5, L=8192: lambda_i < 2048 for i <= 28 (kept), > 8192 for i >= 35 (/8)."""
  scale = {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}
  inv_freq, m = positions.rope_frequencies(128, 500000.0, scale)
  t = theta(128, 500000.0)
  assert m == 1.0
  np.testing.assert_allclose(inv_freq[:29], t[:29], rtol=1e-12)
  np.testing.assert_allclose(inv_freq[35:], t[35:] / 8, rtol=1e-12)
  assert np.all((inv_freq[29:35] < t[29:35]) & (inv_freq[29:35] > t[29:35] / 8))


def llama3_reference(d, base, s, length, low=1.0, high=4.0):
  """Meta's `apply_scaling`, written as its three-way branch."""
  out = []
  for f in theta(d, base):
    wavelength = 2 * math.pi / f
    if wavelength < length / high:
      out.append(f)
    elif wavelength > length / low:
      out.append(f / s)
    else:
      smooth = (length / wavelength - low) / (high - low)
      out.append((1 - smooth) * f / s + smooth * f)
  return np.array(out)


def yarn_reference(d, base, s, length, beta_fast=32, beta_slow=1):
  """YaRN per pair, from the paper's definitions."""

  def corr(r):
    return d * math.log(length / (2 * math.pi * r)) / (2 * math.log(base))

  low = max(math.floor(corr(beta_fast)), 0)
  high = min(math.ceil(corr(beta_slow)), d - 1)
  out = []
  for i, f in enumerate(theta(d, base)):
    ramp = min(max((i - low) / (high - low), 0.0), 1.0)
    out.append(f / s * ramp + f * (1 - ramp))
  return np.array(out), 0.1 * math.log(s) + 1


@pytest.mark.parametrize("d, base, s, length", SETTINGS)
def test_every_type_matches_its_definition(d, base, s, length):
  t = theta(d, base)
  ntk_base = base * s ** (d / (d - 2))
  rng = np.random.default_rng(d)
  short, long = 1 + rng.random(d // 2), 1 + s * rng.random(d // 2)
  dynamic_base = base * (s * 3 * length / length - (s - 1)) ** (d / (d - 2))
  expected = [
    (None, None, t, 1.0),
    ({"rope_type": "linear", "factor": s}, None, t / s, 1.0),
    ({"rope_type": "ntk", "factor": s}, None, theta(d, ntk_base), 1.0),
    ({"rope_type": "dynamic", "factor": s}, length, t, 1.0),
    ({"rope_type": "dynamic", "factor": s}, 3 * length, theta(d, dynamic_base), 1.0),
    ({"rope_type": "yarn", "factor": s}, None, *yarn_reference(d, base, s, length)),
    ({"rope_type": "llama3", "factor": s}, None, llama3_reference(d, base, s, length), 1.0),
    (
      {
        "rope_type": "longrope",
        "factor": s,
        "short_factor": list(short),
        "long_factor": list(long),
      },
      length,
      t / short,
      math.sqrt(1 + math.log(s) / math.log(length)),
    ),
    (
      {
        "rope_type": "longrope",
        "factor": s,
        "short_factor": list(short),
        "long_factor": list(long),
      },
      length + 1,
      t / long,
      math.sqrt(1 + math.log(s) / math.log(length)),
    ),
  ]
  for scale, seq_len, inv_expected, m_expected in expected:
    if scale is not None and scale["rope_type"] != "linear" and scale["rope_type"] != "ntk":
      scale = {**scale, "original_max_position_embeddings": length}
    inv_freq, m = positions.rope_frequencies(d, base, scale, seq_len)
    assert inv_freq.dtype == np.float64 and inv_freq.shape == (d // 2,)
    np.testing.assert_allclose(inv_freq, inv_expected, rtol=1e-12, err_msg=str(scale))
    assert m == pytest.approx(m_expected, rel=1e-12), scale


def test_yarn_mscale_options_and_untruncated_range():
  base_cfg = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096}
  _, m = positions.rope_frequencies(
    64, scaling={**base_cfg, "mscale": 1.0, "mscale_all_dim": 0.707}
  )
  assert m == pytest.approx((0.1 * math.log(40) + 1) / (0.1 * 0.707 * math.log(40) + 1))
  _, m = positions.rope_frequencies(64, scaling={**base_cfg, "attention_factor": 1.5})
  assert m == 1.5
  low, high = scaling.yarn_correction_range(64, 1e4, 512, 32, 1, truncate=False)
  assert 3 < low < 4 and 15 < high < 16  # (3, 16) once truncated


def test_partial_rotary_uses_rotary_dim_as_d():
  inv_freq, _ = positions.rope_frequencies(64, 500.0, rotary_dim=16)
  np.testing.assert_allclose(inv_freq, theta(16, 500.0))


def test_hf_style_dicts_work_unchanged():
  llama31 = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3",
  }
  qwen_legacy = {
    "factor": 4.0,
    "original_max_position_embeddings": 32768,
    "type": "yarn",
    "beta_fast": None,
  }
  np.testing.assert_allclose(
    positions.rope_frequencies(128, 5e5, llama31)[0], llama3_reference(128, 5e5, 8.0, 8192)
  )
  np.testing.assert_allclose(
    positions.rope_frequencies(128, 1e6, qwen_legacy)[0], yarn_reference(128, 1e6, 4.0, 32768)[0]
  )


def test_dynamic_depends_on_the_current_length_only():
  scale = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64}
  first = positions.rope_frequencies(32, scaling=scale, seq_len=50)
  positions.rope_frequencies(32, scaling=scale, seq_len=5000)
  again = positions.rope_frequencies(32, scaling=scale, seq_len=50)
  np.testing.assert_array_equal(first[0], again[0])
  np.testing.assert_allclose(first[0], theta(32, 10000.0), rtol=1e-15)


def hf_transformers():
  pytest.importorskip("torch")  # the HF rope functions compute in torch
  return pytest.importorskip("transformers")


def hf_init(config, seq_len):
  """(inv_freq float64, attention factor) from HF's ROPE_INIT_FUNCTIONS for a HF config."""
  from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

  inv_freq, m = ROPE_INIT_FUNCTIONS[config.rope_parameters["rope_type"]](config, "cpu", seq_len)
  return inv_freq.numpy().astype(np.float64), m


def hf_frequencies(d, base, scale, seq_len, max_position_embeddings, partial=1.0):
  transformers = hf_transformers()
  params = {**scale, "rope_theta": base, "partial_rotary_factor": partial}
  config = transformers.LlamaConfig(
    hidden_size=4 * d,
    num_attention_heads=4,
    head_dim=d,
    max_position_embeddings=max_position_embeddings,
    rope_parameters=params,
  )
  return hf_init(config, seq_len)


@pytest.mark.slow
@pytest.mark.parametrize("d, base, s, length", SETTINGS)
@pytest.mark.parametrize("partial", [1.0, 0.5])
def test_matches_hugging_face(d, base, s, length, partial):
  rotary_dim = int(d * partial)
  rng = np.random.default_rng(0)
  longrope = {
    "rope_type": "longrope",
    "factor": s,
    "short_factor": list(1 + rng.random(rotary_dim // 2)),
    "long_factor": list(1 + s * rng.random(rotary_dim // 2)),
  }
  cases = [  # (scaling, seq_len); HF's dynamic reads L from max_position_embeddings
    ({"rope_type": "linear", "factor": s}, None),
    ({"rope_type": "dynamic", "factor": s}, length // 2),
    ({"rope_type": "dynamic", "factor": s}, 5 * length),
    ({"rope_type": "yarn", "factor": s}, None),
    (
      {"rope_type": "yarn", "factor": s, "beta_fast": 16.0, "beta_slow": 2.0, "truncate": False},
      None,
    ),
    ({"rope_type": "yarn", "factor": s, "mscale": 0.8, "mscale_all_dim": 0.5}, None),
    ({"rope_type": "llama3", "factor": s, "low_freq_factor": 2.0, "high_freq_factor": 8.0}, None),
    (longrope, length),
    (longrope, 2 * length),
  ]
  for scale, seq_len in cases:
    ours = dict(scale)
    theirs = dict(scale)
    if scale["rope_type"] in ("yarn", "llama3", "longrope"):
      ours["original_max_position_embeddings"] = length
      theirs["original_max_position_embeddings"] = length
    if scale["rope_type"] == "dynamic":
      ours["original_max_position_embeddings"] = length
    inv_ref, m_ref = hf_frequencies(d, base, theirs, seq_len, length, partial)
    inv_freq, m = positions.rope_frequencies(d, base, ours, seq_len, rotary_dim)
    np.testing.assert_allclose(inv_freq, inv_ref, rtol=2e-6, err_msg=str(scale))
    assert m == pytest.approx(m_ref, rel=1e-6), scale


@pytest.mark.parametrize(
  "scale, message",
  [
    (
      {"rope_type": "yaarn"},
      "scaling.rope_type='yaarn' is not allowed; allowed: default, "
      "dynamic, linear, llama3, longrope, ntk, yarn",
    ),
    (
      {"rope_type": "linear", "factr": 2.0},
      "scaling.factr is not a known field; allowed: attention_factor, ",
    ),
    (
      {"rope_type": "linear", "factor": 0.5},
      "scaling.factor=0.5 is not allowed; allowed: numbers >= 1 for rope_type='linear'",
    ),
    (
      {"rope_type": "yarn", "original_max_position_embeddings": 64},
      "scaling.factor=None is not allowed; allowed: numbers >= 1 for rope_type='yarn'",
    ),
    (
      {"rope_type": "yarn", "factor": 2.0},
      "scaling.original_max_position_embeddings=None is not allowed; allowed: ints >= 1",
    ),
    (
      {"rope_type": "linear", "factor": 2.0, "n_hat": 4},  # lcx's own field: not ignored
      "scaling.n_hat=4 is not used by rope_type='linear'; leave it at its default 0",
    ),
    (
      {"rope_theta": 500.0},
      "scaling.rope_theta=500.0 differs from base=10000.0; the base is a trained field",
    ),
    (
      {"partial_rotary_factor": 0.5},
      "scaling.partial_rotary_factor=0.5 gives a rotary dim of "
      "int(8 * 0.5) = 4, but rotary_dim gives 8",
    ),
    (
      {"partial_rotary_factor": 1.5},
      "scaling.partial_rotary_factor=1.5 is not allowed; allowed: in (0, 1]",
    ),
    (
      {
        "rope_type": "longrope",
        "factor": 2.0,
        "original_max_position_embeddings": 64,
        "short_factor": [1.0] * 3,
        "long_factor": [1.0] * 4,
      },
      "scaling.short_factor=(1.0, 1.0, 1.0) is not allowed; allowed: 4 positive numbers (one "
      "per rotary pair)",
    ),
    (
      {
        "rope_type": "llama3",
        "factor": 2.0,
        "original_max_position_embeddings": 64,
        "low_freq_factor": 4.0,
      },
      "must satisfy 0 < low_freq_factor < high_freq_factor",
    ),
  ],
)
def test_invalid_scaling_names_the_field(scale, message):
  with pytest.raises(ValueError) as error:
    positions.rope_frequencies(8, 10000.0, scaling=scale, rotary_dim=8)
  assert message in str(error.value)


def test_odd_rotary_dim_is_rejected():
  with pytest.raises(
    ValueError,
    match=r"^rotary_dim=7 is not allowed; allowed: even numbers in "
    r"\[2, head_dim=8\]",
  ):
    positions.rope_frequencies(8, rotary_dim=7)


PHI3_STYLE = {
  "type": "longrope",
  "short_factor": [1.0] * 8,
  "long_factor": [2.0] * 8,
  "original_max_position_embeddings": 4096,
  "max_position_embeddings": 131072,
}


def test_longrope_without_factor_derives_it_as_hf():
  """Phi-3 has no `factor`: s = max_position_embeddings / L = 32, as HF derives it."""
  explicit = {k: v for k, v in PHI3_STYLE.items() if k != "max_position_embeddings"}
  for seq_len in (100, 10_000):
    inv_freq, m = positions.rope_frequencies(16, scaling=PHI3_STYLE, seq_len=seq_len)
    want_inv_freq, want_m = positions.rope_frequencies(
      16, scaling={**explicit, "factor": 32.0}, seq_len=seq_len
    )
    np.testing.assert_array_equal(inv_freq, want_inv_freq)
    assert m == want_m == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))
  # An explicit factor wins, as in HF.
  assert positions.rope_frequencies(16, scaling={**PHI3_STYLE, "factor": 2.0})[1] == (
    pytest.approx(math.sqrt(1 + math.log(2) / math.log(4096)))
  )


@pytest.mark.slow
def test_longrope_without_factor_matches_hugging_face():
  scale = {k: v for k, v in PHI3_STYLE.items() if k not in ("type", "max_position_embeddings")}
  for seq_len in (100, 10_000):
    inv_ref, m_ref = hf_frequencies(
      16, 10000.0, {"rope_type": "longrope", **scale}, seq_len, 131072
    )
    inv_freq, m = positions.rope_frequencies(16, scaling=PHI3_STYLE, seq_len=seq_len)
    np.testing.assert_allclose(inv_freq, inv_ref, rtol=2e-6)
    assert m == pytest.approx(m_ref, rel=1e-6)


def test_longrope_needs_factor_or_max_position_embeddings():
  scale = {k: v for k, v in PHI3_STYLE.items() if k != "max_position_embeddings"}
  with pytest.raises(ValueError) as error:
    positions.rope_frequencies(16, scaling=scale)
  assert str(error.value) == (
    "scaling.factor=None is not allowed; allowed: numbers >= 1 for rope_type='longrope' (unset: "
    "scaling.max_position_embeddings / scaling.original_max_position_embeddings)"
  )
  with pytest.raises(
    ValueError, match="scaling.max_position_embeddings=8192 is not used by rope_type='yarn'"
  ):
    positions.rope_frequencies(
      16, scaling={"rope_type": "yarn", "factor": 2.0, "max_position_embeddings": 8192}
    )


# --- Per-token lengths: the traced path computes the same formulas as the static one. ---

LONGROPE = {
  "rope_type": "longrope",
  "factor": 4.0,
  "original_max_position_embeddings": 64,
  "short_factor": list(np.linspace(1.0, 2.0, 8)),
  "long_factor": list(np.linspace(1.0, 6.0, 8)),
}
DYNAMIC = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 64}


@pytest.mark.parametrize("scale", [DYNAMIC, LONGROPE], ids=["dynamic", "longrope"])
def test_per_token_frequencies_equal_rope_frequencies_at_each_length(scale):
  lengths = [1, 40, 63, 64, 65, 100, 640, 6400]  # both sides of L = 64
  sc = scaling.resolve(scale, 16)
  inv_freq_BxLxR, m = scaling.token_frequencies(16, 10000.0, sc, jnp.asarray([lengths]))
  assert inv_freq_BxLxR.shape == (1, len(lengths), 8) and inv_freq_BxLxR.dtype == jnp.float32
  for inv_freq_R, n in zip(np.asarray(inv_freq_BxLxR)[0], lengths):
    want, want_m = positions.rope_frequencies(16, 10000.0, scale, seq_len=n)
    np.testing.assert_allclose(inv_freq_R, want, rtol=2e-6, err_msg=f"seq_len={n}")
    assert m == want_m
  short, long = (positions.rope_frequencies(16, 10000.0, scale, seq_len=n)[0] for n in (64, 65))
  assert not np.allclose(short, long, rtol=1e-3)  # the lengths above really cross L


@pytest.mark.parametrize("scale", [DYNAMIC, {**LONGROPE, "n_hat": 4}], ids=["dynamic", "longrope"])
def test_rope_angles_follow_each_tokens_own_length(scale):
  """A row holding a 10-token and a 90-token sequence: each token's angles are those of its
  own sequence's length, as if it were evaluated alone at that length."""
  sc = scaling.resolve(scale, 16)
  pos_BxL = jnp.asarray([list(range(10)) + list(range(90))])
  len_BxL = jnp.asarray([[10] * 10 + [90] * 90])
  angle_BxLxR, _ = scaling.rope_angles(pos_BxL, 16, 10000.0, sc, len_BxL)
  first, _ = scaling.rope_angles(pos_BxL[:, :10], 16, 10000.0, sc, 10)
  second, _ = scaling.rope_angles(pos_BxL[:, 10:], 16, 10000.0, sc, 90)
  np.testing.assert_allclose(angle_BxLxR[:, :10], first, rtol=2e-6)
  np.testing.assert_allclose(angle_BxLxR[:, 10:], second, rtol=2e-6)


def test_row_factors_give_each_row_the_angles_of_its_own_static_longrope():
  """The LongRoPE search's hook: factors and n_hat per batch row, traced inside jit, give each
  row exactly the angles a model built with that row's factors as constants gives."""
  other = list(np.linspace(1.5, 3.0, 8))
  sc = scaling.resolve(LONGROPE, 16)
  pos_BxL = jnp.asarray([list(range(100)), list(range(50)) + list(range(50))])
  len_BxL = jnp.asarray([[100] * 100, [50] * 50 + [50] * 50])

  @jax.jit
  def angles(long_factor_BxR, n_hat_B):
    rows = scaling.with_row_factors(sc, long_factor_BxR, n_hat_B)
    return scaling.rope_angles(pos_BxL, 16, 10000.0, rows, len_BxL)[0]

  got = angles(jnp.asarray([LONGROPE["long_factor"], other], jnp.float32), jnp.asarray([4, 0]))
  for row, (factors, n_hat) in enumerate([(LONGROPE["long_factor"], 4), (other, 0)]):
    static = scaling.resolve({**LONGROPE, "long_factor": factors, "n_hat": n_hat}, 16)
    want, _ = scaling.rope_angles(
      pos_BxL[row : row + 1], 16, 10000.0, static, len_BxL[row : row + 1]
    )
    np.testing.assert_array_equal(got[row], want[0])
  assert not np.allclose(got[0], got[1])
  rows = scaling.with_row_factors(sc, jnp.ones((2, 8)), jnp.zeros(2, jnp.int32))
  with pytest.raises(ValueError, match="need each token's sequence length"):
    scaling.rope_angles(pos_BxL, 16, 10000.0, rows, 100)
  with pytest.raises(ValueError, match="needs rope_type 'longrope'"):
    scaling.with_row_factors(scaling.resolve(DYNAMIC, 16), jnp.ones((2, 8)), jnp.zeros(2))


def test_length_independent_types_ignore_per_token_lengths():
  """Ordinary RoPE keeps its constant float64 frequencies whatever lengths come in."""
  sc = scaling.resolve({"rope_type": "yarn", "factor": 4.0}, 16, default_length=64)
  pos_BxL = jnp.arange(20)[None]
  with_lengths, m = scaling.rope_angles(pos_BxL, 16, 10000.0, sc, jnp.full((1, 20), 5000))
  inv_freq, want_m = scaling.frequencies(16, 10000.0, sc, None)
  np.testing.assert_array_equal(
    with_lengths, pos_BxL[..., None].astype(jnp.float32) * inv_freq.astype(np.float32)[None, None]
  )
  assert m == want_m


# --- Hugging Face dicts verbatim: known keys not read warn, rope_theta restates the base. ---


@pytest.mark.parametrize(
  "scale, key",
  [
    ({"rope_type": "linear", "factor": 2.0, "beta_fast": 16.0}, "beta_fast"),
    (
      {"rope_type": "linear", "factor": 2.0, "original_max_position_embeddings": 4096},
      "original_max_position_embeddings",
    ),
    (
      {
        "type": "dynamic",
        "factor": 2.0,
        "original_max_position_embeddings": 64,
        "attention_factor": 1.2,
      },
      "attention_factor",
    ),
    ({"rope_type": "default", "factor": 2.0}, "factor"),
    (
      {
        "rope_type": "yarn",
        "factor": 2.0,
        "original_max_position_embeddings": 64,
        "mrope_section": [2, 2],
      },
      "mrope_section",
    ),
  ],
)
def test_known_hf_keys_a_type_does_not_read_warn_and_are_ignored(scale, key):
  with pytest.warns(UserWarning) as record:
    inv_freq, m = positions.rope_frequencies(8, scaling=scale, seq_len=100)
  rope_type = scale.get("rope_type", scale.get("type"))
  assert [str(w.message).split(";")[0] for w in record] == [
    f"scaling.{key}={scale[key]!r} is not read by rope_type={rope_type!r}"
  ]
  without = {k: v for k, v in scale.items() if k != key}
  want_inv_freq, want_m = positions.rope_frequencies(8, scaling=without, seq_len=100)
  np.testing.assert_array_equal(inv_freq, want_inv_freq)
  assert m == want_m


def test_rope_theta_is_the_base():
  five = {"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5}
  np.testing.assert_allclose(
    positions.rope_frequencies(16, scaling=five)[0], theta(16, 5e5) / 2, rtol=1e-12
  )
  np.testing.assert_array_equal(
    positions.rope_frequencies(16, 5e5, five)[0], positions.rope_frequencies(16, scaling=five)[0]
  )
  with pytest.raises(ValueError, match=r"scaling.rope_theta=500000.0 differs from base=10000.0"):
    positions.rope_frequencies(16, 10000.0, five)


def test_partial_rotary_factor_gives_the_rotary_dim_as_hf():
  half = {"rope_type": "default", "partial_rotary_factor": 0.5}
  np.testing.assert_allclose(positions.rope_frequencies(64, 500.0, half)[0], theta(32, 500.0))
  np.testing.assert_array_equal(
    positions.rope_frequencies(64, 500.0, half, rotary_dim=32)[0],
    positions.rope_frequencies(64, 500.0, half)[0],
  )


# --- read_hf_scaling: HF config.json files and bare dicts. ---


def write_json(tmp_path, data, name="config.json"):
  path = tmp_path / name
  path.write_text(json.dumps(data))
  return str(path)


def hf_config(tmp_path):
  """HF's own reading of the config.json in tmp_path."""
  transformers = hf_transformers()
  return transformers.AutoConfig.from_pretrained(str(tmp_path))


LLAMA31 = {
  "model_type": "llama",
  "hidden_size": 256,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "max_position_embeddings": 131072,
  "rope_theta": 500000.0,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3",
  },
}
PHI3 = {
  "model_type": "phi3",
  "hidden_size": 256,
  "num_attention_heads": 4,
  "max_position_embeddings": 131072,
  "original_max_position_embeddings": 4096,
  "rope_theta": 10000.0,
  "partial_rotary_factor": 0.5,
  "rope_scaling": {
    "type": "longrope",
    "short_factor": [1.0] * 8 + [1.5] * 8,
    "long_factor": [1.0] * 4 + [2.0] * 4 + [3.0] * 4 + [4.0] * 4,
  },
}
TRANSFORMERS5 = {
  "model_type": "llama",
  "hidden_size": 256,
  "num_attention_heads": 4,
  "max_position_embeddings": 8192,
  "rope_parameters": {
    "rope_type": "yarn",
    "factor": 4.0,
    "rope_theta": 1e6,
    "original_max_position_embeddings": 2048,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "attention_factor": None,
  },
}
QWEN_YARN = {
  "model_type": "qwen2",
  "hidden_size": 256,
  "num_attention_heads": 4,
  "num_key_value_heads": 4,
  "max_position_embeddings": 131072,
  "rope_theta": 1e6,
  "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
}
DYNAMIC_CONFIG = {
  "model_type": "llama",
  "hidden_size": 256,
  "num_attention_heads": 4,
  "max_position_embeddings": 2048,
  "rope_theta": 10000.0,
  "rope_scaling": {"type": "dynamic", "factor": 2.0},
}


@pytest.mark.slow
@pytest.mark.parametrize(
  "data, expected",
  [
    (
      LLAMA31,
      {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_theta": 500000.0,
      },
    ),
    (
      PHI3,
      {
        "rope_type": "longrope",
        "short_factor": tuple(PHI3["rope_scaling"]["short_factor"]),
        "long_factor": tuple(PHI3["rope_scaling"]["long_factor"]),
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.5,
        "original_max_position_embeddings": 4096,
        "factor": 32.0,
      },
    ),
    (
      TRANSFORMERS5,
      {
        "rope_type": "yarn",
        "factor": 4.0,
        "rope_theta": 1e6,
        "original_max_position_embeddings": 2048,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
      },
    ),
    (
      QWEN_YARN,
      {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 32768,
        "rope_theta": 1e6,
      },
    ),
    (
      DYNAMIC_CONFIG,
      {
        "rope_type": "dynamic",
        "factor": 2.0,
        "rope_theta": 10000.0,
        "original_max_position_embeddings": 2048,
      },
    ),
  ],
  ids=["llama3.1", "phi3-longrope", "transformers5-yarn", "qwen-yarn-legacy-type", "dynamic"],
)
def test_read_hf_config_matches_hugging_face(tmp_path, data, expected):
  read = scaling.read_hf_scaling(write_json(tmp_path, data))
  assert read == expected
  config = hf_config(tmp_path)
  head_dim = data["hidden_size"] // data["num_attention_heads"]
  length = read.get("original_max_position_embeddings", 1)
  for seq_len in (None, length // 2, 3 * length):  # both sides of L
    inv_ref, m_ref = hf_init(config, seq_len)
    inv_freq, m = positions.rope_frequencies(head_dim, scaling=read, seq_len=seq_len)
    np.testing.assert_allclose(inv_freq, inv_ref, rtol=2e-6, err_msg=f"seq_len={seq_len}")
    assert m == pytest.approx(m_ref, rel=1e-6)


def test_read_bare_dict_and_use_it_as_model_config(tmp_path):
  path = write_json(
    tmp_path,
    {
      "type": "yarn",
      "factor": 4,
      "original_max_position_embeddings": 16,
      "rope_theta": 500000,
      "beta_fast": None,
    },
    "yarn.json",
  )
  read = scaling.read_hf_scaling(path)
  assert read == {
    "rope_type": "yarn",
    "factor": 4,
    "original_max_position_embeddings": 16,
    "rope_theta": 500000,
  }
  cfg = positions.default_config("rope")
  cfg.base = 500000.0
  cfg.scaling.update(read)
  dims = positions.Dims(d_model=64, num_heads=4, head_dim=16, max_len=32)
  positions.validate(cfg, dims)
  cfg.base = 10000.0
  with pytest.raises(ValueError) as error:
    positions.validate(cfg, dims)
  assert str(error.value) == (
    "model.position.scaling.rope_theta=500000.0 differs from model.position.base=10000.0; the "
    "base is a trained field: set model.position.scaling.rope_theta to it or leave it unset"
  )


@pytest.mark.parametrize(
  "content, message",
  [
    (None, "cannot read the rope scaling file (No such file or directory)"),
    ("{'rope_type': 'yarn'}", "not JSON (Expecting property name enclosed in double quotes"),
    ("[1, 2]", "expected a JSON object (a HF config.json or a rope scaling dict), got list"),
    (json.dumps({"model_type": "llama", "rope_theta": 1e4}), "no rope scaling in it"),
    (json.dumps({"model_type": "llama", "rope_scaling": None}), "no rope scaling in it"),
    (
      json.dumps({"rope_type": "proportional", "factor": 2.0}),
      "rope_type='proportional' is not allowed; allowed: default, dynamic, linear, llama3, "
      "longrope, ntk, yarn",
    ),
    (
      json.dumps({"rope_scaling": {"type": "linear", "factr": 2.0}}),
      "factr is not a known field; allowed: attention_factor, ",
    ),
    (
      json.dumps(
        {
          "rope_parameters": {
            "full_attention": {"rope_type": "default"},
            "sliding_attention": {"rope_type": "default"},
          }
        }
      ),
      "rope parameters per layer type (['full_attention', 'sliding_attention']) are not supported",
    ),
  ],
)
def test_read_hf_scaling_errors_name_the_file(tmp_path, content, message):
  path = tmp_path / "config.json"
  if content is not None:
    path.write_text(content)
  with pytest.raises(ValueError) as error:
    scaling.read_hf_scaling(str(path))
  assert str(error.value).startswith(f"{path}: {message}")


def test_read_hf_scaling_drops_a_key_its_rope_type_does_not_read_with_a_warning(tmp_path):
  """HF's rule stays at HF's files: what it returns passes lcx's config check, which refuses
  such a key (model.position.scaling.factor=0.5 with rope_type 'default')."""
  path = write_json(tmp_path, {"rope_scaling": {"rope_type": "default", "factor": 2.0}})
  with pytest.warns(UserWarning, match=rf"^{path}.factor=2.0 is not read by rope_type='default'"):
    assert scaling.read_hf_scaling(path) == {"rope_type": "default"}
  with pytest.raises(ValueError, match=r"^s.factor=2.0 is not used by rope_type='default'; "):
    scaling.resolve({"rope_type": "default", "factor": 2.0}, 8, "s", ignore_unread=False)


def test_longrope_attention_factor_spares_the_positions_below_n_hat():
  """The reference's mixed embedding: positions < n_hat take the original cos and sin, so
  neither the scaled frequencies nor the attention factor m = sqrt(1 + ln s / ln L); a query
  at 2 and a key at 10 then get factors 1 and m (their logit m times, not m^2)."""
  sc = scaling.resolve({**LONGROPE, "n_hat": 4}, 16)
  m = math.sqrt(1 + math.log(4.0) / math.log(64))
  pos_BxL = jnp.arange(12)[None]
  _, factor = scaling.rope_angles(pos_BxL, 16, 10000.0, sc, jnp.full((1, 12), 200))
  np.testing.assert_allclose(np.asarray(factor)[0, :, 0], [1.0] * 4 + [m] * 8, rtol=1e-6)
  cfg = positions.default_config("rope")
  cfg.scaling.update({**LONGROPE, "n_hat": 4})
  rope = positions.build(cfg, positions.Dims(64, 1, 16, 64), rngs=nnx.Rngs(0))
  x = jnp.asarray(np.random.default_rng(0).normal(size=(1, 1, 1, 16)), jnp.float32)
  length = jnp.full((1, 1), 200)

  def logit(q_pos, k_pos, scheme):
    q, k = scheme.rotate(
      x, x, jnp.asarray([[q_pos]]), jnp.asarray([[k_pos]]), q_len_BxL=length, k_len_BxL=length
    )
    return float(jnp.sum(q * k))

  no_factor = positions.build(cfg, positions.Dims(64, 1, 16, 64), rngs=nnx.Rngs(0))
  no_factor.scaling = dataclasses.replace(no_factor.scaling, attention_factor=1.0)
  assert logit(2, 10, rope) == pytest.approx(m * logit(2, 10, no_factor), rel=1e-5)
  assert logit(10, 2, rope) == pytest.approx(m * logit(10, 2, no_factor), rel=1e-5)
  assert logit(20, 10, rope) == pytest.approx(m * m * logit(20, 10, no_factor), rel=1e-5)
