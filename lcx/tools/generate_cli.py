"""`python -m lcx.tools.generate` (`./launch.sh generate`): the flags, the prompt and the declared
fields are checked here, where nothing imports jax, so a typo is one `error:` line in a fraction
of a second. lcx.tools.generate's `__main__` calls `run` before its own imports, with the command
that imports it and generates (`lcx.tools.generate.main`) once they pass; this module imports no
lcx.tools.generate, so the two form no import cycle."""

from __future__ import annotations

import functools
from typing import Callable

from absl import app, flags
from ml_collections import config_flags

from lcx import cli
from lcx.config import checks as config_lib
from lcx.run import metrics  # none of them imports jax

FLAGS = flags.FLAGS


def check_prompt(prompt: str) -> None:
  """Raises ValueError unless --prompt is UTF-8 text: Python reads the command line's bytes with
  surrogateescape, so an invalid byte would surface only as a codec error when encoded."""
  try:
    prompt.encode("utf-8")
  except UnicodeEncodeError as error:
    code = ord(prompt[error.start])  # surrogateescape keeps byte b >= 0x80 as U+DC00 + b
    what = f"byte {code - 0xDC00:#04x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
    raise ValueError(
      f"--prompt is not UTF-8 text: {what} at character {error.start}; pass UTF-8 text"
    ) from None


def _main(argv, run):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  metrics.quiet_libraries()
  try:  # refused before jax and the checkpoint, data and model modules are imported
    check_prompt(FLAGS.prompt)
    config_lib.check_declared(FLAGS.config)
  except ValueError as error:
    cli.fail(str(error))
  run(
    FLAGS.config,
    FLAGS.workdir,
    FLAGS.prompt,
    max_new_tokens=FLAGS.max_new_tokens,
    temperature=FLAGS.temperature,
    top_k=FLAGS.top_k,
    seed=FLAGS.seed,
    eval_step=FLAGS.eval_step,
  )


def _parse_flags(argv):
  return cli.parse_config_flags(
    argv,
    lambda: (
      f"--workdir={FLAGS.workdir} holds no run (config.json) to generate from; train it "
      "first, or pass --config"
    ),
  )


def run(command: Callable[..., None]) -> None:
  """Defines the flags (here, not at import, so importing this module next to lcx.main defines
  none twice), parses and checks them, then calls `command(config, workdir, prompt, **flags)`;
  exits."""
  config_flags.DEFINE_config_file(
    "config",
    None,
    "Config file (default: the run's own WORKDIR/config.json; --config.* overrides apply to it).",
    lock_config=True,
  )
  flags.DEFINE_string("workdir", None, "A trained run's directory.")
  flags.DEFINE_string("prompt", None, "Text to continue (the model sees BOS + its tokens).")
  flags.DEFINE_integer("max_new_tokens", 64, "Tokens to generate.", lower_bound=1)
  flags.DEFINE_float(
    "temperature", 0.0, "0: greedy; otherwise sample from softmax(logits/T).", lower_bound=0.0
  )
  flags.DEFINE_integer(
    "top_k", 0, "Sample from the k most likely tokens only (0: all).", lower_bound=0
  )
  flags.DEFINE_integer("seed", 0, "Sampling seed: the same seed gives the same tokens.")
  flags.DEFINE_integer("eval_step", None, "Checkpoint step (default: the latest).")
  flags.mark_flags_as_required(["workdir", "prompt"])
  app.run(functools.partial(_main, run=command), flags_parser=_parse_flags)
