"""RoPE frequency scaling: one pure function, `rope_frequencies`, and a registry of rope types.

The `scaling` argument is a Hugging Face style `rope_scaling` dict, so configs people already have
work unchanged ({"rope_type": "yarn", "factor": 4.0, ...}; the legacy key "type" is accepted too).
One exception: HF `longrope` configs without `factor` (Phi-3) derive it from two top-level
fields, max_position_embeddings / original_max_position_embeddings; copy both into the dict.
Frequencies are numpy float64 computed at trace time from static values, so they are constants
in the compiled program. Dynamic methods (dynamic, longrope) depend on the current length only:
there is no cache and no state, so nothing leaks from one call into the next (HF #25306).

Notation (docs/positions.md): rotary dim d, pair i, theta_i = base^(-2i/d), training length
L = original_max_position_embeddings, scale s = factor.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from lcx.positions.registry import Unset

# Every field a rotary scheme's `scaling` sub-dict holds. None (Unset) means "no value": each
# rope type says which fields it reads; a field it does not read must keep its default.
SCALING_DEFAULTS = {
    "rope_type": "default",
    "factor": Unset(float),  # s >= 1; required by every type but "default"
    "original_max_position_embeddings": Unset(int),  # L; None: the training length
    "beta_fast": 32.0,  # yarn
    "beta_slow": 1.0,  # yarn
    "mscale": Unset(float),  # yarn
    "mscale_all_dim": Unset(float),  # yarn
    "attention_factor": Unset(float),  # yarn, longrope; None: the paper's formula
    "truncate": True,  # yarn
    "low_freq_factor": 1.0,  # llama3
    "high_freq_factor": 4.0,  # llama3
    "short_factor": Unset(tuple),  # longrope: d/2 rescale factors used up to L
    "long_factor": Unset(tuple),  # longrope: d/2 rescale factors used beyond L
    "n_hat": 0,  # longrope: positions < n_hat keep the unscaled frequencies
    "max_position_embeddings": Unset(int),  # longrope: factor = this / L when factor is unset
}


# The validated form of a scaling dict: every field present, defaults filled in; frozen and
# hashable, so a scheme can hold it as static data.
Scaling = dataclasses.make_dataclass(
    "Scaling", [(k, object, dataclasses.field(default=None if isinstance(v, Unset) else v))
                for k, v in SCALING_DEFAULTS.items()], frozen=True)

LENGTH = "original_max_position_embeddings"


@dataclasses.dataclass(frozen=True)
class RopeType:
  """fn(theta_R, d, base, scaling, seq_len) -> (inv_freq_R, attention_factor).

  `fields`: the scaling fields the type reads (besides rope_type); `check(scaling, d, where)`
  validates their values beyond what every type checks (factor >= 1, L >= 1).
  """

  fn: Callable[..., tuple[np.ndarray, float]]
  fields: tuple[str, ...]
  check: Callable[[Scaling, int, str], None] | None


ROPE_TYPES: dict[str, RopeType] = {}


def _rope_type(name: str, fields: tuple[str, ...] = (), check=None):

  def wrap(fn):
    ROPE_TYPES[name] = RopeType(fn, fields, check)
    return fn

  return wrap


def theta(rotary_dim: int, base: float) -> np.ndarray:
  """Unscaled RoPE inverse frequencies base^(-2i/d), float64, shape (d/2,)."""
  return base ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)


@_rope_type("default")
def _default(theta_R, d, base, sc, seq_len):
  del d, base, sc, seq_len
  return theta_R, 1.0


@_rope_type("linear", ("factor",))
def _linear(theta_R, d, base, sc, seq_len):
  """Position Interpolation (Chen 2023): p -> p/s, the same as theta_i / s."""
  del d, base, seq_len
  return theta_R / sc.factor, 1.0


def _ntk_base(base: float, d: int, scale: float) -> float:
  """YaRN paper eq. 16: b' = b * s^(d/(d-2))."""
  return base * scale ** (d / (d - 2))


def _check_ntk(sc, d, where):
  if d <= 2:
    raise ValueError(f"{where}.rope_type={sc.rope_type!r} needs a rotary dim > 2, got {d}")


@_rope_type("ntk", ("factor",), check=_check_ntk)
def _ntk(theta_R, d, base, sc, seq_len):
  """NTK-aware: a larger base, so low frequencies interpolate and high ones barely move."""
  del theta_R, seq_len
  return theta(d, _ntk_base(base, d, sc.factor)), 1.0


@_rope_type("dynamic", ("factor", LENGTH), check=_check_ntk)
def _dynamic(theta_R, d, base, sc, seq_len):
  """Dynamic NTK (HF `dynamic`): plain RoPE up to L, then the base grows with the length l.

  Unlike HF, L here is original_max_position_embeddings (HF reads max_position_embeddings).
  """
  length = sc.original_max_position_embeddings
  if seq_len is None or seq_len <= length:
    return theta_R, 1.0
  return theta(d, _ntk_base(base, d, sc.factor * seq_len / length - (sc.factor - 1))), 1.0


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
  """YaRN attention factor m(s, k) = 0.1 * k * ln(s) + 1, and 1 for s <= 1."""
  return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_correction_range(d: int, base: float, length: int, beta_fast: float, beta_slow: float,
                          truncate: bool = True) -> tuple[float, float]:
  """The pair indices (low, high) between which YaRN ramps from extrapolation to interpolation.

  corr(r) is the pair index whose wavelength fits r times into L.
  """
  corr = lambda r: d * math.log(length / (2 * math.pi * r)) / (2 * math.log(base))
  low, high = corr(beta_fast), corr(beta_slow)
  if truncate:
    low, high = math.floor(low), math.ceil(high)
  return max(low, 0), min(high, d - 1)


@_rope_type("yarn", ("factor", LENGTH, "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                     "attention_factor", "truncate"))
def _yarn(theta_R, d, base, sc, seq_len):
  """YaRN (Peng 2023) as HF and the authors' code compute it: the ramp is linear in the pair
  index i (the paper states it in r = L / lambda_i); high frequencies are kept, low ones / s."""
  del seq_len
  low, high = yarn_correction_range(d, base, sc.original_max_position_embeddings, sc.beta_fast,
                                    sc.beta_slow, sc.truncate)
  if low == high:
    high += 0.001  # as HF: avoid a division by zero
  ramp_R = np.clip((np.arange(d // 2) - low) / (high - low), 0.0, 1.0)
  extrapolate_R = 1.0 - ramp_R
  inv_freq_R = theta_R / sc.factor * (1.0 - extrapolate_R) + theta_R * extrapolate_R
  factor = sc.attention_factor
  if factor is None and sc.mscale and sc.mscale_all_dim:
    factor = yarn_mscale(sc.factor, sc.mscale) / yarn_mscale(sc.factor, sc.mscale_all_dim)
  elif factor is None:
    factor = yarn_mscale(sc.factor)
  return inv_freq_R, factor


def _check_llama3(sc, d, where):
  del d
  if not 0 < sc.low_freq_factor < sc.high_freq_factor:
    raise ValueError(f"{where}.low_freq_factor={sc.low_freq_factor} and {where}.high_freq_factor="
                     f"{sc.high_freq_factor} must satisfy 0 < low_freq_factor < high_freq_factor")


@_rope_type("llama3", ("factor", LENGTH, "low_freq_factor", "high_freq_factor"),
            check=_check_llama3)
def _llama3(theta_R, d, base, sc, seq_len):
  """Llama 3.1 `apply_scaling`: keep wavelengths < L/high, divide those > L/low by s, and blend
  linearly in L/lambda in between. One clipped blend weight covers all three bands."""
  del d, base, seq_len
  length, low, high = sc.original_max_position_embeddings, sc.low_freq_factor, sc.high_freq_factor
  wavelength_R = 2 * math.pi / theta_R
  smooth_R = np.clip((length / wavelength_R - low) / (high - low), 0.0, 1.0)
  return (1 - smooth_R) * theta_R / sc.factor + smooth_R * theta_R, 1.0


def _check_longrope(sc, d, where):
  for key in ("short_factor", "long_factor"):
    value = getattr(sc, key)
    if value is None or len(value) != d // 2 or min(value) <= 0:
      raise ValueError(f"{where}.{key} must be {d // 2} positive numbers (one per rotary pair), "
                       f"got {value!r}")
  if sc.n_hat < 0:
    raise ValueError(f"{where}.n_hat={sc.n_hat} must be >= 0")


@_rope_type("longrope", ("factor", LENGTH, "short_factor", "long_factor", "attention_factor",
                         "n_hat", "max_position_embeddings"), check=_check_longrope)
def _longrope(theta_R, d, base, sc, seq_len):
  """LongRoPE (Ding 2024): searched per-pair factors, short ones up to L, long ones beyond.

  `n_hat` (initial positions left unscaled) acts on positions, so `rope_angles` applies it.
  """
  del d, base
  length = sc.original_max_position_embeddings
  use_long = seq_len is not None and seq_len > length
  rescale_R = np.asarray(sc.long_factor if use_long else sc.short_factor, np.float64)
  factor = sc.attention_factor
  if factor is None:
    factor = 1.0 if sc.factor <= 1 else math.sqrt(1 + math.log(sc.factor) / math.log(length))
  return theta_R / rescale_R, factor


def resolve(scaling, rotary_dim: int, where: str = "scaling",
            default_length: int | None = None) -> Scaling:
  """Validates a HF style dict (None entries mean unset) into `Scaling`; errors name `where`.

  `default_length` stands in for an unset original_max_position_embeddings (schemes pass the
  training length) where the rope type reads it.
  """
  given = {k: v for k, v in dict(scaling or {}).items() if v is not None}
  if "type" in given:  # HF's legacy key
    given.setdefault("rope_type", given.pop("type"))
  unknown = sorted(set(given) - set(SCALING_DEFAULTS))
  if unknown:
    raise ValueError(f"{where}.{unknown[0]} is not a known field; allowed fields: "
                     f"{sorted(SCALING_DEFAULTS)}")
  rope_type = given.get("rope_type", "default")
  if rope_type not in ROPE_TYPES:
    raise ValueError(f"{where}.rope_type={rope_type!r} is not known; allowed: "
                     f"{sorted(ROPE_TYPES)}")
  kind = ROPE_TYPES[rope_type]
  if LENGTH in kind.fields and default_length is not None:
    given.setdefault(LENGTH, default_length)
  defaults = Scaling()
  for key in sorted(set(given) - set(kind.fields) - {"rope_type"}):
    if given[key] != getattr(defaults, key):
      raise ValueError(f"{where}.{key}={given[key]!r} is not used by rope_type={rope_type!r}; "
                       f"leave it at its default {getattr(defaults, key)!r}. Fields read by "
                       f"{rope_type!r}: {list(kind.fields)}")
  if "factor" not in given and {"max_position_embeddings", LENGTH} <= set(given):  # as HF
    given["factor"] = given["max_position_embeddings"] / given[LENGTH]
  sc = Scaling(**{k: tuple(v) if isinstance(v, list) else v for k, v in given.items()})
  if "factor" in kind.fields and (sc.factor is None or sc.factor < 1):
    derive = (f" (unset: {where}.max_position_embeddings / {where}.{LENGTH})"
              if "max_position_embeddings" in kind.fields else "")
    raise ValueError(f"{where}.factor={sc.factor!r} must be a number >= 1 for "
                     f"rope_type={rope_type!r}{derive}")
  if LENGTH in kind.fields and (sc.original_max_position_embeddings is None
                                or sc.original_max_position_embeddings < 1):
    raise ValueError(f"{where}.{LENGTH}={sc.original_max_position_embeddings!r} must be an int "
                     f">= 1 (the training length) for rope_type={rope_type!r}")
  if kind.check is not None:
    kind.check(sc, rotary_dim, where)
  return sc


def check_rotary_dim(head_dim: int, rotary_dim: int | None, where: str = "rotary_dim") -> int:
  """The rotary dim (head_dim when None); it must be even and in [2, head_dim]."""
  rotary_dim = head_dim if rotary_dim is None else rotary_dim
  if rotary_dim % 2 or not 2 <= rotary_dim <= head_dim:
    raise ValueError(f"{where}={rotary_dim} must be an even number in [2, head_dim={head_dim}] "
                     "(None: head_dim)")
  return rotary_dim


def frequencies(rotary_dim: int, base: float, sc: Scaling,
                seq_len: int | None) -> tuple[np.ndarray, float]:
  """`rope_frequencies` for a checked rotary dim and an already validated `Scaling`."""
  inv_freq_R, factor = ROPE_TYPES[sc.rope_type].fn(theta(rotary_dim, base), rotary_dim, base, sc,
                                                   seq_len)
  return np.asarray(inv_freq_R, np.float64), float(factor)


def rope_frequencies(head_dim, base=10000.0, scaling=None, seq_len=None, rotary_dim=None):
  """Returns (inv_freq, attention_factor): float64 array of rotary_dim/2 and a float.

  `scaling` is a HF `rope_scaling` dict (or None: plain RoPE); `seq_len` is the current length,
  read by `dynamic` and `longrope` only. The attention factor multiplies cos and sin (as in HF),
  so it scales the logits by its square.
  """
  d = check_rotary_dim(head_dim, rotary_dim)
  return frequencies(d, base, resolve(scaling, d), seq_len)


def rope_angles(pos_BxL: jax.Array, rotary_dim: int, base: float, sc: Scaling,
                seq_len: int | None) -> tuple[jax.Array, float]:
  """Rotation angles pos * inv_freq, float32 BxLxR, and the attention factor.

  LongRoPE's n_hat is applied exactly as the paper's rule, per token: a position p < n_hat is
  rotated by p * theta_i (unscaled), any other by p * inv_freq_i. A query and a key on different
  sides of n_hat therefore use different frequency sets, as in the paper; their logit then
  depends on both positions, not only on their difference.
  """
  inv_freq_R, factor = frequencies(rotary_dim, base, sc, seq_len)
  pos_BxLx1 = jnp.asarray(pos_BxL, jnp.float32)[..., None]
  angle_BxLxR = pos_BxLx1 * jnp.asarray(inv_freq_R, jnp.float32)
  if sc.n_hat:
    unscaled_R = jnp.asarray(theta(rotary_dim, base), jnp.float32)
    angle_BxLxR = jnp.where(pos_BxLx1 < sc.n_hat, pos_BxLx1 * unscaled_R, angle_BxLxR)
  return angle_BxLxR, factor
