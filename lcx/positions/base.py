"""The position-scheme plug-in: a registry of schemes, each an NNX module with three hooks.

A scheme touches the model in at most three places, each the identity unless it overrides it:
  embed(x_BxLxD, pos_BxL)                     additive absolute schemes (sinusoidal, learned)
  rotate(q_BxLxHxK, k_BxLxGxK, q_pos, k_pos)  the rotary family (RoPE, p-RoPE, xPos, + scaling)
  bias(q_pos_BxQ, k_pos_BxK) -> BxHxQxK       attention-logit biases (ALiBi, T5, FIRE)
Positions are always explicit inputs (int or float), so a bias is a function of positions, never
a stored (T, T) matrix: the chunked attention kernel evaluates it block by block at any length.
One scheme instance is shared by all layers (learned schemes hold one set of parameters).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import ml_collections
from flax import nnx
from ml_collections import config_dict

PREFIX = "model.position"


@dataclasses.dataclass(frozen=True)
class Dims:
  """Model dimensions a scheme may need; `max_len` is the training length L."""

  d_model: int
  num_heads: int
  head_dim: int
  max_len: int


@dataclasses.dataclass(frozen=True)
class Unset:
  """A config field that defaults to None yet accepts a value of `type` from the command line."""

  type: type


class Scheme(nnx.Module):
  """Base class: every hook is the identity. Subclasses override what they change."""

  def embed(self, x_BxLxD: jax.Array, pos_BxL: jax.Array) -> jax.Array:
    del pos_BxL
    return x_BxLxD

  def rotate(self, q_BxLxHxK, k_BxLxGxK, q_pos_BxL, k_pos_BxL):
    del q_pos_BxL, k_pos_BxL
    return q_BxLxHxK, k_BxLxGxK

  def bias(self, q_pos_BxQ: jax.Array, k_pos_BxK: jax.Array) -> jax.Array | None:
    """Additive logit bias, BxHxQxK (or broadcastable), or None when the scheme has none."""
    del q_pos_BxQ, k_pos_BxK
    return None


@dataclasses.dataclass(frozen=True)
class Spec:
  """A registered scheme: its class, its config fields with defaults, and optional checks.

  `check(cfg, dims)` validates field values; `check_length(cfg, dims, seq_len)` says whether the
  scheme can be evaluated on windows of `seq_len` tokens (static: positions are traced in jit).
  """

  cls: type[Scheme]
  defaults: dict[str, Any]
  check: Callable[[ml_collections.ConfigDict, Dims], None] | None = None
  check_length: Callable[[ml_collections.ConfigDict, Dims, int], None] | None = None


SCHEMES: dict[str, Spec] = {}


def register(name: str, defaults: dict[str, Any], *, check=None, check_length=None):
  """Class decorator adding a scheme to the registry under `name`."""

  def wrap(cls):
    if name in SCHEMES:
      raise ValueError(f"position scheme {name!r} registered twice")
    SCHEMES[name] = Spec(cls, dict(defaults), check, check_length)
    return cls

  return wrap


def spec(name: str) -> Spec:
  if name not in SCHEMES:
    raise ValueError(f"{PREFIX}.name={name!r} is not a known scheme; allowed: {sorted(SCHEMES)}")
  return SCHEMES[name]


def adds_embedding(name: str) -> bool:
  """Whether the scheme adds absolute position embeddings (overrides the `embed` hook)."""
  return spec(name).cls.embed is not Scheme.embed


def to_config(defaults: dict[str, Any]) -> ml_collections.ConfigDict:
  """Fresh ConfigDict from a defaults dict: nested dicts become sub-dicts, `Unset` placeholders."""
  out = {}
  for key, value in defaults.items():
    if isinstance(value, dict):
      out[key] = to_config(value)
    elif isinstance(value, Unset):
      out[key] = config_dict.placeholder(value.type)
    else:
      out[key] = value
  return ml_collections.ConfigDict(out)


def check_fields(cfg, defaults: dict[str, Any], where: str) -> None:
  """Raises ValueError on a field of `cfg` that `defaults` does not list (recursing into dicts)."""
  unknown = sorted(set(cfg.keys()) - set(defaults) - {"name"})
  if unknown:
    raise ValueError(f"{where}.{unknown[0]} is not a known field; allowed fields: "
                     f"{sorted(defaults)}")
  for key, value in defaults.items():
    if isinstance(value, dict) and key in cfg:
      check_fields(cfg[key], value, f"{where}.{key}")


def plain(value):
  """ConfigDict -> dict (recursively); lists -> tuples, so values are hashable static data."""
  if isinstance(value, (ml_collections.ConfigDict, dict)):
    return {k: plain(v) for k, v in value.items()}
  if isinstance(value, list):
    return tuple(value)
  return value


def default_config(name: str) -> ml_collections.ConfigDict:
  """The scheme's config sub-dict: `name` plus every field with its default."""
  return to_config({"name": name, **spec(name).defaults})


def validate(cfg: ml_collections.ConfigDict, dims: Dims) -> None:
  """Raises ValueError naming the field and the allowed values."""
  s = spec(cfg.name)
  check_fields(cfg, s.defaults, PREFIX)
  if s.check is not None:
    s.check(cfg, dims)


def check_eval_length(cfg: ml_collections.ConfigDict, dims: Dims, seq_len: int) -> None:
  """Raises ValueError if the scheme cannot be evaluated on windows of `seq_len` tokens.

  Call it with the static window length before compiling an evaluation: inside jit positions
  are traced, so a learned table cannot raise there (it yields NaN instead, see absolute.py).
  """
  validate(cfg, dims)
  s = spec(cfg.name)
  if s.check_length is not None:
    s.check_length(cfg, dims, seq_len)


def build(cfg: ml_collections.ConfigDict, dims: Dims, *, rngs: nnx.Rngs) -> Scheme:
  validate(cfg, dims)
  fields = {k: plain(cfg[k]) for k in cfg.keys() if k != "name"}
  return spec(cfg.name).cls(dims=dims, rngs=rngs, **fields)
