"""`./launch.sh config [--config=...]` (`python -m lcx.config.listing`): every config field with its
default, what the checks allow and a one-line description, read from the declarations themselves so
the list cannot drift from them: the defaults and their comments (lcx/config/defaults.py,
lcx/run/data/config.py), the allowed values from lcx/config/checks.py's RANGES and OPTIONS, and the
scheme's and remap's fields from their records (lcx/model/positions/fields.py). No jax is imported.
"""

from __future__ import annotations

import inspect
import io
import re
import tokenize

import ml_collections

from lcx import cli
from lcx.config import checks as config_lib, defaults
from lcx.model.positions import fields as position_fields
from lcx.run.data import config as data_config

# The modules whose assignments declare the fields, with the section each one fills.
DECLARATIONS = ((defaults, ""), (data_config, "data."))
ASSIGNMENT = re.compile(r"^\s*(?:config|cfg)\.([\w.]+)\s*=")


def _comments(source: str, section: str) -> dict[str, str]:
  """{field: description or ""} for every field one declaring file assigns: the comment on the
  assignment's line, else the comment block above the run of uncommented assignments it heads
  (`# Per-layer schedule ...` over nope_every and position_window)."""
  lines = source.splitlines()
  comments: dict[int, str] = {}
  for token in tokenize.generate_tokens(io.StringIO(source).readline):
    if token.type == tokenize.COMMENT:
      comments[token.start[0]] = token.string.lstrip("#").strip()
  whole = {n for n in comments if lines[n - 1].lstrip().startswith("#")}
  out = {}
  for number, line in enumerate(lines, start=1):
    match = ASSIGNMENT.match(line)
    if not match:
      continue
    above = number - 1
    while ASSIGNMENT.match(lines[above - 1]) and above not in comments:
      above -= 1  # an uncommented assignment: the block above covers it too
    block = []
    while above in whole:
      block.insert(0, comments[above])
      above -= 1
    field = section + match.group(1)
    if not out.get(field):  # the first declaration wins (quickstart_config reassigns some)
      out[field] = _first_sentence(comments.get(number) or " ".join(block))
  return out


def _first_sentence(text: str) -> str:
  head = re.split(r"(?<=\.)\s", text, maxsplit=1)[0]
  return head if len(head) <= 100 else head[:97] + "..."


def descriptions() -> dict[str, str]:
  """{dotted field: one line, or ""} for every field the declaring files assign."""
  out = {}
  for module, section in DECLARATIONS:
    out.update(_comments(inspect.getsource(module), section))
  return out


def allowed() -> dict[str, str]:
  """{dotted field: what the checks allow}, from the same tables that check the fields."""
  out = {}
  for field, _, what in (*config_lib.RANGES, *config_lib.OPTIONS):
    out[field] = what if isinstance(what, str) else ", ".join(map(str, what))
  return out


def declared(config) -> dict[str, position_fields.Field]:
  """{dotted field: its record} of the config's scheme and remap."""
  out = {}
  for prefix, records in (
    (position_fields.SCHEME_PREFIX, position_fields.SCHEMES),
    (position_fields.REMAP_PREFIX, position_fields.REMAPS),
  ):
    section = config
    for key in prefix.split("."):
      section = section[key]
    for field in getattr(records.get(section.name), "fields", ()):
      out[f"{prefix}.{field.name}"] = field
  return out


def describe(field: str, notes: dict[str, str]) -> str:
  """The field's own description; a field no line assigns (a scheme's, a sharding rule) takes
  that of the nearest section assigned whole."""
  parts = field.split(".")
  for end in range(len(parts), 0, -1):
    name = ".".join(parts[:end])
    if name in notes:
      return notes[name]
  return ""


def table(config) -> str:
  """One line per field: `field = default  (allowed: ...)  # description`."""
  notes, ranges = descriptions(), allowed()
  for name, field in declared(config).items():
    notes[name] = field.doc
    if field.allowed:
      ranges[name] = field.allowed
  ranges[f"{position_fields.SCHEME_PREFIX}.name"] = ", ".join(sorted(position_fields.SCHEMES))
  ranges[f"{position_fields.REMAP_PREFIX}.name"] = ", ".join(sorted(position_fields.REMAPS))
  rows = []
  for field, value in cli.leaves(config):
    shown = value.to_dict() if isinstance(value, ml_collections.ConfigDict) else value
    row = f"{field} = {shown!r}"
    if field in ranges:
      row += f"  (allowed: {ranges[field]})"
    note = describe(field, notes)
    rows.append(f"{row}  # {note}" if note else row)
  return "\n".join(rows)


def main(argv):
  from absl import app, flags

  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  print(table(flags.FLAGS.config or defaults.get_config()))


if __name__ == "__main__":
  import functools

  from absl import app
  from ml_collections import config_flags

  config_flags.DEFINE_config_file(
    "config", None, "Config file (default: configs/base.py's defaults).", lock_config=True
  )
  app.run(main, flags_parser=functools.partial(cli.parse_config_flags, missing=None))
