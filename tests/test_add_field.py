"""Adding a config field is one record (lcx/field.py) plus its use: a record added at test time,
as tests/model/positions/test_add_scheme.py adds a scheme, is in the defaults, checked before jax
with the one error wording, and listed by `./launch.sh config` (and its markdown table)."""

import pytest

from lcx import cli
from lcx.config import checks, defaults, fields, listing
from lcx.field import Field
from tests.helpers import run_lcx

SHAPES = ("linear", "cosine")
RECORD = Field("warmup_shape", "linear", "the warmup's curve", allowed=SHAPES)


@pytest.fixture
def warmup_shape(monkeypatch):
  monkeypatch.setattr(fields, "CONFIG", fields.CONFIG.with_field("train", RECORD))


def test_a_new_record_is_in_the_defaults(warmup_shape):
  assert defaults.get_config().train.warmup_shape == "linear"
  assert defaults.get_config("pos=alibi,size=tiny").train.warmup_shape == "linear"
  assert defaults.quickstart_config().train.warmup_shape == "linear"


def test_a_new_record_is_checked_with_the_one_error_line(warmup_shape, capsys):
  config = defaults.get_config()
  checks.check_declared(config)  # the default passes
  config.train.warmup_shape = "sine"
  with pytest.raises(ValueError) as error:
    checks.check_declared(config)
  assert str(error.value) == "train.warmup_shape='sine' is not allowed; allowed: linear, cosine"
  with pytest.raises(SystemExit) as exit:  # as lcx.main words it, before anything compiles
    cli.fail(str(error.value))
  assert exit.value.code == 2
  assert capsys.readouterr().err == (
    "error: train.warmup_shape='sine' is not allowed; allowed: linear, cosine\n"
  )


def test_a_new_record_is_listed_by_launch_config(warmup_shape):
  table = listing.table(defaults.get_config()).splitlines()
  assert "train.warmup_shape = 'linear'  (allowed: linear, cosine)  # the warmup's curve" in table
  row = "| `train.warmup_shape` | `'linear'` | linear, cosine | the warmup's curve |"
  assert row in listing.markdown().splitlines()


def test_a_nested_section_takes_a_record_too(monkeypatch):
  record = Field("tries", 3, "how often", lambda v: v >= 1, ">= 1")
  monkeypatch.setattr(fields, "CONFIG", fields.CONFIG.with_field("eval.passkey", record))
  config = defaults.get_config()
  assert config.eval.passkey.tries == 3 and config.eval.passkey.digits == 5
  config.eval.passkey.tries = 0
  with pytest.raises(ValueError, match=r"^eval.passkey.tries=0 is not allowed; allowed: >= 1$"):
    checks.check_declared(config)


def test_launch_config_markdown_prints_the_records_table():
  """`./launch.sh config --markdown`: the table the documentation can paste, one row a field."""
  proc = run_lcx(["--markdown"], module="lcx.config.listing")
  assert proc.stdout == listing.markdown() + "\n"
  assert "| `model.attention.impl` | `'auto'` | auto, xla, pallas |" in proc.stdout


def test_the_tables_keyed_by_field_name_declared_fields():
  """What a resume may change (lcx/config/changes.py) and what a variant may (lcx/config/
  variants.py) name fields by their dotted names: each is a declared record (a field renamed in
  its record and not there would silently count as fixed, or as never eval-time)."""
  from lcx.config import changes, variants
  from lcx.model.positions import fields as position_fields

  declared = set(fields.CONFIG.records())
  scheme_fields = {
    f"{position_fields.SCHEME_PREFIX}.{f.name}"
    for section in position_fields.SCHEMES.values()
    for f in section.fields
  }
  assert set(changes.KINDS) <= declared
  assert set(variants.VARIANT_FIELDS) <= declared | scheme_fields
