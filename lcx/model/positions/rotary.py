"""The rotary family: RoPE (Su 2021), p-RoPE (Barbero 2024) and xPos (Sun 2022).

Each rotates q and k (never v) pair by pair by angle `pos * inv_freq[i]`. Frequencies come from
the pure function `rope_frequencies` (scaling.py), so the same checkpoint can be evaluated with
any `scaling` dict without retraining. Every rotary scheme has the fields:
  base        the RoPE base b (Llama 3: 500000)
  pairing     "rotate_half" (x_i, x_{i+R}) as GPT-NeoX and HF, or "interleaved" (x_2i, x_2i+1)
              as RoFormer and Meta's Llama code; same attention, weights need a permutation
  rotary_dim  rotate the first rotary_dim features only (None: all of head_dim); must be even
  scaling     a HF `rope_scaling` dict (scaling.SCALING_DEFAULTS lists its fields)
The "current length" read by `dynamic` and `longrope` is each token's own sequence length, as
HF reads max(position_ids) + 1 of its one sequence: the kernels pass `attention.document_length`
(padding and the other documents of a packed row do not change it). Without one, it is the
static window length q.shape[1].
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from lcx.model.positions.base import PREFIX, Scheme, register
from lcx.model.positions.registry import plain
from lcx.model.positions.scaling import check_rotary_dim, resolve, rope_angles


def _split_half(x):
  r = x.shape[-1] // 2
  return x[..., :r], x[..., r:]


def _join_half(a, b):
  return jnp.concatenate([a, b], axis=-1)


def _split_interleaved(x):
  return x[..., 0::2], x[..., 1::2]


def _join_interleaved(a, b):
  return jnp.stack([a, b], axis=-1).reshape(*a.shape[:-1], 2 * a.shape[-1])


# pairing -> (split features into the two members of each pair, join them back)
PAIRINGS = {
  "rotate_half": (_split_half, _join_half),
  "interleaved": (_split_interleaved, _join_interleaved),
}


def rotate_pairs(x_BxLxHxE, angle_BxLxR, pairing="rotate_half", scale=1.0):
  """Rotates the first 2R features of x by `angle` (in float32), times `scale`.

  `scale` (a float or BxLxR) multiplies cos and sin, as HF applies its attention factor; the
  features past 2R (partial rotary) pass through unchanged and unscaled.
  """
  split, join = PAIRINGS[pairing]
  r = angle_BxLxR.shape[-1]
  cos_BxLx1xR = (jnp.cos(angle_BxLxR) * scale)[:, :, None, :]
  sin_BxLx1xR = (jnp.sin(angle_BxLxR) * scale)[:, :, None, :]
  x, rest = x_BxLxHxE[..., : 2 * r], x_BxLxHxE[..., 2 * r :]
  x1, x2 = split(x.astype(jnp.float32))
  out = join(x1 * cos_BxLx1xR - x2 * sin_BxLx1xR, x2 * cos_BxLx1xR + x1 * sin_BxLx1xR)
  return jnp.concatenate([out.astype(x.dtype), rest], axis=-1)


def _check_rotary(cfg, dims):
  """What needs the dimensions: the rotary dim and the scaling dict (base and pairing are
  checked by their records, lcx/model/positions/fields.py)."""
  d = check_rotary_dim(dims.head_dim, cfg.rotary_dim, f"{PREFIX}.rotary_dim")
  resolve(
    plain(cfg.scaling),
    d,
    f"{PREFIX}.scaling",
    default_length=dims.max_len,
    base=cfg.base,
    head_dim=dims.head_dim,
    ignore_unread=False,  # a value set in the config and ignored would be lost without a word
  )


@register("rope", check=_check_rotary)  # fields: lcx/model/positions/fields.py
class RoPE(Scheme):
  """RoPE; subclasses change the angles (p-RoPE) or add per-position scales (xPos)."""

  def __init__(self, *, dims, rngs, base, pairing, rotary_dim, scaling):
    del rngs
    self.rotary_dim = check_rotary_dim(dims.head_dim, rotary_dim)
    self.base = float(base)
    self.pairing = pairing
    self.scaling = resolve(
      scaling, self.rotary_dim, default_length=dims.max_len, base=self.base, head_dim=dims.head_dim
    )

  def angles(self, pos_BxL, length):
    """float32 BxLxR rotation angles and the attention factor; `length`: the current sequence
    length, an int or each token's own (BxL), as `scaling.rope_angles` reads it."""
    return rope_angles(pos_BxL, self.rotary_dim, self.base, self.scaling, length)

  def scales(self, q_pos_BxL, k_pos_BxL):
    """Per-position factors of q and k (float or BxLxR); RoPE has none."""
    del q_pos_BxL, k_pos_BxL
    return 1.0, 1.0

  def rotate(self, q_BxLxHxE, k_BxLxGxE, q_pos_BxL, k_pos_BxL, *, q_len_BxL=None, k_len_BxL=None):
    window = q_BxLxHxE.shape[1]  # the current length when no per-token one is given
    q_angle, q_factor = self.angles(q_pos_BxL, window if q_len_BxL is None else q_len_BxL)
    k_angle, k_factor = self.angles(k_pos_BxL, window if k_len_BxL is None else k_len_BxL)
    q_scale, k_scale = self.scales(q_pos_BxL, k_pos_BxL)
    return (
      rotate_pairs(q_BxLxHxE, q_angle, self.pairing, q_factor * q_scale),
      rotate_pairs(k_BxLxGxE, k_angle, self.pairing, k_factor * k_scale),
    )


def kept_pairs(p: float, num_pairs: int) -> int:
  """floor(p * num_pairs), robust to float error just below an integer."""
  return math.floor(p * num_pairs + 1e-9)


@register("p_rope", check=_check_rotary)
class PRoPE(RoPE):
  """p-RoPE: keep the floor(p * R) highest frequencies (the first pairs); the rest get angle 0.

  The kept frequencies are RoPE's own (not re-spaced). p=0.75 was best in the paper's 2B runs.
  The count is floored as the paper's code truncates it (p=0.3, R=32 keeps 9 pairs, not 10),
  with a 1e-9 guard so float error never drops a pair (0.29 * 100 = 28.999..., keeps 29).
  """

  def __init__(self, *, p, **kwargs):
    super().__init__(**kwargs)
    self.num_kept = kept_pairs(p, self.rotary_dim // 2)

  def angles(self, pos_BxL, length):
    angle_BxLxR, factor = super().angles(pos_BxL, length)
    kept_R = np.arange(self.rotary_dim // 2) < self.num_kept
    return angle_BxLxR * kept_R[None, None, :], factor


XPOS_ZETA_MIN = 0.4 / 1.4  # zeta_0: the strongest decay, so the largest factor
XPOS_HEADROOM = 2.0**8  # room left in float32 for the features the factors multiply


def _xpos_log_room() -> float:
  return math.log(float(np.finfo(np.float32).max) / XPOS_HEADROOM)


def xpos_max_len(scale_base: float) -> int:
  """The longest window (positions 0..T-1) whose xPos factors stay finite in float32.

  From the centre, positions lie at most (T-1)/2 away, so the largest factor is
  (1/zeta_0)^((T-1) / (2 B)); it must stay below float32 max / XPOS_HEADROOM.
  """
  return 1 + math.floor(2 * scale_base * _xpos_log_room() / -math.log(XPOS_ZETA_MIN))


def _check_xpos_length(cfg, dims, seq_len):
  del dims
  longest = xpos_max_len(cfg.scale_base)
  if seq_len > longest:
    needed = math.ceil((seq_len - 1) * -math.log(XPOS_ZETA_MIN) / (2 * _xpos_log_room()))
    raise ValueError(
      f"{PREFIX}.scale_base={cfg.scale_base}: xPos scales q and k by up to "
      f"(1.4/0.4)^(positions/(2*scale_base)), which overflows float32 past "
      f"{longest} positions, but {seq_len} are needed; use <= {longest} or "
      f"{PREFIX}.scale_base >= {needed}"
    )


@register("xpos", check=_check_rotary, check_length=_check_xpos_length)
class XPos(RoPE):
  """xPos: RoPE with per-pair decay zeta_i = (2i + 0.4d) / (1.4d); causal only.

  q at n is scaled by zeta^(n/B), k at m by zeta^(-m/B), so the logit decays as
  zeta^((n-m)/B). Both are measured from a common centre (the midpoint of each row's query
  positions), which leaves every logit unchanged but keeps the factors inside float32 range
  at long lengths (torchscale does the same). q and k must therefore go through one `rotate`.
  The centre halves the exponent, yet past `xpos_max_len(B)` positions (67,989 for B = 512,
  leaving a factor 2^8 of room for the features) the factors still overflow and q, k turn
  non-finite; check_eval_length refuses such windows, naming scale_base.
  """

  def __init__(self, *, scale_base, **kwargs):
    super().__init__(**kwargs)
    self.scale_base = float(scale_base)

  def scales(self, q_pos_BxL, k_pos_BxL):
    d = self.rotary_dim
    zeta_R = jnp.asarray((np.arange(0, d, 2) + 0.4 * d) / (1.4 * d), jnp.float32)
    q_pos = jnp.asarray(q_pos_BxL, jnp.float32)
    k_pos = jnp.asarray(k_pos_BxL, jnp.float32)
    centre_Bx1 = (q_pos.max(axis=1, keepdims=True) + q_pos.min(axis=1, keepdims=True)) / 2

    def power(pos_BxL):
      return ((pos_BxL - centre_Bx1) / self.scale_base)[..., None]

    zeta_1x1xR = zeta_R[None, None, :]
    return zeta_1x1xR ** power(q_pos), zeta_1x1xR ** -power(k_pos)
