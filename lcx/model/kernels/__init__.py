"""Accelerator kernels, each beside the plain-jnp reference it must equal (`reference.py`).

`impl.py`: which kernel a model runs: `get_kernel` (the XLA kernels of each
`model.attention.kind`) and `model.attention.impl`.
`flash.py`: a Pallas flash attention (forward and backward) for every position scheme but the
contextual ones (CoPE) and PaTH; FoX's prefix sums are kernel inputs. `model.attention.impl`
(auto | xla | pallas) picks it (`resolve_impl`). Its parts, one concern each: `flash_plan.py`
(each program's block ranges), `flash_tables.py` (the bias hook traced, the distance table),
`flash_kernels.py` (the forward, dq and dk/dv kernels), `flash_specs.py` (block specs, inputs).
`mosaic.py`: the same kernel for a TPU (head-major blocks Mosaic accepts, a grid over key blocks
with VMEM scratch), sharing the plan, the tables and each block's scores; its kernel bodies in
`mosaic_kernels.py`. `impl.KERNELS` picks it on a TPU.
"""

from __future__ import annotations

from lcx.model.kernels.impl import (
  check_impl,
  flash_kernel,
  get_kernel,
  resolve_impl,
)

__all__ = [
  "check_impl",
  "flash_kernel",
  "get_kernel",
  "resolve_impl",
]
