"""The evaluation's own config checks (after the fields', lcx/config/checks.py): known variants,
passkey settings for the kind of run, each protocol against the eval lengths."""

from __future__ import annotations

import ml_collections

from lcx.config import checks as config_lib, fields, protocols, variants
from lcx.run import sharding


def validate(config: ml_collections.ConfigDict) -> None:
  """lcx.run.sharding.validate (the fields and the mesh), then `check`."""
  sharding.validate(config)
  check(config)


def check(config: ml_collections.ConfigDict) -> None:
  """The evaluation's own checks (after the fields'): known variants, passkey settings for the
  kind of run, protocols against the eval lengths. Eval lengths a scheme cannot score are not
  errors: the results list them as skipped (a synthetic task's evaluation checks each padded
  width itself)."""
  for spec in variants.names(config.eval.variants):
    variants.overrides(spec, config.eval.named_variants)
  if config.data.name == "task":
    lengths = tuple(config.eval.passkey.lengths)
    if lengths:
      raise ValueError(
        f"eval.passkey.lengths={lengths}: the passkey probe is for text runs; "
        f"data.task={config.data.task!r} is scored by its own exact match "
        "(data.task_eval_depths for needle depths)"
      )
    return
  ev, lengths = config.eval, config_lib.eval_lengths(config)
  if 0 < ev.random_positions < max(lengths):
    raise ValueError(
      f"eval.random_positions={ev.random_positions!r} is not allowed; allowed: 0 "
      f"(off) or >= the longest eval length {max(lengths)} (each window needs "
      "that many distinct positions)"
      + (
        "; the default eval.random_positions=-1 takes train.random_positions: set it to 0 "
        "to score at plain positions"
        if ev.random_positions == config.train.random_positions
        else ""
      )
    )
  for name in fields.items(ev.protocol):
    protocols.PROTOCOLS[name].check(ev, lengths)
