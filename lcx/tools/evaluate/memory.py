"""A lower bound on the device memory of one evaluation batch, checked before anything compiles.

A length that cannot fit is refused naming it and the bound, instead of an out-of-memory crash
(or a CPU host swapping for minutes) after compilation. Only the two largest buffers are
counted, the float32 logits and one layer's attention scores, so the bound never refuses what
fits; a length under it may still not fit.
"""

from __future__ import annotations

import os

import jax

FLOAT32 = 4


def device_bytes() -> tuple[int, str]:
  """(bytes, what they are): an accelerator's memory limit, or the host's RAM on CPU."""
  device = jax.local_devices()[0]
  stats = device.memory_stats() or {}
  if stats.get("bytes_limit"):
    return int(stats["bytes_limit"]), f"one {device.platform} device's memory"
  return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "the host's RAM"


def lower_bound(config, length: int, mesh) -> int:
  """Bytes one device holds at once scoring windows of `length`: its rows of float32 logits
  (rows = eval.batch_tokens // length, at least 1, split over the batch axes) and one layer's
  attention scores for its heads (length x length, or length x chunk for the chunked kernel)."""
  m, ev = config.model, config.eval
  shards = mesh.shape["data"] * mesh.shape["fsdp"]
  rows = -(-max(1, ev.batch_tokens // length) // shards)
  heads = max(1, m.num_heads // mesh.shape["tensor"])
  keys = min(m.attention.chunk_size, length) if length >= ev.chunked_from else length
  return rows * length * (m.vocab_size + heads * keys) * FLOAT32


def check(config, lengths, mesh) -> None:
  """ValueError naming the first length whose lower bound exceeds the device's memory."""
  limit, where = device_bytes()
  for length in sorted(lengths):
    need = lower_bound(config, length, mesh)
    if need > limit:
      raise ValueError(
        f"eval.lengths: {length} needs at least {need / 2**30:.1f} GiB for one batch (its "
        f"logits and one layer's attention scores), more than the {limit / 2**30:.1f} GiB of "
        f"{where}; evaluate shorter lengths"
      )
