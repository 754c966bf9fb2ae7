"""lcx.run.timing: a span's seconds, the share of them JAX spent building programs, and XLA's
part of that with the programs it built."""

import jax
import jax.numpy as jnp
import pytest

from lcx.run import timing


def test_a_span_counts_a_new_programs_compilation_and_not_a_cached_one():
  program = jax.jit(lambda x: jnp.sin(x) @ x.T + 0.123456)  # a program no other test builds
  x = jnp.ones((7, 5))
  with timing.span() as first:
    jax.block_until_ready(program(x))
  with timing.span() as again:
    jax.block_until_ready(program(x))
  assert 0 < first.xla_compiling < first.compiling <= first.seconds and first.programs == 1
  assert again.compiling == again.xla_compiling == again.programs == 0
  assert again.seconds < first.seconds
  assert str(first) == f"{first.seconds:.1f} s, {first.compiling:.1f} of them compiling"


def test_a_span_is_filled_in_when_its_block_raises():
  with pytest.raises(ValueError), timing.span() as took:
    jax.block_until_ready(jax.jit(lambda x: x * 3.25 - 1)(jnp.ones(3)))
    raise ValueError("stop")
  assert 0 < took.compiling <= took.seconds
