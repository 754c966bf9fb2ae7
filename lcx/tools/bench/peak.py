"""Section `peak`: measured square-matmul throughput per library and dtype, the roofline that
MFU divides by. XLA's own matmul is not necessarily the fastest this machine can do (PyTorch
calls oneDNN), so the roofline is the best float32 number of any library.

Each timed call runs `chain` dependent matmuls (the XLA one in one jitted fori_loop), warmed: one
launch and one wait per call made 5 single calls of an 8192^3 bf16 matmul read 526-575 TFLOP/s on
an H200 whose looped matmul runs 816. On a CPU (`LIMITS`) the section runs float32 only, at most
2048: XLA:CPU has no native bfloat16 matmul (bf16 at 4096 did not finish in 15 minutes on 2 cores).
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import jax
import jax.numpy as jnp

from lcx.tools.bench.measure import Program, interleaved, timed
from lcx.tools.report import markdown_table

TITLE = "Peak: measured square matmul throughput (median per size; the roofline)"
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


@dataclasses.dataclass(frozen=True)
class Limits:
  """What the matmul probes run on a backend: the dtypes it has natively, sizes up to `max_n`
  (None: any), `chain` matmuls per timed call."""

  dtypes: tuple[str, ...]
  max_n: int | None
  chain: int


ACCELERATOR = Limits(tuple(DTYPES), None, 16)
# A CPU's peak section costs under a minute: 2 chained float32 matmuls at <= 2048 (1024 and 2048
# with the default --peak_sizes).
LIMITS = {"cpu": Limits(("float32",), 2048, 2)}


def limits(backend: str | None = None) -> Limits:
  return LIMITS.get(backend or jax.default_backend(), ACCELERATOR)


def plan(sizes: list[int], backend: str | None = None) -> tuple[list[tuple[str, int]], dict]:
  """((dtype, n) the probes run, {what is left out: why}) on `backend` (default: this one).
  Sizes above the backend's maximum are left out; with none left, its maximum runs."""
  backend = backend or jax.default_backend()
  lim = limits(backend)
  kept = [n for n in sizes if lim.max_n is None or n <= lim.max_n] or [lim.max_n]
  skipped = {d: f"no native {d} matmul on {backend}" for d in DTYPES if d not in lim.dtypes}
  skipped |= {f"n={n}": f"above {lim.max_n} on {backend}" for n in sizes if n not in kept}
  return [(d, n) for d in lim.dtypes for n in kept], skipped


def chained_matmul(a_NxN, b_NxN, chain: int):
  """a @ b @ ... @ b, `chain` dependent matmuls in one fori_loop: one launch for all of them."""
  return jax.lax.fori_loop(0, chain, lambda _, x_NxN: x_NxN @ b_NxN, a_NxN)


def xla_matmul(dtype: str, n: int, chain: int | None = None) -> Program:
  """`chained_matmul` jitted, compiled and run once (warm). The right factor is scaled by
  1/sqrt(n), so the product stays near unit scale however long the chain."""
  chain = chain or limits().chain
  a_NxN = jax.random.normal(jax.random.key(0), (n, n), DTYPES[dtype])
  b_NxN = (jax.random.normal(jax.random.key(1), (n, n)) / n**0.5).astype(DTYPES[dtype])
  start = time.perf_counter()
  jitted = jax.jit(chained_matmul, static_argnames="chain")
  compiled = jitted.lower(a_NxN, b_NxN, chain=chain).compile()
  compile_s = time.perf_counter() - start

  def step():
    jax.block_until_ready(compiled(a_NxN, b_NxN))

  step()
  return Program(step, compile_s)


def torch_matmul(dtype: str, n: int, chain: int | None = None) -> Program:
  """PyTorch's matmul on the device JAX runs on (CPU, or CUDA when JAX is on a GPU), `chain`
  dependent ones per step as `xla_matmul`."""
  import torch

  chain = chain or limits().chain
  device = "cuda" if jax.default_backend() == "gpu" and torch.cuda.is_available() else "cpu"
  a_NxN, b_NxN = (torch.randn(n, n, dtype=getattr(torch, dtype), device=device) for _ in range(2))
  b_NxN /= n**0.5

  def step():  # eager: returns when done
    x_NxN = a_NxN
    for _ in range(chain):
      x_NxN = torch.matmul(x_NxN, b_NxN)
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
  """Best matmul FLOP/s over square sizes, per library and dtype (interleaved rounds), of the
  dtypes and sizes `plan` keeps on this backend; what it leaves out is under "skipped"."""
  del results
  points, skipped = plan(opts.peak_sizes)
  chain = limits().chain
  out, programs = {}, {}
  for lib, (make, missing) in MATMULS.items():
    if missing():
      out[lib] = {"unavailable": missing()}
      continue
    programs.update({(lib, dtype, n): make(dtype, n, chain) for dtype, n in points})
  rounds = interleaved(programs, opts.rounds, opts.steps)
  for lib in MATMULS:
    if lib in out:
      continue
    out[lib] = {}
    for dtype, n in points:
      flops = 2 * n**3 * chain / statistics.median(rounds[(lib, dtype, n)])
      by_size = out[lib].setdefault(dtype, {"flops": 0.0, "flops_by_size": {}})
      by_size["flops_by_size"][str(n)] = flops
      by_size["flops"] = max(by_size["flops"], flops)
  out["roofline_float32"] = max(v["float32"]["flops"] for v in out.values() if "float32" in v)
  return out | {"chain": chain, "skipped": skipped}


def roofline(results: dict) -> float:
  """The float32 peak of the `peak` section in `results` (the sections run so far)."""
  return results["peak"]["roofline_float32"]


def measured(results: dict, dtype: str) -> float | None:
  """The best matmul FLOP/s of any library in `dtype` in the `peak` section, or None (not run
  on this backend)."""
  libs = [results["peak"][lib] for lib in MATMULS]
  return max((v[dtype]["flops"] for v in libs if dtype in v), default=None)


def table(result: dict) -> str:
  sizes = next(result[lib] for lib in MATMULS if "float32" in result[lib])["float32"]
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
  left_out = "".join(f"\nnot run: {what} ({why})" for what, why in result["skipped"].items())
  return (
    markdown_table(head, rows) + f"\n\n{result['chain']} chained matmuls per timed call; "
    f"roofline (best float32): {result['roofline_float32'] / 1e9:.1f} GFLOP/s{left_out}"
  )
