"""RoPE frequency scaling: one pure function, `rope_frequencies`, and a registry of rope types.

The `scaling` argument is a Hugging Face style `rope_scaling` / `rope_parameters` dict, so configs
people already have work unchanged ({"rope_type": "yarn", "factor": 4.0, ...}; the legacy key
"type" and the transformers 5 key "rope_theta" are accepted too). A known HF key that the rope type
does not read is ignored with a warning, as HF does; an unknown key is an error. HF configs keep a
few values at the top level (rope_theta, max_position_embeddings, ...): `read_hf_scaling` reads a
config.json and moves them into the dict as HF derives them.
Frequencies are numpy float64 computed at trace time from static values, so they are constants
in the compiled program. The length-dependent methods (dynamic, longrope) depend on the current
length only, and with per-token lengths (`rope_angles`) each token gets the frequencies of its
own sequence's length, computed in the program (float32, as HF). There is no cache and no
state, so nothing leaks from one call into the next (HF #25306). One exception to "constants":
the LongRoPE search passes its candidates' factors as per-row inputs (`with_row_factors`).

Notation: rotary dim d, pair i, theta_i = base^(-2i/d), training length
L = original_max_position_embeddings, scale s = factor.
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from lcx import errors
from lcx.field import Unset
from lcx.model.positions import fields

# Every field a rotary scheme's `scaling` sub-dict holds, declared with the schemes' fields.
SCALING_DEFAULTS = fields.SCALING_DEFAULTS

# The keys of a Hugging Face rope dict (transformers' `RopeParameters`, plus the legacy "type").
# One that a rope type does not read is ignored with a warning, as HF does; lcx's own fields
# (n_hat, max_position_embeddings) must keep their defaults where they are not read.
HF_KEYS = frozenset(
  {
    "rope_type",
    "type",
    "rope_theta",
    "partial_rotary_factor",
    "factor",
    "original_max_position_embeddings",
    "attention_factor",
    "beta_fast",
    "beta_slow",
    "short_factor",
    "long_factor",
    "low_freq_factor",
    "high_freq_factor",
    "mscale",
    "mscale_all_dim",
    "truncate",
    "mrope_section",
  }
)
# Read by every rope type (they restate the scheme's base and rotary_dim, which resolve checks).
# resonance is lcx's own: it rounds whatever wavelengths the type gives.
READ_BY_ALL = ("rope_type", "rope_theta", "partial_rotary_factor", "resonance")


# The validated form of a scaling dict: every field present, defaults filled in; frozen and
# hashable, so a scheme can hold it as static data.
Scaling = dataclasses.make_dataclass(
  "Scaling",
  [
    (k, object, dataclasses.field(default=None if isinstance(v, Unset) else v))
    for k, v in SCALING_DEFAULTS.items()
  ],
  frozen=True,
)

LENGTH = "original_max_position_embeddings"


@dataclasses.dataclass(frozen=True)
class RopeType:
  """fn(theta_R, d, base, scaling, len_S, xp) -> (inv_freq_SxR or inv_freq_R, attention_factor).

  `fields`: the scaling fields the type reads (besides READ_BY_ALL); `check(scaling, d, where)`
  validates their values beyond what every type checks (factor >= 1, L >= 1). `per_length`:
  the frequencies depend on the current length `len_S`, an array of any shape S (a 0-d one for
  one length); such a type writes its formula once over the array module `xp` (numpy float64
  at trace time, or jax.numpy float32 for traced per-token lengths) and returns S x R.
  Other types ignore len_S and xp and are only ever called with numpy.
  """

  fn: Callable[..., tuple[np.ndarray, float]]
  fields: tuple[str, ...]
  check: Callable[[Scaling, int, str], None] | None
  per_length: bool


ROPE_TYPES: dict[str, RopeType] = {}


def _rope_type(name: str, fields: tuple[str, ...] = (), check=None, per_length=False):

  def wrap(fn):
    ROPE_TYPES[name] = RopeType(fn, fields, check, per_length)
    return fn

  return wrap


def theta(rotary_dim: int, base, xp=np):
  """Unscaled RoPE inverse frequencies base^(-2i/d): shape (d/2,) for a float base, ...x(d/2)
  for a base of shape ...x1.

  float64 with numpy and a float base; with `xp` = jax.numpy and a float32 base, float32.
  """
  exponent_R = -xp.arange(0, rotary_dim, 2) / rotary_dim
  return base ** exponent_R.reshape((1,) * (xp.ndim(base) - 1) + exponent_R.shape)


@_rope_type("default")
def _default(theta_R, d, base, sc, len_S, xp):
  del d, base, sc, len_S, xp
  return theta_R, 1.0


@_rope_type("linear", ("factor",))
def _linear(theta_R, d, base, sc, len_S, xp):
  """Position Interpolation (Chen 2023): p -> p/s, the same as theta_i / s."""
  del d, base, len_S, xp
  return theta_R / sc.factor, 1.0


def _ntk_base(base: float, d: int, scale: float) -> float:
  """YaRN paper eq. 16: b' = b * s^(d/(d-2))."""
  return base * scale ** (d / (d - 2))


def _check_ntk(sc, d, where):
  if d <= 2:
    raise ValueError(f"{where}.rope_type={sc.rope_type!r} needs a rotary dim > 2, got {d}")


@_rope_type("ntk", ("factor",), check=_check_ntk)
def _ntk(theta_R, d, base, sc, len_S, xp):
  """NTK-aware: a larger base, so low frequencies interpolate and high ones barely move."""
  del theta_R, len_S, xp
  return theta(d, _ntk_base(base, d, sc.factor)), 1.0


@_rope_type("dynamic", ("factor", LENGTH), check=_check_ntk, per_length=True)
def _dynamic(theta_R, d, base, sc, len_S, xp):
  """Dynamic NTK (HF `dynamic`): plain RoPE up to L, then the base grows with the length l.

  Unlike HF, L here is original_max_position_embeddings (HF reads max_position_embeddings;
  `read_hf_scaling` copies it here). Lengths up to L keep theta_R exactly; the growth formula
  sees max(l, L), so it stays finite where it is not selected.
  """
  length = sc.original_max_position_embeddings
  len_Sx1 = len_S[..., None]
  grown_Sx1 = sc.factor * xp.maximum(len_Sx1, length) / length - (sc.factor - 1)
  grown_SxR = theta(d, _ntk_base(base, d, grown_Sx1), xp)
  return xp.where(len_Sx1 > length, grown_SxR, theta_R.reshape((1,) * len_S.ndim + (-1,))), 1.0


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
  """YaRN attention factor m(s, k) = 0.1 * k * ln(s) + 1, and 1 for s <= 1."""
  return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_correction_range(
  d: int, base: float, length: int, beta_fast: float, beta_slow: float, truncate: bool = True
) -> tuple[float, float]:
  """The pair indices (low, high) between which YaRN ramps from extrapolation to interpolation.

  corr(r) is the pair index whose wavelength fits r times into L.
  """

  def corr(r):
    return d * math.log(length / (2 * math.pi * r)) / (2 * math.log(base))

  low, high = corr(beta_fast), corr(beta_slow)
  if truncate:
    low, high = math.floor(low), math.ceil(high)
  return max(low, 0), min(high, d - 1)


@_rope_type(
  "yarn",
  (
    "factor",
    LENGTH,
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "attention_factor",
    "truncate",
  ),
)
def _yarn(theta_R, d, base, sc, len_S, xp):
  """YaRN (Peng 2023) as HF and the authors' code compute it: the ramp is linear in the pair
  index i (the paper states it in r = L / lambda_i); high frequencies are kept, low ones / s."""
  del len_S, xp
  low, high = yarn_correction_range(
    d, base, sc.original_max_position_embeddings, sc.beta_fast, sc.beta_slow, sc.truncate
  )
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
    raise ValueError(
      f"{where}.low_freq_factor={sc.low_freq_factor} and {where}.high_freq_factor="
      f"{sc.high_freq_factor} must satisfy 0 < low_freq_factor < high_freq_factor"
    )


@_rope_type(
  "llama3", ("factor", LENGTH, "low_freq_factor", "high_freq_factor"), check=_check_llama3
)
def _llama3(theta_R, d, base, sc, len_S, xp):
  """Llama 3.1 `apply_scaling`: keep wavelengths < L/high, divide those > L/low by s, and blend
  linearly in L/lambda in between. One clipped blend weight covers all three bands."""
  del d, base, len_S, xp
  length, low, high = sc.original_max_position_embeddings, sc.low_freq_factor, sc.high_freq_factor
  wavelength_R = 2 * math.pi / theta_R
  smooth_R = np.clip((length / wavelength_R - low) / (high - low), 0.0, 1.0)
  return (1 - smooth_R) * theta_R / sc.factor + smooth_R * theta_R, 1.0


def _check_longrope(sc, d, where):
  for key in ("short_factor", "long_factor"):
    value = getattr(sc, key)
    if value is None or len(value) != d // 2 or min(value) <= 0:
      raise errors.not_allowed(
        f"{where}.{key}", value, f"{d // 2} positive numbers (one per rotary pair)"
      )
  if sc.n_hat < 0:
    raise errors.not_allowed(f"{where}.n_hat", sc.n_hat, ">= 0")


@_rope_type(
  "longrope",
  (
    "factor",
    LENGTH,
    "short_factor",
    "long_factor",
    "attention_factor",
    "n_hat",
    "max_position_embeddings",
  ),
  check=_check_longrope,
  per_length=True,
)
def _longrope(theta_R, d, base, sc, len_S, xp):
  """LongRoPE (Ding 2024): searched per-pair factors, short ones up to L, long ones beyond.

  The attention factor does not depend on the length. `n_hat` (initial positions left
  unscaled) acts on positions, so `rope_angles` applies it.
  """
  del d, base
  length = sc.original_max_position_embeddings

  def as_array(factors):
    """R factors shaped to broadcast against len_S[..., None] (the search's per-row factors
    come as Bx1xR already)."""
    array = xp.asarray(factors, theta_R.dtype)
    return array.reshape((1,) * len_S.ndim + (-1,)) if array.ndim == 1 else array

  rescale_SxR = xp.where(
    len_S[..., None] > length, as_array(sc.long_factor), as_array(sc.short_factor)
  )
  factor = sc.attention_factor
  if factor is None:
    factor = 1.0 if sc.factor <= 1 else math.sqrt(1 + math.log(sc.factor) / math.log(length))
  return theta_R.reshape((1,) * len_S.ndim + (-1,)) / rescale_SxR, factor


def _sibling(where: str, name: str) -> str:
  """The field `name` beside the scaling dict at `where` (model.position.scaling -> .base)."""
  parent = where.rpartition(".")[0]
  return f"{parent}.{name}" if parent else name


def resolve(
  scaling,
  rotary_dim: int,
  where: str = "scaling",
  default_length: int | None = None,
  *,
  base: float | None = None,
  head_dim: int | None = None,
  ignore_unread: bool = True,
) -> Scaling:
  """Validates a HF style dict (None entries mean unset) into `Scaling`; errors name `where`.

  A known HF key the rope type does not read is ignored with a warning, as HF does (for
  `rope_frequencies`' HF dicts); `ignore_unread=False` refuses it, as lcx's own config does
  (`model.position.scaling.factor=0.5` with rope_type='default' would change nothing).

  `default_length` stands in for an unset original_max_position_embeddings (schemes pass the
  training length) where the rope type reads it. `base` and `head_dim`, when given, are the
  scheme's: the dict's rope_theta and partial_rotary_factor only restate them (they are trained
  properties), so one that disagrees is an error naming both fields.
  """
  given = {k: v for k, v in dict(scaling or {}).items() if v is not None}
  if "type" in given:  # HF's legacy key
    given.setdefault("rope_type", given.pop("type"))
  unknown = sorted(set(given) - set(SCALING_DEFAULTS))
  if unknown:
    raise errors.unknown_field(f"{where}.{unknown[0]}", SCALING_DEFAULTS)
  rope_type = given.get("rope_type", "default")
  if rope_type not in ROPE_TYPES:
    raise errors.not_allowed(f"{where}.rope_type", rope_type, sorted(ROPE_TYPES))
  kind = ROPE_TYPES[rope_type]
  if LENGTH in kind.fields and default_length is not None:
    given.setdefault(LENGTH, default_length)
  for key in _unread(given, rope_type):
    if key not in HF_KEYS or not ignore_unread:
      raise ValueError(
        f"{where}.{key}={given[key]!r} is not used by rope_type={rope_type!r}; "
        f"leave it at its default {getattr(Scaling(), key)!r}. Fields read by "
        f"{rope_type!r}: {list(kind.fields)}; rope types that read {key}: "
        f"{', '.join(t for t, k in ROPE_TYPES.items() if key in k.fields) or 'none'}"
      )
    _warn_unread(where, key, given.pop(key), rope_type)
  if "factor" not in given and {"max_position_embeddings", LENGTH} <= set(given):  # as HF
    given["factor"] = given["max_position_embeddings"] / given[LENGTH]
  sc = Scaling(**{k: tuple(v) if isinstance(v, list) else v for k, v in given.items()})
  if "factor" in kind.fields and (sc.factor is None or sc.factor < 1):
    derive = (
      f" (unset: {where}.max_position_embeddings / {where}.{LENGTH})"
      if "max_position_embeddings" in kind.fields
      else ""
    )
    raise errors.not_allowed(
      f"{where}.factor", sc.factor, f"numbers >= 1 for rope_type={rope_type!r}{derive}"
    )
  if LENGTH in kind.fields and (
    sc.original_max_position_embeddings is None or sc.original_max_position_embeddings < 1
  ):
    raise errors.not_allowed(
      f"{where}.{LENGTH}",
      sc.original_max_position_embeddings,
      f"ints >= 1 (the training length) for rope_type={rope_type!r}",
    )
  if not isinstance(sc.resonance, bool):
    raise errors.not_allowed(f"{where}.resonance", sc.resonance, "True or False")
  _check_restated(sc, rotary_dim, where, base, head_dim)
  if kind.check is not None:
    kind.check(sc, rotary_dim, where)
  return sc


def _unread(given: dict, rope_type: str) -> list[str]:
  """The keys of `given` that `rope_type` does not read, set to other than their defaults."""
  defaults, kind = Scaling(), ROPE_TYPES[rope_type]
  return [
    key
    for key in sorted(set(given) - set(kind.fields) - set(READ_BY_ALL))
    if given[key] != getattr(defaults, key)
  ]


def _warn_unread(where: str, key: str, value, rope_type: str) -> None:
  warnings.warn(
    f"{where}.{key}={value!r} is not read by rope_type={rope_type!r}; ignored, as Hugging "
    f"Face does. Fields read by {rope_type!r}: {list(ROPE_TYPES[rope_type].fields)}"
  )


def _check_restated(sc, rotary_dim, where, base, head_dim):
  """rope_theta must be the base; int(head_dim * partial_rotary_factor) must be rotary_dim."""
  if sc.rope_theta is not None and base is not None and float(sc.rope_theta) != float(base):
    raise ValueError(
      f"{where}.rope_theta={sc.rope_theta!r} differs from "
      f"{_sibling(where, 'base')}={base!r}; the base is a trained field: set "
      f"{where}.rope_theta to it or leave it unset"
    )
  prf = sc.partial_rotary_factor
  if prf is not None and not 0 < prf <= 1:
    raise errors.not_allowed(f"{where}.partial_rotary_factor", prf, "in (0, 1]")
  if prf is not None and head_dim is not None and int(head_dim * prf) != rotary_dim:
    raise ValueError(
      f"{where}.partial_rotary_factor={prf!r} gives a rotary dim of "
      f"int({head_dim} * {prf!r}) = {int(head_dim * prf)}, but "
      f"{_sibling(where, 'rotary_dim')} gives {rotary_dim}; the rotary dim is "
      f"trained: make them agree or leave {where}.partial_rotary_factor unset"
    )


def check_rotary_dim(head_dim: int, rotary_dim: int | None, where: str = "rotary_dim") -> int:
  """The rotary dim (head_dim when None); it must be even and in [2, head_dim]."""
  rotary_dim = head_dim if rotary_dim is None else rotary_dim
  if rotary_dim % 2 or not 2 <= rotary_dim <= head_dim:
    raise errors.not_allowed(
      where, rotary_dim, f"even numbers in [2, head_dim={head_dim}] (None: head_dim)"
    )
  return rotary_dim


def resonate(inv_freq, xp=np):
  """Resonance RoPE (Wang 2024, 2403.00071): every wavelength 2 pi / inv_freq rounded to the
  nearest integer (at least 1), after the rope type's scaling (Resonance YaRN rounds YaRN's).

  An integer wavelength repeats exactly at integer positions, so a pair whose wavelength fits
  inside L shows at longer lengths only the angles training saw; the authors' code rounds
  every pair, and so do we (beyond L the rounding moves a long wavelength by < 0.5).
  """
  wavelength = xp.maximum(xp.round(2 * math.pi / inv_freq), 1.0)
  return 2 * math.pi / wavelength


def frequencies(
  rotary_dim: int, base: float, sc: Scaling, seq_len: int | None
) -> tuple[np.ndarray, float]:
  """`rope_frequencies` for a checked rotary dim and an already validated `Scaling`.

  numpy float64, at trace time; seq_len None counts as no longer than L (as in HF).
  """
  len_S = np.asarray(0 if seq_len is None else seq_len, np.float64)
  inv_freq_R, factor = ROPE_TYPES[sc.rope_type].fn(
    theta(rotary_dim, base), rotary_dim, base, sc, len_S, np
  )
  if sc.resonance:
    inv_freq_R = resonate(np.asarray(inv_freq_R, np.float64))
  return np.asarray(inv_freq_R, np.float64), float(factor)


def token_frequencies(
  rotary_dim: int, base: float, sc: Scaling, len_BxL: jax.Array
) -> tuple[jax.Array, float]:
  """Each token's inverse frequencies for its own sequence length: float32 BxLxR, and the
  attention factor. For the per_length types; the same formulas as `frequencies`, traced."""
  theta_R = jnp.asarray(theta(rotary_dim, base), jnp.float32)
  inv_freq_BxLxR, factor = ROPE_TYPES[sc.rope_type].fn(
    theta_R, rotary_dim, base, sc, jnp.asarray(len_BxL, jnp.float32), jnp
  )
  if sc.resonance:
    inv_freq_BxLxR = resonate(inv_freq_BxLxR, jnp)
  return inv_freq_BxLxR, float(factor)


def rope_frequencies(head_dim, base=None, scaling=None, seq_len=None, rotary_dim=None):
  """Returns (inv_freq, attention_factor): float64 array of rotary_dim/2 and a float.

  `scaling` is a HF `rope_scaling` / `rope_parameters` dict (or None: plain RoPE); `seq_len` is
  the current length, read by `dynamic` and `longrope` only. The attention factor multiplies
  cos and sin (as in HF), so it scales the logits by its square. As in HF, `base` None is the
  dict's rope_theta (else 10000) and `rotary_dim` None is int(head_dim * partial_rotary_factor)
  (else head_dim); given ones must agree with the dict.
  """
  prf = dict(scaling or {}).get("partial_rotary_factor")
  if rotary_dim is None and prf is not None:
    rotary_dim = int(head_dim * prf)
  d = check_rotary_dim(head_dim, rotary_dim)
  sc = resolve(scaling, d, base=base, head_dim=head_dim)
  if base is None:
    base = 10000.0 if sc.rope_theta is None else sc.rope_theta
  return frequencies(d, float(base), sc, seq_len)


def rope_angles(
  pos_BxL: jax.Array, rotary_dim: int, base: float, sc: Scaling, length
) -> tuple[jax.Array, float]:
  """Rotation angles pos * inv_freq, float32 BxLxR, and the attention factor.

  `length` is the current sequence length that dynamic and longrope read: an int (None: no
  longer than L), with frequencies that are constants of the program; or an array broadcast
  to pos_BxL of each token's own sequence length (`attention.document_length`), with
  frequencies computed per token in the program. Other rope types ignore it: their
  frequencies are always constants.

  LongRoPE's n_hat is applied exactly as the paper's rule, per token: a position p < n_hat is
  rotated by p * theta_i (unscaled), any other by p * inv_freq_i. A query and a key on different
  sides of n_hat therefore use different frequency sets, as in the paper; their logit then
  depends on both positions, not only on their difference. The attention factor scales only
  the positions >= n_hat (a BxLx1 factor then): the reference's mixed embedding takes the
  first n_hat positions' cos and sin from the original, unscaled embedding.
  """
  per_token = length is not None and not isinstance(length, (int, np.integer))
  per_row = isinstance(sc.n_hat, jax.Array)  # with_row_factors: the LongRoPE search
  if per_row and not per_token:
    raise ValueError(
      "LongRoPE factors per batch row (with_row_factors) need each token's "
      f"sequence length, got the static length {length!r}"
    )
  pos_BxLx1 = jnp.asarray(pos_BxL, jnp.float32)[..., None]
  if per_token and ROPE_TYPES[sc.rope_type].per_length:
    len_BxL = jnp.broadcast_to(jnp.asarray(length), pos_BxLx1.shape[:-1])
    inv_freq, factor = token_frequencies(rotary_dim, base, sc, len_BxL)
  else:
    inv_freq_R, factor = frequencies(rotary_dim, base, sc, None if per_token else length)
    inv_freq = jnp.asarray(inv_freq_R, jnp.float32).reshape((1,) * jnp.ndim(pos_BxL) + (-1,))
  angle_BxLxR = pos_BxLx1 * inv_freq
  if per_row or sc.n_hat:
    unscaled_R = jnp.asarray(theta(rotary_dim, base), jnp.float32)
    angle_BxLxR = jnp.where(
      pos_BxLx1 < sc.n_hat,
      pos_BxLx1 * unscaled_R.reshape((1,) * jnp.ndim(pos_BxL) + (-1,)),
      angle_BxLxR,
    )
    factor = jnp.where(pos_BxLx1 < sc.n_hat, 1.0, jnp.asarray(factor, jnp.float32))
  return angle_BxLxR, factor


def with_row_factors(sc: Scaling, long_factor_BxR, n_hat_B) -> Scaling:
  """`sc` (rope_type longrope) with each batch row's own long factors and n_hat, as arrays.

  For the LongRoPE search: the candidates are inputs of one compiled program (traced arrays,
  one candidate per row), not constants of a program per candidate. Only the per-token path of
  `rope_angles` reads them (the attention kernels always pass per-token lengths); the scheme
  built from a config never holds arrays here, so the normal path is unchanged.
  """
  if sc.rope_type != "longrope":
    raise ValueError(f"with_row_factors needs rope_type 'longrope', got {sc.rope_type!r}")
  return dataclasses.replace(
    sc,
    long_factor=jnp.asarray(long_factor_BxR)[:, None, :],
    n_hat=jnp.asarray(n_hat_B)[:, None, None],
  )


# Where a rope type reads L from a HF config.json: yarn, llama3 and longrope from
# original_max_position_embeddings (the top-level one wins, as HF does for Phi-3, then the
# dict's, then max_position_embeddings); HF's dynamic from max_position_embeddings only.
_HF_ORIGINAL_LENGTH_TYPES = ("llama3", "yarn", "longrope")


def read_hf_scaling(path: str) -> dict:
  """The rope scaling of a JSON file, as lcx scaling fields ready for model.position.scaling.

  The file is a Hugging Face model config.json (its `rope_scaling`, or transformers 5's
  `rope_parameters`; rope_scaling wins when both are set, as in HF) or a bare scaling dict (an
  object with `rope_type` or `type`). Values HF reads from the top level of a config.json move
  into the dict as HF derives them: rope_theta and partial_rotary_factor (the dict's own win),
  L (see _HF_ORIGINAL_LENGTH_TYPES) and, for yarn and longrope without a factor,
  factor = max_position_embeddings / L. "type" becomes "rope_type", nulls are dropped and lists
  become tuples. A rope_theta must then equal model.position.base (`resolve` checks it); a file
  without one leaves the base to the caller. ValueError names the file and the problem.
  """
  try:
    with open(path) as f:
      text = f.read()
  except OSError as error:
    raise ValueError(f"{path}: cannot read the rope scaling file ({error.strerror})") from None
  except UnicodeDecodeError as error:
    raise ValueError(
      f"{path}: not a JSON text file (not UTF-8: {error.reason} at byte {error.start})"
    ) from None
  try:
    data = json.loads(text)
  except json.JSONDecodeError as error:
    raise ValueError(f"{path}: not JSON ({error})") from None
  if not isinstance(data, dict):
    raise ValueError(
      f"{path}: expected a JSON object (a HF config.json or a rope scaling "
      f"dict), got {type(data).__name__}"
    )
  if "rope_scaling" in data or "rope_parameters" in data:
    top, given = data, data.get("rope_scaling") or data.get("rope_parameters")
  elif "rope_type" in data or "type" in data:
    top, given = {}, data
  else:
    top, given = data, None
  if not given or not isinstance(given, dict):
    raise ValueError(
      f"{path}: no rope scaling in it: no `rope_scaling` or `rope_parameters` "
      "object (a HF config.json) and no `rope_type` (a bare scaling dict)"
    )
  if all(isinstance(v, dict) for v in given.values()):
    raise ValueError(
      f"{path}: rope parameters per layer type ({sorted(given)}) are not "
      "supported; give one layer type's dict"
    )
  out = {k: v for k, v in given.items() if k != "type"}
  out.setdefault("rope_type", given.get("type", "default"))
  rope_type = out["rope_type"]
  if rope_type not in ROPE_TYPES:
    raise errors.not_allowed(f"{path}: rope_type", rope_type, sorted(ROPE_TYPES))
  for key in ("rope_theta", "partial_rotary_factor"):
    if out.get(key) is None and top.get(key) is not None:
      out[key] = top[key]
  max_len = top.get("max_position_embeddings")
  if rope_type in _HF_ORIGINAL_LENGTH_TYPES:
    length = top.get(LENGTH) or out.get(LENGTH) or max_len
    if length is not None:
      out[LENGTH] = length
    if rope_type in ("yarn", "longrope") and out.get("factor") is None and max_len and length:
      out["factor"] = max_len / length
  elif rope_type == "dynamic" and max_len is not None:
    out[LENGTH] = max_len
  unknown = sorted(set(out) - set(SCALING_DEFAULTS))
  if unknown:
    raise errors.unknown_field(f"{path}: {unknown[0]}", HF_KEYS | set(SCALING_DEFAULTS))
  for key in _unread(out, rope_type):  # HF's rule for HF's files: lcx's config refuses them
    if key in HF_KEYS and out[key] is not None:
      _warn_unread(path, key, out.pop(key), rope_type)
  return {k: tuple(v) if isinstance(v, list) else v for k, v in out.items() if v is not None}
