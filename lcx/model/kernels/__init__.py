"""Accelerator kernels, each beside the plain-jnp reference it must equal (`reference.py`).

`impl.py`: which kernel a model runs: `get_kernel` (the XLA kernels of each
`model.attention.kind`) and `model.attention.impl`.
`flash.py`: a Pallas flash attention (forward and backward) for every position scheme but the
contextual ones (CoPE) and PaTH; FoX's prefix sums are kernel inputs. `model.attention.impl`
(auto | xla | pallas) picks it (`resolve_impl`).
"""

from __future__ import annotations

from lcx.model.kernels.impl import (
  IMPLS,
  KINDS,
  check_impl,
  flash_kernel,
  get_kernel,
  is_block_size,
  resolve_impl,
)

__all__ = [
  "IMPLS",
  "KINDS",
  "check_impl",
  "flash_kernel",
  "get_kernel",
  "is_block_size",
  "resolve_impl",
]
