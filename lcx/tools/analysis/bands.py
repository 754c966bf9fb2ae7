"""q and k norms per rotary frequency pair: how much of each head's q and k sits in the pairs
that turn a full circle within the training length."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from lcx import errors
from lcx.model import positions
from lcx.model.positions.rotary import PAIRINGS
from lcx.tools.analysis.capture import QK, Model, qk


def pair_norms(x_xK, pairing: str = "rotate_half", rotary_dim: int | None = None):
  """(pairs_xR, rest_x): each rotary pair's norm sqrt(a^2 + b^2), pairs split as the scheme
  splits them (`pairing`), and the norm of the features past rotary_dim (0 without). The squares
  sum to the squared norm of x; a rotation keeps every pair's norm."""
  if pairing not in PAIRINGS:
    raise errors.not_allowed("pairing", pairing, sorted(PAIRINGS))
  x = np.asarray(x_xK, np.float64)
  d = x.shape[-1] if rotary_dim is None else rotary_dim
  if d % 2 or not 2 <= d <= x.shape[-1]:
    raise errors.not_allowed("rotary_dim", d, f"even numbers in [2, {x.shape[-1]}]")
  split, _ = PAIRINGS[pairing]
  a, b = split(x[..., :d])
  return np.sqrt(a * a + b * b), np.sqrt(np.sum(x[..., d:] ** 2, axis=-1))


def rotary_frequencies(model: Model, seq_len: int | None = None) -> np.ndarray | None:
  """The inverse frequency of each rotary pair as the model rotates (None: not a rotary scheme):
  `lcx.model.positions.rope_frequencies` of the scheme's base, rotary dim and resolved scaling at
  `seq_len` (dynamic and longrope read it; None: L); p-RoPE's dropped pairs are 0."""
  scheme = model.decoder.position
  if not hasattr(scheme, "rotary_dim"):
    return None
  inv_freq_R, _ = positions.rope_frequencies(
    model.config.model.head_dim,
    base=scheme.base,
    scaling=dataclasses.asdict(scheme.scaling),
    seq_len=seq_len,
    rotary_dim=scheme.rotary_dim,
  )
  kept = getattr(scheme, "num_kept", None)  # p-RoPE: the first num_kept pairs rotate
  if kept is not None:
    inv_freq_R = np.where(np.arange(len(inv_freq_R)) < kept, inv_freq_R, 0.0)
  return inv_freq_R


def wavelengths(inv_freq_R) -> np.ndarray:
  """2 pi / inv_freq per pair, in positions (inf for a pair that does not rotate)."""
  inv = np.asarray(inv_freq_R, np.float64)
  with np.errstate(divide="ignore"):
    return np.where(inv > 0, 2 * math.pi / np.where(inv > 0, inv, 1.0), np.inf)


@dataclasses.dataclass(frozen=True)
class Bands:
  """RMS over tokens of each rotary pair's norm, per layer N and head: q N x H x R, k N x G x R;
  `*_rest` the features past the rotary dim; inv_freq / wavelength per pair (None for a scheme
  that does not rotate: pairs are then split as rotate_half over head_dim, for comparison)."""

  q: np.ndarray
  k: np.ndarray
  q_rest: np.ndarray
  k_rest: np.ndarray
  inv_freq: np.ndarray | None
  wavelength: np.ndarray | None
  pairing: str
  rotary_dim: int
  train_len: int

  def fraction_below(self, length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(q N x H, k N x G): the share of the squared norm in pairs whose wavelength is < length
    (default L: pairs that turn a full circle within the training length)."""
    if self.wavelength is None:
      raise ValueError("fraction_below needs a rotary scheme (wavelength is None)")
    fast_R = self.wavelength < (self.train_len if length is None else length)

    def share(x, rest):
      return (x[..., fast_R] ** 2).sum(-1) / ((x**2).sum(-1) + rest**2)

    return share(self.q, self.q_rest), share(self.k, self.k_rest)


def frequency_bands(
  model: Model, tokens_BxT, pos_BxT=None, seg_BxT=None, *, qk_values: QK | None = None
) -> Bands:
  """q and k norm per rotary pair, per layer and head, over every token of the batch."""
  values = qk_values if qk_values is not None else qk(model, tokens_BxT, pos_BxT, seg_BxT)
  scheme = model.decoder.position
  pairing = getattr(scheme, "pairing", "rotate_half")
  rotary_dim = getattr(scheme, "rotary_dim", model.config.model.head_dim)

  def rms(x):  # over batch and tokens
    return np.sqrt(np.mean(x**2, axis=(1, 2)))

  q_pairs, q_rest = pair_norms(values.q, pairing, rotary_dim)
  k_pairs, k_rest = pair_norms(values.k, pairing, rotary_dim)
  inv_freq = rotary_frequencies(model, values.q.shape[2])
  return Bands(
    rms(q_pairs),
    rms(k_pairs),
    rms(q_rest),
    rms(k_rest),
    inv_freq,
    None if inv_freq is None else wavelengths(inv_freq),
    pairing,
    rotary_dim,
    model.train_len,
  )
