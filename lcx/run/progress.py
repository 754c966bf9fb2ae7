"""Progress text for logs (no TTY, no tqdm bar): done/total, throughput and an ETA.

Free of jax: the sweep driver, which never imports it, shares these lines with training,
evaluation and the LongRoPE search.
"""

from __future__ import annotations


def eta_text(seconds: float) -> str:
  """'ETA 42s', 'ETA 3m05s', 'ETA 2h07m': one short form for every progress line in a log."""
  seconds = max(0, round(seconds))
  if seconds < 60:
    return f"ETA {seconds}s"
  if seconds < 3600:
    return f"ETA {seconds // 60}m{seconds % 60:02d}s"
  return f"ETA {seconds // 3600}h{seconds % 3600 // 60:02d}m"


def progress_text(done: int, total: int, seconds_each: float, tokens_per_sec=None) -> str:
  """'50/200, 1234 tok/s, ETA 3m05s': what a log (no tqdm bar) shows of a loop's progress;
  the ETA is the remaining items at `seconds_each`, the caller's measured pace."""
  rate = "" if tokens_per_sec is None else f", {tokens_per_sec:.0f} tok/s"
  return f"{done}/{total}{rate}, {eta_text((total - done) * seconds_each)}"
