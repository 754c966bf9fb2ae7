"""lcx: train short, test long. Position schemes and length extrapolation in JAX/Flax NNX."""
