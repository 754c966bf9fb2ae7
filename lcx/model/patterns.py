"""Sparse attention patterns (config `model.attention.pattern`): which keys a query may see.

Masks, not positions: they live beside `lcx.model.attention`, which composes them with causality.

`build(cfg)` returns `allowed(q_idx, k_idx) -> bool` (elementwise, broadcasting), or None for
dense attention. The indices count tokens inside each packed document (0 at its first token), so
a document that starts mid-row keeps its own first block; they are not positions, which remaps
and randomized training positions change. The attention kernel composes the pattern with the
causal and packed-document masks, so a pattern only says what it removes:
  dense           nothing
  sliding_window  keys more than window-1 tokens back
  block_global    everything outside the query's own block and the first (global) block
  strided         Child et al. 2019: keep the local window and every key whose distance to
                  the query is a multiple of `stride`
  streaming       StreamingLLM (Xiao 2023): the first `sink` tokens and the last `window` keys
                  (variant sink@S/W, with the `streaming` remap, which numbers positions by
                  cache slot as StreamingLLM does)
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import ml_collections

from lcx import errors
from lcx.model.positions.registry import Registry

PREFIX = "model.attention.pattern"

# name -> Entry(fn(q_idx_Qx1, k_idx_1xS, **fields) -> bool, or None for dense; defaults; check)
PATTERNS = Registry(PREFIX, "pattern")


def _check_sizes(cfg):
  for field in cfg.keys():  # every field but the name is a size
    if field != "name" and (not isinstance(cfg[field], int) or cfg[field] < 1):
      raise errors.not_allowed(f"{PREFIX}.{field}", cfg[field], "ints >= 1")


_register = functools.partial(PATTERNS.register, check=_check_sizes)
_register("dense", {})(None)


@_register("sliding_window", {"window": 128})
def sliding_window(q_idx_Qx1, k_idx_1xS, *, window):
  return q_idx_Qx1 - k_idx_1xS < window


@_register("block_global", {"block": 64})
def block_global(q_idx_Qx1, k_idx_1xS, *, block):
  return (q_idx_Qx1 // block == k_idx_1xS // block) | (k_idx_1xS < block)


@_register("strided", {"window": 64, "stride": 64})
def strided(q_idx_Qx1, k_idx_1xS, *, window, stride):
  distance = q_idx_Qx1 - k_idx_1xS
  return (distance < window) | (distance % stride == 0)


@_register("streaming", {"sink": 4, "window": 128})
def streaming(q_idx_Qx1, k_idx_1xS, *, sink, window):
  return (q_idx_Qx1 - k_idx_1xS < window) | (k_idx_1xS < sink)


def _all_of(allowed_N, q_idx_Qx1, k_idx_1xS):
  out = allowed_N[0](q_idx_Qx1, k_idx_1xS)
  for allowed in allowed_N[1:]:
    out = out & allowed(q_idx_Qx1, k_idx_1xS)
  return out


def intersect(*allowed) -> Callable[..., Any] | None:
  """The pattern allowing only what every given one allows (None entries, dense, drop out):
  a sparse pattern plus a layer's own window (model.position_window)."""
  kept = tuple(a for a in allowed if a is not None)
  if len(kept) <= 1:
    return kept[0] if kept else None
  return functools.partial(_all_of, kept)


def default_config(name: str = "dense") -> ml_collections.ConfigDict:
  """The pattern's config sub-dict: `name` plus every field with its default."""
  return PATTERNS.default_config(name)


validate = PATTERNS.validate  # validate(cfg): raises ValueError naming the field


def build(cfg: ml_collections.ConfigDict) -> Callable[..., Any] | None:
  entry, fields = PATTERNS.resolve(cfg)
  return None if entry.value is None else functools.partial(entry.value, **fields)
