"""Section `peak`: measured square-matmul throughput per library and dtype, the roofline that
MFU divides by. XLA's own matmul is not necessarily the fastest this machine can do (PyTorch
calls oneDNN), so the roofline is the best float32 number of any library."""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp

from lcx.tools.bench.measure import Program, interleaved, timed
from lcx.tools.report import markdown_table

TITLE = "Peak: measured square matmul throughput (median per size; the roofline)"
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def xla_matmul(dtype: str, n: int) -> Program:
  a_NxN = jax.random.normal(jax.random.key(0), (n, n), DTYPES[dtype])
  b_NxN = jax.random.normal(jax.random.key(1), (n, n), DTYPES[dtype])
  start = time.perf_counter()
  compiled = jax.jit(jnp.matmul).lower(a_NxN, b_NxN).compile()
  compile_s = time.perf_counter() - start

  def step():
    jax.block_until_ready(compiled(a_NxN, b_NxN))

  step()
  return Program(step, compile_s)


def torch_matmul(dtype: str, n: int) -> Program:
  """PyTorch's matmul on the device JAX runs on (CPU, or CUDA when JAX is on a GPU)."""
  import torch

  device = "cuda" if jax.default_backend() == "gpu" and torch.cuda.is_available() else "cpu"
  a_NxN, b_NxN = (torch.randn(n, n, dtype=getattr(torch, dtype), device=device) for _ in range(2))

  def step():  # eager: returns when done
    torch.matmul(a_NxN, b_NxN)
    if device == "cuda":
      torch.cuda.synchronize()

  return Program(step, timed(step))


def _xla_missing() -> str | None:
  return None


def _torch_missing() -> str | None:
  try:
    import torch  # noqa: F401
  except ImportError:
    return "not importable: torch"
  return None


# library -> (matmul Program factory by (dtype, n), () -> None or why it is unavailable)
MATMULS = {"xla": (xla_matmul, _xla_missing), "torch": (torch_matmul, _torch_missing)}


def run(opts, results) -> dict:
  """Best matmul FLOP/s over square sizes, per library and dtype (interleaved rounds)."""
  del results
  out, programs = {}, {}
  for lib, (make, missing) in MATMULS.items():
    if missing():
      out[lib] = {"unavailable": missing()}
      continue
    programs.update({(lib, dtype, n): make(dtype, n) for dtype in DTYPES for n in opts.peak_sizes})
  rounds = interleaved(programs, opts.rounds, opts.steps)
  for lib in MATMULS:
    if lib in out:
      continue
    out[lib] = {}
    for dtype in DTYPES:
      by_size = {
        str(n): 2 * n**3 / statistics.median(rounds[(lib, dtype, n)]) for n in opts.peak_sizes
      }
      out[lib][dtype] = {"flops": max(by_size.values()), "flops_by_size": by_size}
  out["roofline_float32"] = max(v["float32"]["flops"] for v in out.values() if "float32" in v)
  return out


def roofline(results: dict) -> float:
  """The float32 peak of the `peak` section in `results` (the sections run so far)."""
  return results["peak"]["roofline_float32"]


def table(result: dict) -> str:
  sizes = next(v for v in result.values() if isinstance(v, dict) and "float32" in v)["float32"]
  head = ["library", "dtype", "GFLOP/s"] + [f"n={n}" for n in sizes["flops_by_size"]]
  rows = []
  for lib in MATMULS:
    if "unavailable" in result[lib]:
      rows.append([lib, result[lib]["unavailable"]] + [""] * (len(head) - 2))
      continue
    rows += [
      [lib, dtype, f"{v['flops'] / 1e9:.1f}"]
      + [f"{x / 1e9:.1f}" for x in v["flops_by_size"].values()]
      for dtype, v in result[lib].items()
    ]
  return (
    markdown_table(head, rows) + "\n\nroofline (best float32): "
    f"{result['roofline_float32'] / 1e9:.1f} GFLOP/s"
  )
