"""Training-free position remaps: functions on positions, applied before any scheme hook.

`build(cfg, dims).branches(q_pos_BxQ, k_pos_BxS)` returns a list of `Branch(q_pos, k_pos, use)`.
Attention computes the logits of each branch (rotate + bias with that branch's positions) and
merges them: start from the LAST branch's logits, then for each earlier branch
    logits = where(use(q_pos_true_BxQx1, k_pos_true_Bx1xS), logits_branch, logits)
`use` is None only on the last branch. Additive absolute schemes (sinusoidal, learned) embed the
positions of a one-branch remap (its only branch's); a remap of several branches is a rule on
relative distances, so `check_scheme` refuses it with those schemes. A contextual scheme (CoPE)
reads no position ids, so `check_scheme` refuses every remap but `none` with it. Remaps (config
`model.remap`):
  none         one branch, positions unchanged
  self_extend  Jin 2024: exact positions where i - j < window; beyond, grouped positions
               query floor(i/group) + window - window//group, key floor(j/group)
  rerope       exact where i - j < window; beyond, the relative distance is clipped to window
               (query at `window`, key at 0); log_n_scaling (default True, as the reference):
               every query at position i scaled by max(1, ln(i + 1) / ln(L)), L the training
               length (both branches; 1 inside L)
  compress     one branch, p -> p up to `start`, start + alpha * (p - start) beyond
               (float positions; start None: the training length)
  dual_chunk   Dual Chunk Attention (An 2024, ChunkLlama; Qwen2.5-1M): keys at j mod s,
               s = chunk_size - local_window; a query at i mod s for keys of its own chunk
               (intra), min(i mod s + s, chunk_size) for the previous chunk (successive),
               min(2s - 1, chunk_size) for older ones (inter); None: 3L/4 and L/16 as ChunkLlama
  streaming    StreamingLLM's cache positions (Xiao 2023; with the `streaming` pattern, variant
               sink@S/W): exact where i - j < window; beyond (the sink keys), the query sits
               at its cache slot min(i, sink + window - 1) and the key at its own position
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable

import jax
import jax.numpy as jnp
import ml_collections

from lcx import errors
from lcx.model.positions import fields
from lcx.model.positions.base import Dims, adds_embedding, has_householder, is_contextual
from lcx.model.positions.registry import Entry, Registry

PREFIX = "model.remap"


@dataclasses.dataclass(frozen=True)
class Branch:
  """One view of the positions; `use(q_pos_true_BxQx1, k_pos_true_Bx1xS) -> BxQxS` bool says
  where its logits win over those of the branches after it (None: everywhere, last only);
  `q_scale` multiplies the queries (attention applies it before `rotate`)."""

  q_pos: jax.Array
  k_pos: jax.Array
  use: Callable[[jax.Array, jax.Array], jax.Array] | None = None
  q_scale: jax.Array | None = None  # BxQ factor on q before the scheme's hooks (None: 1)


@dataclasses.dataclass(frozen=True)
class Remap:
  fn: Callable[..., list[Branch]]

  def branches(self, q_pos_BxQ: jax.Array, k_pos_BxS: jax.Array) -> list[Branch]:
    return self.fn(q_pos_BxQ, k_pos_BxS)


@dataclasses.dataclass(frozen=True)
class _Entry(Entry):
  """`value` is fn(q_pos_BxQ, k_pos_BxS, *, dims, **fields) -> list[Branch]; `check(cfg)`."""

  relative_only: bool = False  # several branches: a rule on relative distances, no absolute view


REMAPS = Registry(PREFIX, "remap", _Entry, declared=fields.REMAPS)  # fields: fields.py
_register = REMAPS.register  # _register(name, check=, relative_only=)


def _nearer_than(q_pos_BxQx1, k_pos_Bx1xS, *, window):
  return q_pos_BxQx1 - k_pos_Bx1xS < window


def _check_window(cfg):
  if cfg.window < 1:
    raise errors.not_allowed(f"{PREFIX}.window", cfg.window, ">= 1")


@_register("none")
def none(q_pos_BxQ, k_pos_BxS, *, dims):
  del dims
  return [Branch(q_pos_BxQ, k_pos_BxS)]


def _check_self_extend(cfg):
  _check_window(cfg)
  if cfg.group < 1:
    raise errors.not_allowed(f"{PREFIX}.group", cfg.group, ">= 1")


@_register("self_extend", check=_check_self_extend, relative_only=True)
def self_extend(q_pos_BxQ, k_pos_BxS, *, dims, window, group):
  """Neighbours keep exact positions; farther keys are grouped, shifted so the two views meet
  at distance `window`."""
  del dims
  near = Branch(q_pos_BxQ, k_pos_BxS, functools.partial(_nearer_than, window=window))
  far = Branch(q_pos_BxQ // group + window - window // group, k_pos_BxS // group)
  return [near, far]


def log_n_scale(q_pos_BxQ, train_len):
  """ReRoPE's log-n query factor max(1, ln(i + 1) / ln(L)): 1 up to the training length L,
  growing slowly beyond to keep attention entropy near what training saw."""
  q = jnp.asarray(q_pos_BxQ, jnp.float32)
  return jnp.maximum(jnp.log(q + 1) / math.log(train_len), 1.0)


@_register("rerope", check=_check_window, relative_only=True)
def rerope(q_pos_BxQ, k_pos_BxS, *, dims, window, log_n_scaling):
  """Beyond the window every key sits at relative distance `window`: the query at `window`
  and the key at 0. Relative schemes (RoPE, ALiBi, T5) see exactly i - j = window; schemes
  that also read the query's own position (FIRE's normalizer, LongRoPE's n_hat, xPos's
  centre) see `window` there instead of the true query position.

  log_n_scaling: as bojone/rerope, the query (not the bias) is scaled by `log_n_scale` of its
  true position, in both branches, with L = dims.max_len."""
  scale = log_n_scale(q_pos_BxQ, dims.max_len) if log_n_scaling else None
  near = Branch(q_pos_BxQ, k_pos_BxS, functools.partial(_nearer_than, window=window), scale)
  far = Branch(jnp.full_like(q_pos_BxQ, window), jnp.zeros_like(k_pos_BxS), q_scale=scale)
  return [near, far]


def _check_streaming(cfg):
  _check_window(cfg)
  if cfg.sink < 1:
    raise errors.not_allowed(f"{PREFIX}.sink", cfg.sink, ">= 1")


@_register("streaming", check=_check_streaming, relative_only=True)
def streaming(q_pos_BxQ, k_pos_BxS, *, dims, sink, window):
  """A cache of `sink` first tokens and the last `window` ones numbers them by slot: the window
  keeps its distances, and a sink key j is min(i, sink + window - 1) - j from the query."""
  del dims
  near = Branch(q_pos_BxQ, k_pos_BxS, functools.partial(_nearer_than, window=window))
  far = Branch(jnp.minimum(q_pos_BxQ, sink + window - 1), k_pos_BxS)
  return [near, far]


def _check_dual_chunk(cfg):
  if cfg.chunk_size is not None and cfg.chunk_size < 2:
    raise errors.not_allowed(f"{PREFIX}.chunk_size", cfg.chunk_size, ">= 2 (None: 3L/4)")
  if cfg.local_window is not None and cfg.local_window < 0:
    raise errors.not_allowed(f"{PREFIX}.local_window", cfg.local_window, ">= 0 (None: L/16)")
  if None not in (cfg.chunk_size, cfg.local_window) and cfg.local_window >= cfg.chunk_size:
    raise errors.not_allowed(
      f"{PREFIX}.local_window",
      cfg.local_window,
      f"< {PREFIX}.chunk_size={cfg.chunk_size} (chunks of chunk_size - local_window tokens)",
    )


def _same_chunk_offset(q_pos_BxQx1, k_pos_Bx1xS, *, chunk, offset):
  return q_pos_BxQx1 // chunk - k_pos_Bx1xS // chunk == offset


@_register("dual_chunk", check=_check_dual_chunk, relative_only=True)
def dual_chunk(q_pos_BxQ, k_pos_BxS, *, dims, chunk_size, local_window):
  """Three views, as ChunkLlama's code: every relative distance stays below chunk_size, which
  (3L/4 by default) training saw. Within a chunk distances are exact; keys of the previous
  chunk look at least s - (j mod s) away; older keys sit as if the query were at 2s - 1."""
  size = dims.max_len * 3 // 4 if chunk_size is None else chunk_size
  window = dims.max_len // 16 if local_window is None else local_window
  s = size - window
  if s < 1:
    raise ValueError(
      f"{PREFIX}: chunk_size - local_window = {size} - {window} must be >= 1 (None fields "
      f"derive from the training length {dims.max_len})"
    )
  k_in = k_pos_BxS % s
  q_in = q_pos_BxQ % s
  use = functools.partial(_same_chunk_offset, chunk=s)
  intra = Branch(q_in, k_in, functools.partial(use, offset=0))
  succ = Branch(jnp.minimum(q_in + s, size), k_in, functools.partial(use, offset=1))
  inter = Branch(jnp.full_like(q_pos_BxQ, min(2 * s - 1, size)), k_in)
  return [intra, succ, inter]


def _check_compress(cfg):
  if not 0 < cfg.alpha <= 1:
    raise errors.not_allowed(f"{PREFIX}.alpha", cfg.alpha, "in (0, 1]")
  if cfg.start is not None and cfg.start < 0:
    raise errors.not_allowed(f"{PREFIX}.start", cfg.start, ">= 0 (None: the training length)")


@_register("compress", check=_check_compress)
def compress(q_pos_BxQ, k_pos_BxS, *, dims, alpha, start):
  """Piecewise linear: identity up to `start`, slope alpha beyond (not YaRN)."""
  start = dims.max_len if start is None else start

  def squeeze(pos):
    pos = jnp.asarray(pos, jnp.float32)
    return jnp.where(pos <= start, pos, start + alpha * (pos - start))

  return [Branch(squeeze(q_pos_BxQ), squeeze(k_pos_BxS))]


def default_config(name: str = "none") -> ml_collections.ConfigDict:
  """The remap's config sub-dict: `name` plus every field with its default."""
  return REMAPS.default_config(name)


validate = REMAPS.validate  # validate(cfg): raises ValueError naming the field


def _refusal(remap_name: str, scheme_name: str) -> str | None:
  """Why the remap cannot go with the scheme, or None."""
  if REMAPS.entry(remap_name).relative_only and adds_embedding(scheme_name):
    relative = sorted(n for n, e in REMAPS.items() if not e.relative_only)
    return (
      f"{PREFIX}.name={remap_name!r} remaps relative distances, but "
      f"model.position.name={scheme_name!r} embeds absolute positions; with it "
      f"use {PREFIX}.name in {relative}, or a relative scheme"
    )
  if remap_name != "none" and is_contextual(scheme_name):
    return (
      f"{PREFIX}.name={remap_name!r} moves position ids, but "
      f"model.position.name={scheme_name!r} reads none (it counts positions from the attention "
      f"logits); with it use {PREFIX}.name='none'"
    )
  if remap_name != "none" and has_householder(scheme_name):
    return (
      f"{PREFIX}.name={remap_name!r} moves position ids, but "
      f"model.position.name={scheme_name!r} reads none (its positions are Householder "
      f"transforms of the layer inputs); with it use {PREFIX}.name='none'"
    )
  return None


def accepts(remap_name: str, scheme_name: str) -> bool:
  """Whether `check_scheme` lets the remap go with the scheme."""
  return _refusal(remap_name, scheme_name) is None


def check_scheme(cfg: ml_collections.ConfigDict, scheme_name: str) -> None:
  """Raises ValueError for a relative-distance remap on a scheme that embeds absolute positions,
  and for any remap but `none` on a contextual scheme (CoPE) or PaTH, whose positions are not
  ids."""
  refusal = _refusal(cfg.name, scheme_name)
  if refusal is not None:
    raise ValueError(refusal)


def for_temperature(cfg: ml_collections.ConfigDict, temperature: str) -> ml_collections.ConfigDict:
  """`cfg` with ReRoPE's log-n off when `model.attention.temperature=log_n` already scales
  every query by the same max(1, ln(i + 1) / ln(L)): a log_n run evaluated with rerope@W gets
  the factor once (2.0 at i = 63, L = 8), not squared (4.0)."""
  if temperature != "log_n" or not cfg.get("log_n_scaling", False):
    return cfg
  out = ml_collections.ConfigDict(cfg.to_dict())
  out.log_n_scaling = False
  return out


def build(cfg: ml_collections.ConfigDict, dims: Dims) -> Remap:
  entry, fields = REMAPS.resolve(cfg)
  return Remap(functools.partial(entry.value, dims=dims, **fields))
