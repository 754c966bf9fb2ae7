"""A subset of Deletang et al. 2023's ("Neural Networks and the Chomsky Hierarchy") tasks, as
Ruoss et al. 2023 use them, sized like the paper by input symbols, one byte each. Answers with
a length that varies end with `.` (the paper's termination token)."""

import numpy as np

from lcx.data.tasks.example import Example


def even_pairs(rng: np.random.Generator, length: int) -> Example:
  """`length` letters a/b -> `1` if `ab` and `ba` occur an even number of times in all, else `0`."""
  symbols = bytes(rng.choice(np.frombuffer(b"ab", np.uint8), size=length))
  pairs = sum(symbols[i] != symbols[i + 1] for i in range(length - 1))
  return Example(symbols + b"=", b"1" if pairs % 2 == 0 else b"0")


CHOMSKY_MODULUS = 5  # The paper's modulus for modular arithmetic and cycle length.


def modular_arithmetic(rng: np.random.Generator, length: int) -> Example:
  """`length` numbers in 0..4 joined by `+`, `-`, `*` (`*` first, then left to right) mod 5:
  `1-1-1=` -> `4`, `0*1+4*3-2=` -> `0`."""
  numbers = rng.integers(0, CHOMSKY_MODULUS, size=length)
  ops = rng.choice(np.frombuffer(b"+-*", np.uint8), size=length - 1)
  terms, sign, product = [], 1, int(numbers[0])
  for op, number in zip(bytes(ops), numbers[1:].tolist()):
    if op == ord("*"):
      product *= number
    else:
      terms.append(sign * product)
      sign, product = (1 if op == ord("+") else -1), number
  terms.append(sign * product)
  text = "".join(str(n) + chr(o) for n, o in zip(numbers[:-1].tolist(), bytes(ops)))
  prompt = (text + str(numbers[-1]) + "=").encode()
  return Example(prompt, str(sum(terms) % CHOMSKY_MODULUS).encode())


def cycle_navigation(rng: np.random.Generator, length: int) -> Example:
  """`length` moves on a cycle of 5 from 0: `0` stay, `+` one forward, `-` one back -> the
  final position: `++-+=` -> `2`."""
  moves = rng.integers(0, 3, size=length)
  position = int((moves == 1).sum() - (moves == 2).sum()) % CHOMSKY_MODULUS
  return Example(bytes(b"0+-"[m] for m in moves) + b"=", str(position).encode())


STACK_ACTIONS = b"pzo"  # pop, push 0, push 1


def stack_manipulation(rng: np.random.Generator, length: int) -> Example:
  """A stack of bits given bottom to top, then actions `p` pop (ignored on an empty stack),
  `z` push 0, `o` push 1, `length` symbols in all -> the final stack top to bottom and `.`:
  `0110opp=` -> `110.`. The stack takes 1..length-1 symbols (one bit at length 1)."""
  size = 1 if length == 1 else int(rng.integers(1, length))
  stack = bytes(rng.choice(np.frombuffer(b"01", np.uint8), size=size))
  actions = bytes(rng.choice(np.frombuffer(STACK_ACTIONS, np.uint8), size=length - size))
  final = bytearray(stack)
  for action in actions:
    if action == ord("p"):
      final = final[:-1]
    else:
      final.append(ord("0") if action == ord("z") else ord("1"))
  return Example(stack + actions + b"=", bytes(final[::-1]) + b".")


def bucket_sort(rng: np.random.Generator, length: int) -> Example:
  """`length` letters from `a`..`e` -> sorted: `ceab=` -> `abce`."""
  symbols = bytes(rng.choice(np.frombuffer(b"abcde", np.uint8), size=length))
  return Example(symbols + b"=", bytes(sorted(symbols)))


def duplicate_string(rng: np.random.Generator, length: int) -> Example:
  """`length` bits -> them twice: `011=` -> `011011`."""
  symbols = bytes(rng.choice(np.frombuffer(b"01", np.uint8), size=length))
  return Example(symbols + b"=", symbols + symbols)


def binary_addition(rng: np.random.Generator, length: int) -> Example:
  """Two `length`-bit numbers, little-endian (lowest bit first) -> their sum, little-endian,
  `length + 1` bits: `110+100=` -> `0010` (3 + 1 = 4). The paper splits `length` between two
  numbers of random widths and ends the sum with a termination token; equal widths keep every
  answer one size, as the `addition` task does."""
  a, b = (rng.integers(0, 2, size=length) for _ in range(2))
  total = int("".join(map(str, a[::-1])), 2) + int("".join(map(str, b[::-1])), 2)
  bits = f"{total:b}".zfill(length + 1)[::-1]
  text = "".join(map(str, a)) + "+" + "".join(map(str, b)) + "="
  return Example(text.encode(), bits.encode())
