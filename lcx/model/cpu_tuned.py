"""The seam between CPU-tuned functions (hand-written backward passes, `jax.custom_vjp`) and
their plain-jnp references: the softmax (lcx/model/attention.py), RMSNorm and GELU
(lcx/model/decoder.py), CoPE's gates and table reads (lcx/model/positions/cope.py).

Each tuned function was measured faster on XLA:CPU (its docstring says by how much) and equals
its reference in value and gradient (tests/model/kernels/test_cpu_tuned.py). A custom_vjp has no
forward-mode rule, so `jax.jvp` and `jax.hessian` cannot go through it; the reference can.
Which one runs is decided when a function is traced:
  - by default the tuned one on CPU, the reference elsewhere (GPU, TPU: where it was not
    measured faster), and the reference wherever an argument carries a `jax.jvp` tangent
    (`forward_mode`: jax.jvp, jax.jacfwd, jax.hessian), so forward mode needs no context;
  - inside `with cpu_tuned.plain():` the reference everywhere; `plain(False)` forces the tuned
    one.
A jitted function keeps what it was traced with: `jax.jvp(jax.jit(f))` traces f before any
tangent exists, so jit inside the jvp (`jax.jit(lambda: jax.jvp(f, ...))`) or enter `plain()`.
The same test routes the Pallas kernel (lcx/model/kernels/impl.py) and the other custom_vjp
functions (`forward_safe`: PaTH's solve) to their plain forms under forward mode.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Callable

import jax
from jax.interpreters import ad

_PLAIN: contextvars.ContextVar[bool | None] = contextvars.ContextVar("plain", default=None)


@contextlib.contextmanager
def plain(on: bool = True):
  """Within: the plain-jnp references (on=True) or the tuned functions (on=False)."""
  token = _PLAIN.set(on)
  try:
    yield
  finally:
    _PLAIN.reset(token)


def forward_mode(*args) -> bool:
  """Whether an argument carries a forward-mode tangent: a JVPTracer, outermost or under the
  tracers of the transformations traced since (vmap's, grad's). Reverse mode (jax.grad)
  linearizes with tracers of another kind, so it keeps the custom backward passes."""
  for leaf in jax.tree.leaves(args):
    while isinstance(leaf, jax.core.Tracer):
      if isinstance(leaf, ad.JVPTracer):
        return True
      leaf = getattr(leaf, "primal", getattr(leaf, "val", None))
  return False


def uses_plain(*args) -> bool:
  """What a function traced now on `args` runs: the reference off CPU or under forward mode,
  unless `plain` says otherwise."""
  chosen = _PLAIN.get()
  if chosen is not None:
    return chosen
  return jax.default_backend() != "cpu" or forward_mode(*args)


def choose(tuned: Callable, reference: Callable) -> Callable:
  """`tuned` or `reference` (same arguments), per `uses_plain()` at each call; both stay
  reachable as `.tuned` and `.reference` (tests hold them equal)."""

  @functools.wraps(reference)
  def call(*args):
    return reference(*args) if uses_plain(*args) else tuned(*args)

  call.tuned, call.reference = tuned, reference
  return call


def forward_safe(custom: Callable, reference: Callable) -> Callable:
  """`custom` (a custom_vjp needed on every backend), or `reference` under forward mode."""

  @functools.wraps(custom)
  def call(*args):
    return reference(*args) if forward_mode(*args) else custom(*args)

  call.custom, call.reference = custom, reference
  return call
