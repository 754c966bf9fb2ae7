"""Position schemes, RoPE extension methods, remaps and sparse patterns, found by name."""

# absolute, biases, nope and rotary register their schemes on import; patterns and remaps are
# public sub-modules.
from lcx.positions import absolute, biases, nope, patterns, remaps, rotary
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
from lcx.positions.randomized import randomized_positions
from lcx.positions.scaling import rope_frequencies
