"""Quickstart: a 0.8M-parameter byte model (the CPU pilot's shape), trained at L=64 for a few
minutes on 2 CPU cores, evaluated at 1x..8x. `pos` picks the scheme as in configs/base.py."""

from configs import base


def get_config(arg=None):
  arg = base.parse_arg(arg, pos="rope", steps=300)
  config = base.get_config(f"pos={arg.pos},size=small")
  config.data.seq_len = 64
  config.data.batch_size = 32
  config.train.steps = arg.steps
  config.train.warmup_steps = 50
  config.train.log_every = 50
  config.train.checkpoint_every = 100
  config.eval.num_tokens = 32768
  return config
