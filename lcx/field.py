"""One record per config field, jax-free: its default, a one-line description and what it accepts.

The config's defaults (lcx/config/defaults.py), its checks before jax loads (lcx/config/checks.py),
`./launch.sh config` and the documentation's tables are all read from these records, so a field is
declared once: the scheme and remap fields (lcx/model/positions/fields.py), the model's
(lcx/model/options.py), the data's (lcx/data/config.py), and the rest (lcx/config/fields.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import ml_collections
from ml_collections import config_dict

from lcx import errors


@dataclasses.dataclass(frozen=True)
class Unset:
  """A config field that defaults to None yet accepts a value of `type` from the command line."""

  type: type


@dataclasses.dataclass(frozen=True)
class Field:
  """One config field: its default (`Unset(T)`: None, or a T from the command line; a `Section`:
  a sub-dict of records; a dict: a sub-section checked by its owner; a function: the sub-dict it
  builds, a section picked by name), a one-line description, and what it accepts: `allowed`, a
  tuple of the values, or the wording of `ok(value)` (None passes where the default is Unset)."""

  name: str
  default: Any
  doc: str
  ok: Callable[[Any], bool] | None = None
  allowed: str | tuple = ""

  @property
  def type(self) -> type:
    return self.default.type if isinstance(self.default, Unset) else type(self.default)

  @property
  def wording(self) -> str:
    """What the field accepts, as the error and `./launch.sh config` say it ("" if anything)."""
    return self.allowed if isinstance(self.allowed, str) else ", ".join(map(str, self.allowed))

  def accepts(self, value) -> bool:
    if self.ok is not None:
      return self.ok(value)
    return not isinstance(self.allowed, tuple) or value in self.allowed

  def check(self, value, prefix: str) -> None:
    """Raises `PREFIX.NAME=V is not allowed; allowed: ...` unless the value is accepted."""
    if value is None and isinstance(self.default, Unset):
      return
    if not self.accepts(value):
      raise errors.not_allowed(dotted(prefix, self.name), value, self.allowed)

  def value(self):
    """The default as a config value: a fresh sub-dict for a section, a placeholder for Unset."""
    if isinstance(self.default, Section):
      return self.default.to_config()
    if isinstance(self.default, Unset):
      return config_dict.placeholder(self.default.type)
    return self.default() if callable(self.default) else self.default


@dataclasses.dataclass(frozen=True)
class Section:
  """A group of fields under one prefix (a config section, a scheme, a remap): what it is, and its
  fields in the order the config lists them."""

  doc: str
  fields: tuple[Field, ...] = ()

  @property
  def defaults(self) -> dict[str, Any]:
    return {f.name: f.default for f in self.fields}

  def check(self, cfg, prefix: str) -> None:
    """Each field's own check, in declaration order, into sub-sections (unknown fields:
    lcx.model.positions.registry.check_fields, or ml_collections on the command line)."""
    for f in self.fields:
      if f.name not in cfg:
        continue
      if isinstance(f.default, Section):
        f.default.check(cfg[f.name], dotted(prefix, f.name))
      else:
        f.check(cfg[f.name], prefix)

  def to_config(self) -> ml_collections.ConfigDict:
    """A fresh ConfigDict holding every field's default."""
    out = ml_collections.ConfigDict()
    for f in self.fields:
      out[f.name] = f.value()
    return out

  def with_field(self, path: str, field: Field) -> Section:
    """A copy with `field` added at the end of the sub-section at dotted `path` ("": this one):
    how a field is added at run time (a test's, as a scheme is added to SCHEMES)."""
    if not path:
      return dataclasses.replace(self, fields=(*self.fields, field))
    head, _, rest = path.partition(".")
    return dataclasses.replace(
      self,
      fields=tuple(
        dataclasses.replace(f, default=f.default.with_field(rest, field)) if f.name == head else f
        for f in self.fields
      ),
    )

  def records(self, prefix: str = "") -> dict[str, Field]:
    """{dotted field: its record} of every field, into sub-sections (each one's own record too)."""
    out = {}
    for f in self.fields:
      name = dotted(prefix, f.name)
      out[name] = f
      if isinstance(f.default, Section):
        out.update(f.default.records(name))
    return out


def dotted(prefix: str, name: str) -> str:
  return f"{prefix}.{name}" if prefix else name


def count(value) -> bool:
  """An int >= 0 (not a bool): a layer period or a window, 0 for off."""
  return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def numbers(values, ok) -> bool:
  """Every item a number (not a bool, not a string such as 'inf') for which ok(item) holds."""
  return all(isinstance(v, (int, float)) and not isinstance(v, bool) and ok(v) for v in values)


def boolean(value) -> bool:
  return isinstance(value, bool)


def at_least(low) -> Callable[[Any], bool]:
  return lambda v: v >= low


def positive(v) -> bool:
  return v > 0
