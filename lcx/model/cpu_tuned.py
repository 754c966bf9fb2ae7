"""The seam between CPU-tuned functions (hand-written backward passes, `jax.custom_vjp`) and
their plain-jnp references: the softmax (lcx/model/attention.py), RMSNorm and GELU
(lcx/model/decoder.py), CoPE's gates and table reads (lcx/model/positions/cope.py).

Each tuned function was measured faster on XLA:CPU (its docstring says by how much) and equals
its reference in value and gradient (tests/model/kernels/test_cpu_tuned.py). A custom_vjp has no
forward-mode rule, so `jax.jvp` and `jax.hessian` cannot go through it; the reference can.
Which one runs is decided when a function is traced:
  - by default the tuned one on CPU, the reference elsewhere (GPU, TPU: where it was not
    measured faster);
  - inside `with cpu_tuned.plain():` the reference everywhere (forward-mode autodiff through
    the whole model); `plain(False)` forces the tuned one.
A jitted function keeps what it was traced with: enter the context before the first call.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Callable

import jax

_PLAIN: contextvars.ContextVar[bool | None] = contextvars.ContextVar("plain", default=None)


@contextlib.contextmanager
def plain(on: bool = True):
  """Within: the plain-jnp references (on=True) or the tuned functions (on=False)."""
  token = _PLAIN.set(on)
  try:
    yield
  finally:
    _PLAIN.reset(token)


def uses_plain() -> bool:
  """What a function traced now runs: the reference unless on CPU, or as `plain` says."""
  chosen = _PLAIN.get()
  return jax.default_backend() != "cpu" if chosen is None else chosen


def choose(tuned: Callable, reference: Callable) -> Callable:
  """`tuned` or `reference` (same arguments), per `uses_plain()` at each call; both stay
  reachable as `.tuned` and `.reference` (tests hold them equal)."""

  @functools.wraps(reference)
  def call(*args):
    return reference(*args) if uses_plain() else tuned(*args)

  call.tuned, call.reference = tuned, reference
  return call
