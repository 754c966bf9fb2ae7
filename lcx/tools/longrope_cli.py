"""`python -m lcx.tools.longrope` (`./launch.sh longrope`): the LongRoPE search's flags, the
declared fields and the search's own checks, which read only the config, run here, where nothing
imports jax, so a typo is one `error:` line in a fraction of a second. lcx.tools.longrope's
`__main__` calls `run` before its own imports, with the command that imports it and searches
(`lcx.tools.longrope.main`) once they pass; `lcx.tools.longrope.validate` runs `check_search` too,
after the model's checks. This module imports no lcx.tools.longrope, so the two form no import
cycle."""

from __future__ import annotations

import functools
from typing import Callable

from absl import app, flags
from ml_collections import config_flags

from lcx import cli
from lcx.config import checks as config_lib
from lcx.run import metrics  # none of them imports jax

FLAGS = flags.FLAGS


def check_search(config) -> None:
  """The LongRoPE search's own checks: a rotary scheme, a target length past the training
  length L, at least as many individuals as parents, a max_factor >= the scale."""
  lr, length = config.eval.longrope, config.model.max_len
  if "scaling" not in config.model.position:
    raise ValueError(
      f"model.position.name={config.model.position.name!r} has no RoPE "
      "frequencies to rescale; the LongRoPE search needs a rotary scheme "
      "(rope, p_rope, xpos)"
    )
  if config.data.name == "task":
    raise ValueError(
      "data.name='task': the LongRoPE search's fitness is perplexity on long "
      "validation documents; search a text run"
    )
  if lr.target_len <= length:
    raise ValueError(
      f"eval.longrope.target_len={lr.target_len} must be above the training "
      f"length L={length} (the search extends the model to it; 0 is off): set "
      f"--config.eval.longrope.target_len, e.g. {4 * length}"
    )
  if lr.parents > lr.population:
    raise ValueError(
      f"eval.longrope.parents={lr.parents} must be <= eval.longrope.population={lr.population}"
    )
  scale = lr.target_len / length
  if lr.max_factor and lr.max_factor < scale:
    raise ValueError(
      f"eval.longrope.max_factor={lr.max_factor} must be 0 (1.25 x the scale) or "
      f">= the scale target_len / L = {scale:g}, so that PI (every lambda = the "
      "scale) is in the search space"
    )


def _main(argv, run):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  metrics.quiet_libraries()
  try:  # refused before jax and the checkpoint, data and model modules are imported
    config_lib.check_declared(FLAGS.config)
    check_search(FLAGS.config)
  except ValueError as error:
    cli.fail(str(error))
  run(FLAGS.config, FLAGS.workdir)


def _parse_flags(argv):
  return cli.parse_config_flags(
    argv,
    lambda: f"--workdir={FLAGS.workdir} holds no run (config.json) to search on; train it first",
  )


def run(command: Callable[..., None]) -> None:
  """Defines the flags (here, not at import, so importing this module next to lcx.main defines
  none twice), parses and checks them, then calls `command(config, workdir)`; exits."""
  config_flags.DEFINE_config_file(
    "config", None, "Config file (default: the run's own WORKDIR/config.json).", lock_config=True
  )
  flags.DEFINE_string(
    "workdir", None, "A trained run's directory; the search writes WORKDIR/longrope/."
  )
  flags.mark_flags_as_required(["workdir"])
  app.run(functools.partial(_main, run=command), flags_parser=_parse_flags)
