"""lcx.tools.bench.residuals: the backward's kept bytes per model.remat, from a trace alone."""

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from lcx.model import options
from lcx.tools.bench import residuals


def test_saved_reads_names_through_a_checkpoint_and_leaves_out_the_arguments():
  """sin(x) named and kept, its square recomputed; x itself (an argument) is not counted."""
  policy = jax.checkpoint_policies.save_only_these_names("s")

  @jax.checkpoint
  def plain(x):
    return jnp.sin(jnp.sin(x) ** 2)

  def named(x):
    return jnp.sin(checkpoint_name(jnp.sin(x), "s") ** 2)

  x = jax.ShapeDtypeStruct((3, 5), jnp.float32)
  (kept,) = residuals.saved(jax.checkpoint(named, policy=policy), x)
  assert (kept.aval.shape, kept.name, kept.nbytes) == ((3, 5), "s", 60)
  assert residuals.saved(plain, x) == []  # everything recomputed from x, which is held anyway
  assert len(residuals.saved(named, x)) == 3  # no checkpoint: cos(x), sin(x), cos(sin(x)^2)


def test_residual_bytes_of_each_remat_and_the_table():
  """The tiny model's step: block keeps least, matmuls less than none, on both kernels."""
  by_impl = {impl: residuals.residual_bytes("tiny", 2, 32, impl) for impl in ("xla", "pallas")}
  for found in by_impl.values():
    assert list(found) == list(options.REMATS)
    assert found["block"] < found["matmuls"] < found["none"], found
  text = residuals.table(by_impl)
  assert "| impl=pallas, remat=matmuls |" in text
  assert f"{by_impl['xla']['none'] / residuals.GB:.3f} |  1.000 |" in text
