"""Each scheme's and remap's fields, declared once without jax (lcx/model/positions/fields.py): the
registries, the defaults, the checks before jax and `./launch.sh config` all read the records."""

import subprocess
import sys

import pytest

from lcx.config import checks as config_lib, defaults, listing as fields_cli
from lcx.field import Unset
from lcx.model import decoder as model, gating, options
from lcx.model.kernels import impl as kernel_impl
from lcx.model.positions import absolute, fields, remaps, rotary
from tests.helpers import ROOT, tiny_config

# Values tried, in order, until the field's own check refuses one (of the field's type).
CANDIDATES = {
  int: (-1, 0, 1, 3),
  float: (-1.0, 0.0, 0.5, 3.0, 1e6),
  str: ("bogus",),
}


def _bad_value(field: fields.Field):
  rejected = [v for v in CANDIDATES[field.type] if not field.ok(v)]
  assert rejected, f"{field.name}: no candidate is refused"
  return rejected[0]


def test_the_registries_register_exactly_the_declared_names_with_their_defaults():
  from lcx.model import positions

  for registry, records in ((positions.SCHEMES, fields.SCHEMES), (remaps.REMAPS, fields.REMAPS)):
    assert sorted(registry) == sorted(records)
    for name, record in records.items():
      assert registry[name].defaults == record.defaults, name
      assert all(f.doc for f in record.fields), name  # every field says what it is


@pytest.mark.parametrize("name", sorted(fields.SCHEMES))
def test_every_scheme_validates_its_defaults_and_refuses_a_bad_value_naming_the_field(name):
  config = tiny_config(name)
  config_lib.check_fields(config)  # the defaults pass the declared checks and the model's
  assert config.model.position.to_dict() == fields.default_config(name).to_dict()
  for field in fields.SCHEMES[name].fields:
    if field.ok is None:
      continue
    assert isinstance(field.default, Unset) or field.ok(field.default)
    bad = _bad_value(field)
    config = tiny_config(name)
    config.model.position[field.name] = bad
    with pytest.raises(ValueError) as error:
      config_lib.check_declared(config)  # before jax: from the record alone
    message = str(error.value)
    assert message == (
      f"model.position.{field.name}={bad!r} is not allowed; allowed: {field.allowed}"
    )
    assert "\n" not in message and field.allowed


def test_the_code_agrees_with_the_declared_values():
  assert tuple(sorted(rotary.PAIRINGS)) == fields.PAIRINGS
  assert tuple(sorted(absolute.MAX_LEN_POLICIES)) == fields.MAX_LEN_POLICIES
  assert ("none", *gating.GATES) == options.GATES
  assert tuple(model.DTYPES) == options.DTYPES
  assert tuple(kernel_impl.ATTENDS) == options.KINDS  # every declared kind has its kernels


def test_launch_config_lists_each_scheme_field_with_its_record():
  table = fields_cli.table(defaults.get_config("pos=kerple_power"))
  line = next(row for row in table.splitlines() if row.startswith("model.position.r2_init = "))
  assert line == (
    "model.position.r2_init = 2.0  (allowed: in (0, 2] (the power's exponent))  "
    "# r2's initial value (per head), the power's exponent"
  )


def test_the_declarations_defaults_and_field_checks_import_no_jax():
  code = (
    "import sys; from lcx.config import checks, defaults; "
    "checks.check_declared(defaults.get_config('pos=cope')); "
    "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'flax')))"
  )
  out = subprocess.run(
    [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
  )
  assert out.stdout.strip() == "[]", out.stderr[-2000:]


def test_the_docs_scheme_table_is_the_records():
  assert fields.markdown() in (ROOT / "docs" / "schemes.md").read_text()
