"""One registry for every config section picked by name (schemes, remaps, sparse patterns):
the same errors, `default_config` and `validate` for all; what a name builds stays with its section.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import ml_collections
from ml_collections import config_dict

from lcx import errors
from lcx.field import Unset


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
    raise errors.unknown_field(f"{where}.{unknown[0]}", defaults)
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


@dataclasses.dataclass(frozen=True)
class Entry:
  """What a name builds from, its fields with defaults, and `check(cfg, *context)` (or None)."""

  value: Any
  defaults: dict[str, Any]
  check: Callable[..., None] | None = None


class Registry(dict):
  """name -> `entry_type(value, defaults, **extra)` (an `Entry` or subclass) for the config
    section at `prefix`; `kind` names an entry in errors. `declared`: {name: record with
  `defaults` and `check(cfg, prefix)`} (lcx/model/positions/fields.py), where the fields of each
  name are declared apart from the code, without jax. `load()`: imports the modules that register
  (the schemes live in several), before a name is looked up."""

  def __init__(self, prefix: str, kind: str, entry_type: type = Entry, declared=None, load=None):
    super().__init__()
    self.prefix, self.kind, self.entry_type = prefix, kind, entry_type
    self.declared, self.load = declared or {}, load

  def register(self, name: str, defaults: dict[str, Any] | None = None, **extra):
    """Decorator adding its argument under `name`; `extra` are the entry's other fields.
    `defaults` None: the declared record's."""
    if defaults is None:
      defaults = self.declared[name].defaults

    def wrap(value):
      if name in self:
        raise ValueError(f"{self.prefix}.name={name!r}: {self.kind} registered twice")
      self[name] = self.entry_type(value, dict(defaults), **extra)
      return value

    return wrap

  def entry(self, name: str):
    if self.load is not None:
      self.load()
    if name not in self:
      raise errors.not_allowed(f"{self.prefix}.name", name, sorted(self))
    return self[name]

  def default_config(self, name: str) -> ml_collections.ConfigDict:
    """The section's config: `name` plus every field with its default."""
    return to_config({"name": name, **self.entry(name).defaults})

  def validate(self, cfg: ml_collections.ConfigDict, *context) -> None:
    """Raises ValueError naming the field: unknown ones, then the entry's `check(cfg, *context)`."""
    entry = self.entry(cfg.name)
    check_fields(cfg, entry.defaults, self.prefix)
    if cfg.name in self.declared:
      self.declared[cfg.name].check(cfg, self.prefix)
    if entry.check is not None:
      entry.check(cfg, *context)

  def resolve(self, cfg: ml_collections.ConfigDict, *context):
    """Validates `cfg`; returns its entry and its fields (all but `name`) as static values."""
    self.validate(cfg, *context)
    return self.entry(cfg.name), {k: plain(cfg[k]) for k in cfg.keys() if k != "name"}
