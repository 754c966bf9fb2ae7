"""Regime matching: a RoPE base for a short training length L that puts a small model's rotary
pairs where a reference model's sit, so claims about slow and fast pairs can be tested small.

A pair i of head dimension d (P = d/2 pairs) turns base^(-2i/d) radians per position, so it
completes less than one turn inside L when its wavelength 2 pi base^(2i/d) exceeds L, i.e. when
i/P > ln(L / 2 pi) / ln(base). Keeping that boundary at the reference's fraction of pairs gives

    base(L) = (L / 2 pi) ^ (ln(base_ref) / ln(L_ref / 2 pi))

Against Llama-2 at 4k (base 10^4, head dim 128, L = 4096: 18 of 64 pairs turn less than once)
this is 27.09 at L = 64, 72.55 at L = 128, 194.31 at L = 256 (and 10^4 at 4096); 18 of 64 pairs
(4 of 16 at head dim 32) then turn less than once at every L.

What the base cannot match at small L (`pair_counts` counts each):
- YaRN (beta_fast = 32) leaves unscaled the pairs whose wavelength is under L / 32. The shortest
  wavelength is 2 pi whatever the base, so below L = 64 pi (about 201) no pair qualifies; at the
  matched base, 1 of 16 pairs at L = 256, 4 of 16 at L = 1024, against Llama-2's 21 of 64.
- p-RoPE (p = 0.75) drops the slowest quarter of the pairs, which at the matched base still turn
  about 5 radians over L at every L (Llama-2: 4.1); at base 10^4 and L = 64 they turn 0.06, so
  dropping them changes next to nothing there.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from lcx import errors
from lcx.model.positions import rotary, scaling


@dataclasses.dataclass(frozen=True)
class Reference:
  """A model whose rotary regime a small model matches: its base, head dim, training length."""

  description: str
  base: float
  head_dim: int
  train_len: int


REFERENCES = {"llama2_4k": Reference("Llama-2 at 4k", 10_000.0, 128, 4096)}


def matched_base(length: int, reference: str = "llama2_4k") -> float:
  """The base at which the same fraction of rotary pairs turns less than once inside `length`
  as in `reference` (module docstring): 27.09 at L = 64, 72.55 at 128, 194.31 at 256."""
  if reference not in REFERENCES:
    raise errors.not_allowed("reference", reference, REFERENCES)
  ref = REFERENCES[reference]
  if length <= 2 * math.pi:
    raise errors.not_allowed("length", length, "> 2 pi (a pair's shortest wavelength)")
  return ref.base ** (math.log(length / (2 * math.pi)) / math.log(ref.train_len / (2 * math.pi)))


def pair_counts(base: float, head_dim: int, length: int, p: float = 0.75) -> dict:
  """What a rotary regime looks like inside `length`: pairs turning less than once, pairs YaRN
  (beta_fast = 32) leaves unscaled (wavelength under L / 32), and the angle the first pair
  p-RoPE drops turns over L (radians; none when p keeps every pair)."""
  wavelength_R = 2 * math.pi / scaling.theta(head_dim, base)
  kept = rotary.kept_pairs(p, head_dim // 2)
  return {
    "pairs": head_dim // 2,
    "under_one_turn": int(np.sum(wavelength_R > length)),
    "yarn_unscaled": int(np.sum(wavelength_R < length / 32)),
    "p_rope_dropped_angle": (
      None if kept == head_dim // 2 else float(2 * math.pi * length / wavelength_R[kept])
    ),
  }
