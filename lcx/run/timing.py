"""Wall seconds of a block, and how many of them JAX spent tracing, lowering and compiling.

An evaluation's log lines give both, so a slow length or task says whether its time went to
building programs (one per length or size bucket; on a GPU shared by several processes this
can be most of it) or to running them."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time

import jax

EVENTS = (
  "/jax/core/compile/jaxpr_trace_duration",
  "/jax/core/compile/jaxpr_to_mlir_module_duration",
  "/jax/core/compile/backend_compile_duration",
)
_lock = threading.Lock()
_compiling = [0.0]  # seconds, this process, since import


def _listen(event: str, seconds: float, **_) -> None:
  if event in EVENTS:
    with _lock:
      _compiling[0] += seconds


jax.monitoring.register_event_duration_secs_listener(_listen)


@dataclasses.dataclass
class Span:
  seconds: float = 0.0
  compiling: float = 0.0

  def __str__(self) -> str:
    return f"{self.seconds:.1f} s, {self.compiling:.1f} of them compiling"


@contextlib.contextmanager
def span():
  """Yields a Span, filled in when the block ends (an exception too)."""
  out, start, before = Span(), time.perf_counter(), _compiling[0]
  try:
    yield out
  finally:
    out.seconds, out.compiling = time.perf_counter() - start, _compiling[0] - before
