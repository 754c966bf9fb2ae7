"""rope_frequencies: the test vectors of docs/positions.md, independent re-derivations of every
rope type, the Hugging Face implementation where installed, and the validation messages."""

import math

import numpy as np
import pytest

from lcx import positions
from lcx.positions import scaling

# (head_dim, base, factor, L)
SETTINGS = [(64, 10000.0, 4.0, 512), (128, 500000.0, 8.0, 8192), (32, 10000.0, 2.5, 1024)]


def theta(d, base):
  return np.array([base ** (-2 * i / d) for i in range(d // 2)])


@pytest.mark.parametrize("factor, expected", [(2, 1.0693), (4, 1.1386), (8, 1.2079),
                                              (16, 1.2773), (32, 1.3466)])
def test_yarn_attention_factor_vectors(factor, expected):
  _, m = positions.rope_frequencies(64, scaling={"rope_type": "yarn", "factor": float(factor),
                                                 "original_max_position_embeddings": 512})
  assert round(m, 4) == expected


@pytest.mark.parametrize("d, length, low, high", [(64, 512, 3, 16), (64, 1024, 5, 18),
                                                  (128, 4096, 20, 46)])
def test_yarn_low_high_vectors(d, length, low, high):
  assert scaling.yarn_correction_range(d, 1e4, length, 32, 1) == (low, high)
  inv_freq, _ = positions.rope_frequencies(d, scaling={
      "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": length})
  t = theta(d, 1e4)
  np.testing.assert_allclose(inv_freq[:low + 1], t[:low + 1], rtol=1e-12)  # extrapolated
  np.testing.assert_allclose(inv_freq[high:], t[high:] / 4, rtol=1e-12)  # interpolated
  assert np.all((inv_freq[low + 1:high] < t[low + 1:high])
                & (inv_freq[low + 1:high] > t[low + 1:high] / 4))


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
  """YaRN per pair, from the definitions in docs/positions.md."""
  corr = lambda r: d * math.log(length / (2 * math.pi * r)) / (2 * math.log(base))
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
      ({"rope_type": "longrope", "factor": s, "short_factor": list(short),
        "long_factor": list(long)}, length, t / short,
       math.sqrt(1 + math.log(s) / math.log(length))),
      ({"rope_type": "longrope", "factor": s, "short_factor": list(short),
        "long_factor": list(long)}, length + 1, t / long,
       math.sqrt(1 + math.log(s) / math.log(length))),
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
  _, m = positions.rope_frequencies(64, scaling={**base_cfg, "mscale": 1.0,
                                                 "mscale_all_dim": 0.707})
  assert m == pytest.approx((0.1 * math.log(40) + 1) / (0.1 * 0.707 * math.log(40) + 1))
  _, m = positions.rope_frequencies(64, scaling={**base_cfg, "attention_factor": 1.5})
  assert m == 1.5
  low, high = scaling.yarn_correction_range(64, 1e4, 512, 32, 1, truncate=False)
  assert 3 < low < 4 and 15 < high < 16  # (3, 16) once truncated


def test_partial_rotary_uses_rotary_dim_as_d():
  inv_freq, _ = positions.rope_frequencies(64, 500.0, rotary_dim=16)
  np.testing.assert_allclose(inv_freq, theta(16, 500.0))


def test_hf_style_dicts_work_unchanged():
  llama31 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
             "original_max_position_embeddings": 8192, "rope_type": "llama3"}
  qwen_legacy = {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn",
                 "beta_fast": None}
  np.testing.assert_allclose(positions.rope_frequencies(128, 5e5, llama31)[0],
                             llama3_reference(128, 5e5, 8.0, 8192))
  np.testing.assert_allclose(positions.rope_frequencies(128, 1e6, qwen_legacy)[0],
                             yarn_reference(128, 1e6, 4.0, 32768)[0])


def test_dynamic_depends_on_the_current_length_only():
  scale = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64}
  first = positions.rope_frequencies(32, scaling=scale, seq_len=50)
  positions.rope_frequencies(32, scaling=scale, seq_len=5000)
  again = positions.rope_frequencies(32, scaling=scale, seq_len=50)
  np.testing.assert_array_equal(first[0], again[0])
  np.testing.assert_allclose(first[0], theta(32, 10000.0), rtol=1e-15)


def hf_frequencies(d, base, scale, seq_len, max_position_embeddings, partial=1.0):
  pytest.importorskip("torch")  # the HF rope functions compute in torch
  transformers = pytest.importorskip("transformers")
  from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
  params = {**scale, "rope_theta": base, "partial_rotary_factor": partial}
  config = transformers.LlamaConfig(hidden_size=4 * d, num_attention_heads=4, head_dim=d,
                                    max_position_embeddings=max_position_embeddings,
                                    rope_parameters=params)
  inv_freq, m = ROPE_INIT_FUNCTIONS[scale["rope_type"]](config, "cpu", seq_len)
  return inv_freq.numpy().astype(np.float64), m


@pytest.mark.parametrize("d, base, s, length", SETTINGS)
@pytest.mark.parametrize("partial", [1.0, 0.5])
def test_matches_hugging_face(d, base, s, length, partial):
  rotary_dim = int(d * partial)
  rng = np.random.default_rng(0)
  longrope = {"rope_type": "longrope", "factor": s,
              "short_factor": list(1 + rng.random(rotary_dim // 2)),
              "long_factor": list(1 + s * rng.random(rotary_dim // 2))}
  cases = [  # (scaling, seq_len); HF's dynamic reads L from max_position_embeddings
      ({"rope_type": "linear", "factor": s}, None),
      ({"rope_type": "dynamic", "factor": s}, length // 2),
      ({"rope_type": "dynamic", "factor": s}, 5 * length),
      ({"rope_type": "yarn", "factor": s}, None),
      ({"rope_type": "yarn", "factor": s, "beta_fast": 16.0, "beta_slow": 2.0,
        "truncate": False}, None),
      ({"rope_type": "yarn", "factor": s, "mscale": 0.8, "mscale_all_dim": 0.5}, None),
      ({"rope_type": "llama3", "factor": s, "low_freq_factor": 2.0, "high_freq_factor": 8.0},
       None),
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


@pytest.mark.parametrize("scale, message", [
    ({"rope_type": "yaarn"}, "scaling.rope_type='yaarn' is not known; allowed: ['default', "
     "'dynamic', 'linear', 'llama3', 'longrope', 'ntk', 'yarn']"),
    ({"rope_type": "linear", "factr": 2.0}, "scaling.factr is not a known field; allowed fields"),
    ({"rope_type": "linear", "factor": 0.5}, "scaling.factor=0.5 must be a number >= 1 for "
     "rope_type='linear'"),
    ({"rope_type": "yarn", "original_max_position_embeddings": 64},
     "scaling.factor=None must be a number >= 1 for rope_type='yarn'"),
    ({"rope_type": "yarn", "factor": 2.0},
     "scaling.original_max_position_embeddings=None must be an int >= 1"),
    ({"rope_type": "linear", "factor": 2.0, "beta_fast": 16.0},
     "scaling.beta_fast=16.0 is not used by rope_type='linear'; leave it at its default 32.0"),
    ({"factor": 2.0}, "scaling.factor=2.0 is not used by rope_type='default'"),
    ({"rope_type": "longrope", "factor": 2.0, "original_max_position_embeddings": 64,
      "short_factor": [1.0] * 3, "long_factor": [1.0] * 4},
     "scaling.short_factor must be 4 positive numbers (one per rotary pair)"),
    ({"rope_type": "llama3", "factor": 2.0, "original_max_position_embeddings": 64,
      "low_freq_factor": 4.0}, "must satisfy 0 < low_freq_factor < high_freq_factor"),
])
def test_invalid_scaling_names_the_field(scale, message):
  with pytest.raises(ValueError) as error:
    positions.rope_frequencies(8, scaling=scale)
  assert message in str(error.value)


def test_odd_rotary_dim_is_rejected():
  with pytest.raises(ValueError, match=r"rotary_dim=7 must be an even number in \[2, "
                     r"head_dim=8\]"):
    positions.rope_frequencies(8, rotary_dim=7)


PHI3_STYLE = {"type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8,
              "original_max_position_embeddings": 4096, "max_position_embeddings": 131072}


def test_longrope_without_factor_derives_it_as_hf():
  """Phi-3 has no `factor`: s = max_position_embeddings / L = 32, as HF derives it."""
  explicit = {k: v for k, v in PHI3_STYLE.items() if k != "max_position_embeddings"}
  for seq_len in (100, 10_000):
    inv_freq, m = positions.rope_frequencies(16, scaling=PHI3_STYLE, seq_len=seq_len)
    want_inv_freq, want_m = positions.rope_frequencies(16, scaling={**explicit, "factor": 32.0},
                                                       seq_len=seq_len)
    np.testing.assert_array_equal(inv_freq, want_inv_freq)
    assert m == want_m == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))
  # An explicit factor wins, as in HF.
  assert positions.rope_frequencies(16, scaling={**PHI3_STYLE, "factor": 2.0})[1] == (
      pytest.approx(math.sqrt(1 + math.log(2) / math.log(4096))))


def test_longrope_without_factor_matches_hugging_face():
  scale = {k: v for k, v in PHI3_STYLE.items() if k not in ("type", "max_position_embeddings")}
  for seq_len in (100, 10_000):
    inv_ref, m_ref = hf_frequencies(16, 10000.0, {"rope_type": "longrope", **scale}, seq_len,
                                    131072)
    inv_freq, m = positions.rope_frequencies(16, scaling=PHI3_STYLE, seq_len=seq_len)
    np.testing.assert_allclose(inv_freq, inv_ref, rtol=2e-6)
    assert m == pytest.approx(m_ref, rel=1e-6)


def test_longrope_needs_factor_or_max_position_embeddings():
  scale = {k: v for k, v in PHI3_STYLE.items() if k != "max_position_embeddings"}
  with pytest.raises(ValueError) as error:
    positions.rope_frequencies(16, scaling=scale)
  assert str(error.value) == (
      "scaling.factor=None must be a number >= 1 for rope_type='longrope' (unset: "
      "scaling.max_position_embeddings / scaling.original_max_position_embeddings)")
  with pytest.raises(ValueError, match="scaling.max_position_embeddings=8192 is not used by "
                     "rope_type='yarn'"):
    positions.rope_frequencies(16, scaling={"rope_type": "yarn", "factor": 2.0,
                                            "max_position_embeddings": 8192})
