"""Quickstart: a 0.8M-parameter byte model (the CPU pilot's shape), trained at L=64 for a few
minutes on 2 CPU cores, evaluated at 1x..8x. `pos` picks the scheme as in configs/base.py;
the fields are in lcx/config/defaults.py (`quickstart_config`)."""

from lcx.config import defaults


def get_config(arg=None):
  return defaults.quickstart_config(arg)
