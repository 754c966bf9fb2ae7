"""Wall seconds of a block, and how many of them JAX spent tracing, lowering and compiling.

An evaluation's log lines give both, so a slow length or task says whether its time went to
building programs (one per length or size bucket; on a GPU shared by several processes this
can be most of it) or to running them. The long-evaluation bench reads XLA's part alone and
the programs built, from the same listener."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time

import jax

TRACE = "/jax/core/compile/jaxpr_trace_duration"
LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
XLA = "/jax/core/compile/backend_compile_duration"  # one per program built (or cache-loaded)
_lock = threading.Lock()
_seconds = dict.fromkeys((TRACE, LOWER, XLA), 0.0)  # this process, since import
_programs = [0]


def _listen(event: str, seconds: float, **_) -> None:
  if event in _seconds:
    with _lock:
      _seconds[event] += seconds
      _programs[0] += event == XLA


jax.monitoring.register_event_duration_secs_listener(_listen)


@dataclasses.dataclass
class Span:
  seconds: float = 0.0
  compiling: float = 0.0  # tracing, lowering and XLA
  xla_compiling: float = 0.0  # XLA alone
  programs: int = 0  # programs XLA built

  def __str__(self) -> str:
    return f"{self.seconds:.1f} s, {self.compiling:.1f} of them compiling"


def _totals() -> tuple[float, float, int]:
  with _lock:
    return sum(_seconds.values()), _seconds[XLA], _programs[0]


@contextlib.contextmanager
def span():
  """Yields a Span, filled in when the block ends (an exception too)."""
  out, start, before = Span(), time.perf_counter(), _totals()
  try:
    yield out
  finally:
    out.seconds = time.perf_counter() - start
    out.compiling, out.xla_compiling, out.programs = (
      now - then for now, then in zip(_totals(), before)
    )
