"""`python -m lcx.tools.bench.residuals`: the bytes lcx's train step keeps for its backward pass,
per `model.remat`, from a trace alone (jax.make_jaxpr of jax.vjp: nothing runs, nothing is
allocated), so a CPU sizes the large 64 x 1024 bfloat16 step a GPU runs.

Residuals are what jax.vjp's backward closes over, less what is held anyway: the arguments
(parameters, batch) and the constants. Traced as on a GPU: the plain-jnp references, not the
CPU-tuned backward passes (lcx/model/cpu_tuned.py), and the Pallas kernel or the XLA one as
`impl` says. XLA may keep less than jax hands it (it fuses and rematerializes elementwise work
on its own), so these bytes bound the device's activations from above; their change from one
remat to another is the estimate of the peak's (the device check measures it).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.extend
import jax.numpy as jnp
from flax import nnx

from lcx.model import cpu_tuned, decoder, options
from lcx.run import train
from lcx.tools.bench.workload import bench_config
from lcx.tools.report import markdown_table

GB = 1e9
LARGE = ("large", 64, 1024)  # the device check's memory target: size, batch, seq_len


@dataclasses.dataclass(frozen=True)
class Residual:
  """One array the backward keeps: its abstract value, the primitive that made it and, for a
  `checkpoint_name`d one, its name (else None)."""

  aval: jax.core.ShapedArray
  primitive: str
  name: str | None

  @property
  def nbytes(self) -> int:
    return self.aval.size * self.aval.dtype.itemsize


def saved(f, *args) -> list[Residual]:
  """The residuals of jax.vjp(f, *args), each once, beyond the arguments, constants and
  literals (what jax.ad_checkpoint.print_saved_residuals lists as made inside `f`)."""
  closed, (_, vjp_shape) = jax.make_jaxpr(lambda *a: jax.vjp(f, *a), return_shape=True)(*args)
  jaxpr = closed.jaxpr
  outs = jaxpr.outvars[len(jaxpr.outvars) - len(jax.tree.leaves(vjp_shape)) :]
  # A saved name reaches the backward through a reduce_precision (a no-op that keeps XLA from
  # fusing across it): its producer is the one before, as print_saved_residuals reads it.
  through = {
    e.outvars[0]: e.invars[0] for e in jaxpr.eqns if e.primitive.name == "reduce_precision"
  }
  kept = {through.get(v, v) for v in outs if not isinstance(v, jax.extend.core.Literal)}
  found = []
  for eqn in jaxpr.eqns:
    for v in eqn.outvars:
      if v in kept:
        name = eqn.params["name"] if eqn.primitive.name == "name" else None
        found.append(Residual(v.aval, eqn.primitive.name, name))
  return found


def step_residuals(config) -> list[Residual]:
  """What the backward of `config`'s train loss keeps (its model, batch and length; positions
  as given, one document a row), traced as on a GPU (`cpu_tuned.plain`)."""
  d = config.data
  batch = {
    "inputs": jax.ShapeDtypeStruct((d.batch_size, d.seq_len), jnp.int32),
    "targets": jax.ShapeDtypeStruct((d.batch_size, d.seq_len), jnp.int32),
    "positions": jax.ShapeDtypeStruct((d.batch_size, d.seq_len), jnp.int32),
    "segment_ids": jax.ShapeDtypeStruct((d.batch_size, d.seq_len), jnp.int32),
    "loss_mask": jax.ShapeDtypeStruct((d.batch_size, d.seq_len), jnp.float32),
  }
  with cpu_tuned.plain():
    graphdef, params = decoder.abstract(config.model)

    def loss(params, batch):
      return train.loss_fn(nnx.merge(graphdef, params), batch, batch["positions"])

    return saved(loss, params, batch)


def residual_bytes(
  size: str = LARGE[0],
  batch: int = LARGE[1],
  seq_len: int = LARGE[2],
  impl: str = "pallas",
  remats=options.REMATS,
  scheme: str = "rope",
) -> dict[str, int]:
  """{model.remat: residual bytes} of the bfloat16 train step at `size`, `batch` x `seq_len`."""
  config = bench_config(scheme, size, batch, seq_len)
  config.model.dtype, config.model.attention.impl = "bfloat16", impl
  out = {}
  for remat in remats:
    config.model.remat = remat
    out[remat] = sum(r.nbytes for r in step_residuals(config))
  return out


def table(by_impl: dict[str, dict[str, int]]) -> str:
  """{impl: {remat: bytes}} as a table: GB and the share of remat=none's, per impl."""
  rows = [
    [f"impl={impl}, remat={remat}", f"{n / GB:.3f}", f"{n / found['none']:.3f}"]
    for impl, found in by_impl.items()
    for remat, n in found.items()
  ]
  return markdown_table(["train step", "residual GB", "/ none"], rows)


def main() -> None:
  size, batch, seq_len = LARGE
  print(f"residuals of the {size} {batch} x {seq_len} bfloat16 train step (RoPE; traced, not run)")
  print(table({impl: residual_bytes(impl=impl) for impl in ("pallas", "xla")}))


if __name__ == "__main__":
  main()
