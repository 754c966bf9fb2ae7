"""What every task returns (`Example`), and the random letters and numbers tasks draw."""

import dataclasses
import string

import numpy as np

LETTERS = string.ascii_lowercase.encode()


@dataclasses.dataclass(frozen=True)
class Example:
  """`scored`: the answer bytes that carry loss and score (all when None), for a task whose
  answer interleaves random bytes with determined ones (flip-flop)."""

  prompt: bytes
  answer: bytes
  scored: tuple[int, ...] | None = None


def letters(rng: np.random.Generator, n: int) -> bytes:
  """`n` lowercase letters, each uniform over a..z."""
  return bytes(rng.choice(np.frombuffer(LETTERS, np.uint8), size=n))


def number(rng: np.random.Generator, digits: int) -> str:
  """A `digits`-digit number without a leading zero (0..9 for one digit)."""
  first = str(rng.integers(1 if digits > 1 else 0, 10))
  return first + "".join(str(d) for d in rng.integers(0, 10, size=digits - 1))
