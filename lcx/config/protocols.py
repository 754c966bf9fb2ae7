"""The evaluation protocols (`eval.protocol`), one record each: where a sequence's windows start,
which of a window's tokens are scored, the settings recorded beside the numbers, the words the
report describes them with, and their checks. Adding a protocol is adding a record here.

Every protocol runs over every sequence `samples` draws (the stream, or each long document);
`lcx.tools.evaluate.samples.cut` turns the starts and the scored tokens into model inputs.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np


@dataclasses.dataclass(frozen=True)
class Protocol:
  """`starts(n, T, settings)`: window starts over a sequence of n pairs; `scored(start, T,
  scored_until, settings)`: the window's scored tokens (bool, T) given where the earlier windows'
  scoring ended; `settings(ev, train_len)`: its own resolved fields (stride, last_k);
  `describe(settings)`: a clause after "NAME protocol on D documents"; `check(ev, lengths)`:
  ValueError naming the field; `documents`: the eval.documents it can run on."""

  name: str
  summary: str
  starts: Callable[[int, int, dict], list[int]]
  scored: Callable[[int, int, int, dict], np.ndarray]
  settings: Callable[[object, int], dict] = lambda ev, train_len: {}
  describe: Callable[[dict], str] = lambda settings: ""
  check: Callable[[object, list[int]], None] = lambda ev, lengths: None
  documents: tuple[str, ...] = ("stream", "long")


def _new_tokens(start: int, length: int, scored_until: int, settings: dict) -> np.ndarray:
  """The tokens no earlier window scored."""
  return start + np.arange(length) >= scored_until


def _sliding_starts(n: int, length: int, settings: dict) -> list[int]:
  starts = list(range(0, n - length + 1, settings["stride"]))
  if starts and starts[-1] + length < n:
    starts.append(n - length)  # the tail no window reached
  return starts


def _check_stride(ev, lengths) -> None:
  if ev.stride > min(lengths):
    raise ValueError(
      f"eval.stride={ev.stride} must be <= the shortest eval length "
      f"{min(lengths)} (a larger stride would skip tokens)"
    )


def _check_last_k(ev, lengths) -> None:
  documents = [d.strip() for d in str(ev.documents).split(",") if d.strip()]
  if "long" not in documents:
    raise ValueError(
      f"eval.protocol='last_k' scores the end of long documents: it needs "
      f"eval.documents='long', not {ev.documents!r}"
    )
  if ev.last_k > min(lengths):
    raise ValueError(f"eval.last_k={ev.last_k} must be <= the shortest eval length {min(lengths)}")


_ALL = (
  Protocol(
    "windows",
    "non-overlapping windows of T, every token scored (ALiBi paper)",
    starts=lambda n, length, settings: list(range(0, n - length + 1, length)),
    scored=_new_tokens,
  ),
  Protocol(
    "sliding",
    "windows of T every `stride` tokens; the first window scores all its tokens, each later one "
    "only the tokens no earlier window scored (PI / YaRN); stride = T is windows",
    starts=_sliding_starts,
    scored=_new_tokens,
    settings=lambda ev, train_len: {"stride": ev.stride or train_len},
    describe=lambda settings: f", stride {settings.get('stride')}",
    check=_check_stride,
  ),
  Protocol(
    "last_k",
    "one window per document ending at its last pair; only the last k tokens are scored, so the "
    "same tokens are scored at every T with T - k tokens of context before them (NoPE paper)",
    starts=lambda n, length, settings: [n - length],
    scored=lambda start, length, until, settings: np.arange(length) >= length - settings["last_k"],
    settings=lambda ev, train_len: {"last_k": ev.last_k or max(1, train_len // 4)},
    describe=lambda settings: f", scoring the last {settings.get('last_k')} tokens of each window",
    check=_check_last_k,
    documents=("long",),
  ),
)
PROTOCOLS = {p.name: p for p in _ALL}


def settings(ev, train_len: int) -> dict:
  """The protocol's own fields, resolved (0 where the protocol has none): both are recorded in
  every result, so results of every protocol have the same keys."""
  return {"stride": 0, "last_k": 0, **PROTOCOLS[ev.protocol].settings(ev, train_len)}
