"""Tasks on random letters, digits and bits: copy, reverse, sort, addition, parity,
associative recall and induction."""

import numpy as np

from lcx.data.tasks.example import Example, letters, number


def copy(rng: np.random.Generator, length: int) -> Example:
  """`abc=` -> `abc`."""
  symbols = letters(rng, length)
  return Example(symbols + b"=", symbols)


def reverse(rng: np.random.Generator, length: int) -> Example:
  """`abc=` -> `cba`."""
  symbols = letters(rng, length)
  return Example(symbols + b"=", symbols[::-1])


def sort(rng: np.random.Generator, length: int) -> Example:
  """`cab=` -> `abc`."""
  symbols = letters(rng, length)
  return Example(symbols + b"=", bytes(sorted(symbols)))


def addition(rng: np.random.Generator, length: int) -> Example:
  """Two `length`-digit numbers; the sum is zero-padded to `length + 1` digits."""
  a, b = number(rng, length), number(rng, length)
  total = str(int(a) + int(b)).zfill(length + 1)
  return Example(f"{a}+{b}=".encode(), total.encode())


def parity(rng: np.random.Generator, length: int) -> Example:
  """`10110=` -> `1`: whether the count of ones is odd."""
  bits = rng.integers(0, 2, size=length)
  return Example("".join(map(str, bits)).encode() + b"=", str(bits.sum() % 2).encode())


def associative_recall(rng: np.random.Generator, length: int) -> Example:
  """`length` pairs `key:value;`, then `?key:` -> its value.

  Keys are 4 letters and distinct from each other (so the query has one answer);
  values are 4 digits and may repeat.
  """
  keys = set()
  while len(keys) < length:
    keys.add(letters(rng, 4))
  keys = sorted(keys)
  keys = [keys[i] for i in rng.permutation(length)]
  values = [str(v).zfill(4).encode() for v in rng.integers(0, 10_000, size=length)]
  query = int(rng.integers(length))
  pairs = b"".join(k + b":" + v + b";" for k, v in zip(keys, values))
  return Example(pairs + b"?" + keys[query] + b":", values[query])


INDUCTION_CUE = 3  # Letters of the prefix repeated in the prompt to start the repeat.


def induction(rng: np.random.Generator, length: int) -> Example:
  """A random prefix, then its first letters again: continue the repeat.

  The prefix is drawn until its opening letters occur nowhere else, so the point
  where the repeat starts is unambiguous.
  """
  while True:
    prefix = letters(rng, length + INDUCTION_CUE)
    prompt = prefix + prefix[:INDUCTION_CUE]
    if prompt.find(prefix[:INDUCTION_CUE], 1) == len(prefix):
      return Example(prompt, prefix[INDUCTION_CUE:])
