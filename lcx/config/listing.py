"""`./launch.sh config [--config=...]` (`python -m lcx.config.listing`): every config field with its
default, what the checks allow and a one-line description, read from the fields' records
(lcx/config/fields.py's CONFIG, and the config's scheme's and remap's in
lcx/model/positions/fields.py), the same records the defaults and the checks are built from, so the
list cannot drift from them. `--markdown` prints it as the documentation's table. No jax.
"""

from __future__ import annotations

import ml_collections

from lcx import cli
from lcx.config import defaults, fields
from lcx.field import Field
from lcx.model.positions import fields as position_fields

NAMED = (  # the sections picked by name: (prefix, the names' records)
  (position_fields.SCHEME_PREFIX, position_fields.SCHEMES),
  (position_fields.REMAP_PREFIX, position_fields.REMAPS),
)


def _section(config, prefix: str):
  for key in prefix.split("."):
    config = config[key]
  return config


def records(config) -> dict[str, Field]:
  """{dotted field: its record}: every declared field, the config's scheme's and remap's too."""
  out = fields.CONFIG.records()
  for prefix, named in NAMED:
    for field in getattr(named.get(_section(config, prefix).name), "fields", ()):
      out[f"{prefix}.{field.name}"] = field
  return out


def _nearest(field: str, found: dict[str, Field]) -> Field | None:
  """The field's own record, else that of the nearest section holding it (a scaling key, a
  pattern's field, a named variant)."""
  parts = field.split(".")
  for end in range(len(parts), 0, -1):
    name = ".".join(parts[:end])
    if name in found:
      return found[name]
  return None


def rows(config) -> list[tuple[str, object, str, str]]:
  """(field, value, what the checks allow or "", description) of every leaf of `config`."""
  found = records(config)
  allowed = {f"{prefix}.name": ", ".join(sorted(named)) for prefix, named in NAMED}
  out = []
  for field, value in cli.leaves(config):
    shown = value.to_dict() if isinstance(value, ml_collections.ConfigDict) else value
    record = _nearest(field, found)
    if field in found:
      allowed.setdefault(field, found[field].wording)
    out.append((field, shown, allowed.get(field, ""), record.doc if record else ""))
  return out


def table(config) -> str:
  """One line per field: `field = default  (allowed: ...)  # description`."""
  lines = []
  for field, value, allowed, doc in rows(config):
    line = f"{field} = {value!r}" + (f"  (allowed: {allowed})" if allowed else "")
    lines.append(f"{line}  # {doc}" if doc else line)
  return "\n".join(lines)


def _cell(text) -> str:
  return str(text).replace("|", "\\|")


def markdown(config=None) -> str:
  """The same as a markdown table (the defaults' when `config` is None)."""
  out = ["| field | default | allowed | meaning |", "|---" * 4 + "|"]
  for field, value, allowed, doc in rows(config or defaults.get_config()):
    out.append(f"| `{field}` | `{_cell(repr(value))}` | {_cell(allowed)} | {_cell(doc)} |")
  return "\n".join(out)


def main(argv):
  from absl import app, flags

  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  config = flags.FLAGS.config or defaults.get_config()
  print(markdown(config) if flags.FLAGS.markdown else table(config))


if __name__ == "__main__":
  import functools

  from absl import app, flags
  from ml_collections import config_flags

  config_flags.DEFINE_config_file(
    "config", None, "Config file (default: configs/base.py's defaults).", lock_config=True
  )
  flags.DEFINE_bool("markdown", False, "Print the fields as a markdown table.")
  app.run(main, flags_parser=functools.partial(cli.parse_config_flags, missing=None))
