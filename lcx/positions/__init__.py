"""Position schemes, RoPE extension methods and remaps, found by name (sparse attention
patterns, which are masks, not positions, live in lcx.patterns)."""

# absolute, biases, cope, fox, nope, path and rotary register their schemes on import; remaps is
# a public sub-module.
from lcx.positions import absolute, biases, cope, fox, nope, path, remaps, rotary
from lcx.positions.base import (
  SCHEMES,
  Dims,
  Scheme,
  build,
  check_eval_length,
  default_config,
  register,
  spec,
  validate,
)
from lcx.positions.biases import alibi_slopes, t5_bucket
from lcx.positions.randomized import pose_positions, random_distances, randomized_positions
from lcx.positions.scaling import rope_frequencies
