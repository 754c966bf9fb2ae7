"""Position schemes, RoPE extension methods, remaps and sparse patterns, found by name."""

from lcx.positions import absolute, biases, nope, rotary  # noqa: F401  (register schemes)
from lcx.positions import patterns, remaps  # noqa: F401  (public sub-modules)
from lcx.positions.base import (SCHEMES, Dims, Scheme, build, check_eval_length, default_config,
                                register, spec, validate)
from lcx.positions.biases import alibi_slopes, t5_bucket
from lcx.positions.randomized import pose_positions, randomized_positions
from lcx.positions.scaling import rope_frequencies
