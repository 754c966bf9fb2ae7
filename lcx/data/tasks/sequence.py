"""Tasks whose answer is a whole random sequence with determined bytes in it
(`Example.scored`): flip-flop language modelling and multi-query associative recall."""

import string

import numpy as np

from lcx import errors
from lcx.data.tasks.example import LETTERS, Example
from lcx.data.tasks.kazemnejad import LEGO_NAMES

# Flip-flop language modelling (Liu et al. 2023, "Exposing Attention Glitches with Flip-Flop
# Language Modeling"): `length` instructions w (write), r (read), i (ignore), each followed by a
# bit; the first is w and the last r, the rest i with probability p_i and w or r with (1 - p_i)/2
# each. A read's bit is the last written bit: the only determined bits, so the only ones scored
# (the paper's error rate) and trained on. The paper's sequences are 512 tokens (length 256);
# it trains on FFL(p_i=0.8) and tests on it, on a sparse FFL(0.98) and a dense FFL(0.1).
FLIP_FLOP = {"flip_flop": 0.8, "flip_flop_sparse": 0.98, "flip_flop_dense": 0.1}


def flip_flop_mix(rng: np.random.Generator, length: int, p_ignore: float) -> Example:
  """`w1i0r1w0r0` -> the whole string as the answer (empty prompt), scored on the bits after r.

  Every token but the read bits is random, so the model writes the whole sequence and only the
  read bits can be right or wrong.
  """
  if length < 2:
    raise errors.not_allowed("length", length, ">= 2 for flip-flop (a first write, a last read)")
  p_write = (1 - p_ignore) / 2
  middle = rng.choice(3, size=length - 2, p=[p_write, p_write, p_ignore])
  ops = np.concatenate([[0], middle, [1]])  # 0 w, 1 r, 2 i
  bits = rng.integers(0, 2, size=length)
  text, scored, memory = bytearray(), [], 0
  for op, bit in zip(ops.tolist(), bits.tolist()):
    if op == 0:
      memory = bit
    elif op == 1:
      bit = memory
      scored.append(len(text) + 1)
    text += b"wri"[op : op + 1] + str(bit).encode()
  return Example(b"", bytes(text), tuple(scored))


MQAR_VALUES = string.ascii_uppercase.encode()


def mqar(rng: np.random.Generator, length: int) -> Example:
  """Multi-query associative recall (Arora et al. 2023, Zoology): `length` pairs of a key (two
  lowercase letters, distinct) and a value (an uppercase letter), then every key asked once in a
  random order, each followed by its value: `abXcdY` -> `cdYabX`, scored on the values.

  The answer is the query block; its keys are random (unscored), its values determined.
  """
  if not 1 <= length <= LEGO_NAMES:
    raise errors.not_allowed("length", length, f"1..{LEGO_NAMES} for mqar (two-letter keys)")
  keys = [
    bytes([LETTERS[i // 26], LETTERS[i % 26]])
    for i in rng.choice(LEGO_NAMES, size=length, replace=False)
  ]
  values = [MQAR_VALUES[i : i + 1] for i in rng.integers(0, len(MQAR_VALUES), size=length)]
  order = rng.permutation(length)
  answer = b"".join(keys[i] + values[i] for i in order)
  return Example(
    b"".join(k + v for k, v in zip(keys, values)), answer, tuple(range(2, 3 * length, 3))
  )


# Tasks whose answer is a whole random sequence with determined bytes in it (`Example.scored`):
# no function of the prompt gives their answer.
SEQUENCE_TASKS = (*FLIP_FLOP, "mqar")
