"""A run's own config, WORKDIR/config.json over today's defaults: evaluation, generation and the
LongRoPE search start from it (`--config=lcx/config/run_config.py:WORKDIR`, which lcx.cli adds for
`--workdir` alone). Apart from lcx.run.prepare so that loading it imports no checkpointing or data
pipeline: the entry points check its fields first."""

from __future__ import annotations

import json
import os

import ml_collections

from lcx.config import defaults
from lcx.model import patterns
from lcx.model.positions import fields


def _update(target: ml_collections.ConfigDict, saved: dict, where: str = "") -> None:
  """Writes `saved` into `target` field by field, keeping target's types (placeholders, tuples).

  A field the current defaults no longer have is kept as saved (old runs stay readable).
  """
  for key, value in saved.items():
    if (
      isinstance(value, dict)
      and key in target
      and isinstance(target[key], ml_collections.ConfigDict)
    ):
      _update(target[key], value, f"{where}{key}.")
    elif key in target:
      target[key] = tuple(value) if isinstance(value, list) else value
    else:
      with target.unlocked():
        target[key] = value


def run_config(workdir: str) -> ml_collections.ConfigDict:
  """The config a run was trained with (WORKDIR/config.json), over today's defaults.

  Fields added to lcx since the run keep their defaults; the scheme's, remap's and pattern's
  sub-dicts are rebuilt from their registries first, so every field has its type and
  `--config.x.y=V` overrides work as on a config file.
  """
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    raise ValueError(
      f"--workdir={workdir}: no config.json there (not an lcx run directory); "
      "train first, or pass --config"
    )
  with open(path) as f:
    saved = json.load(f)
  config = defaults.get_config(f"pos={saved['model']['position']['name']}")
  config.model.remap = fields.remap_config(saved["model"]["remap"]["name"])
  config.model.attention.pattern = patterns.default_config(
    saved["model"]["attention"]["pattern"]["name"]
  )
  del config.model["max_len"]  # a reference to data.seq_len in the defaults; a value here
  config.model.max_len = saved["model"]["max_len"]
  _update(config, saved)
  return config


def get_config(workdir: str) -> ml_collections.ConfigDict:
  """ml_collections config-file entry point: `--config=lcx/config/run_config.py:WORKDIR`."""
  return run_config(workdir)
