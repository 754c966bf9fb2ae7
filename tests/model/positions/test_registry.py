"""The one registry behind schemes, remaps and patterns: lookup errors, defaults, checks."""

import pytest

from lcx.field import Unset
from lcx.model import patterns, positions
from lcx.model.positions import remaps
from lcx.model.positions.registry import Registry


def registry():
  reg = Registry("model.thing", "thing")

  def check(cfg, limit):
    if cfg.size > limit:
      raise ValueError(f"model.thing.size={cfg.size} must be <= {limit}")

  reg.register("small", {"size": 2, "sizes": [1, 2], "extra": Unset(int)}, check=check)(len)
  return reg


def test_every_section_uses_it():
  for reg, kind in (
    (positions.SCHEMES, "scheme"),
    (remaps.REMAPS, "remap"),
    (patterns.PATTERNS, "pattern"),
  ):
    assert isinstance(reg, Registry) and reg.kind == kind


def test_lookup_error_lists_the_allowed_names():
  reg = registry()
  with pytest.raises(ValueError) as error:
    reg.entry("big")
  assert str(error.value) == "model.thing.name='big' is not allowed; allowed: small"


def test_default_config_validate_and_resolve():
  reg = registry()
  cfg = reg.default_config("small")
  assert cfg.to_dict() == {"name": "small", "size": 2, "sizes": [1, 2], "extra": None}
  cfg.extra = 3  # an Unset field takes a value of its type
  entry, fields = reg.resolve(cfg, 5)
  assert entry.value is len and fields == {"size": 2, "sizes": (1, 2), "extra": 3}
  cfg.size = 9
  with pytest.raises(ValueError, match="model.thing.size=9 must be <= 5"):
    reg.validate(cfg, 5)
  cfg = reg.default_config("small")
  cfg.colour = "red"
  with pytest.raises(
    ValueError,
    match=r"^model.thing.colour is not a known field; allowed: "
    r"extra, size, sizes$",
  ):
    reg.validate(cfg, 5)


def test_a_name_registers_once():
  with pytest.raises(ValueError, match="model.remap.name='rerope': remap registered twice"):
    remaps._register("rerope", {})(None)
  assert remaps.REMAPS["rerope"].relative_only
