"""The decoder's config as typed records: what `Decoder` and its blocks read, field by field.

The values are declared one record each in lcx/model/options.py (default, description, what is
allowed), from which lcx/config builds the defaults and checks them before anything compiles; these
records fix the fields and their types, so a model class reads `cfg.attention.sink`, never a
ConfigDict key that may be absent. `ModelConfig.of(config.model)` reads a ConfigDict once, at the
boundary.

The three named sections (`position`, `remap`, `attention.pattern`) stay ConfigDicts: each one's
fields depend on its name and are declared once in their own records
(lcx/model/positions/fields.py, lcx/model/patterns.py), which their builders read. `of` copies
them, so a record never changes under a built model.
"""

from __future__ import annotations

import copy
import dataclasses
import typing

import ml_collections

from lcx import errors


@dataclasses.dataclass(frozen=True)
class AttentionConfig:
  """`model.attention.*`: the kernel and the logit options around the position scheme."""

  pattern: ml_collections.ConfigDict  # a sparse pattern, by name (lcx/model/patterns.py)
  chunk_size: int
  temperature: str
  si_tau: float
  beta_c: float
  ssmax_n: str
  sink: str
  gate: str
  kind: str
  impl: str
  block_size: int
  remainder_bias: bool


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """`model.*`: dimensions, the position scheme, the remap, the layer schedule, attention."""

  vocab_size: int
  d_model: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  mlp: str
  mlp_dim: int
  tie_embeddings: bool
  dtype: str
  remat: str
  norm_eps: float
  qk_norm: bool
  qk_norm_over: str
  max_len: int
  position: ml_collections.ConfigDict  # a scheme, by name (lcx/model/positions/fields.py)
  remap: ml_collections.ConfigDict  # a training-free remap, by name
  nope_every: int
  position_window: int
  attention: AttentionConfig

  @classmethod
  def of(cls, model_cfg) -> ModelConfig:
    """`model_cfg` (a `config.model` ConfigDict, or a ModelConfig, returned as it is) as a
    record; a field missing, unknown or of another type is one error naming it."""
    if isinstance(model_cfg, ModelConfig):
      return model_cfg
    return _record(cls, model_cfg, "model")


_SCALARS = {int: (int,), float: (int, float), str: (str,), bool: (bool,)}


def _record(cls, section, where: str):
  hints = typing.get_type_hints(cls)
  names = [f.name for f in dataclasses.fields(cls)]
  for key in section.keys():
    if key not in hints:
      raise errors.unknown_field(f"{where}.{key}", names)
  values = {}
  for name in names:
    path, kind = f"{where}.{name}", hints[name]
    if name not in section:
      raise ValueError(f"{path} is missing (a {kind.__name__} field of {cls.__name__})")
    value = section[name]
    if dataclasses.is_dataclass(kind):
      value = _record(kind, value, path)
    elif kind is ml_collections.ConfigDict:
      if not isinstance(value, ml_collections.ConfigDict):
        raise ValueError(f"{path} must be a config section, not {type(value).__name__}")
      value = copy.deepcopy(value)
    elif not isinstance(value, _SCALARS[kind]) or (kind is not bool and isinstance(value, bool)):
      raise ValueError(f"{path}={value!r}: expected {kind.__name__}")
    values[name] = value
  return cls(**values)
