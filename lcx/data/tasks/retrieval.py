"""Retrieval from filler sentences: the passkey (at a chosen depth too) and RULER's
needle-in-a-haystack variants, alone or mixed (`niah`, whose size varies: `niah_max_bytes`)."""

import numpy as np

from lcx.data.tasks.example import Example, letters, number

FILLER = (
  b"The grass is green. ",
  b"The sky is blue. ",
  b"The sun is yellow. ",
  b"Here we go. ",
  b"There and back again. ",
)
PASSKEY_QUESTION = b"What is the pass key? The pass key is "


def passkey_at_depth(rng: np.random.Generator, length: int, depth: float) -> Example:
  """A 5-digit key stated after `round(depth * length)` of `length` filler sentences."""
  key = number(rng, 5).encode()
  needle = b"The pass key is " + key + b". Remember it. " + key + b" is the pass key. "
  filler = [FILLER[i % len(FILLER)] for i in range(length)]
  at = round(depth * length)
  prompt = b"".join(filler[:at]) + needle + b"".join(filler[at:]) + PASSKEY_QUESTION
  return Example(prompt, key)


def passkey(rng: np.random.Generator, length: int) -> Example:
  """`passkey_at_depth` at a uniformly random depth."""
  return passkey_at_depth(rng, length, float(rng.uniform()))


# Needle-in-a-haystack variants after RULER (Hsieh et al. 2024), as DroPE reports them
# (Gelberg et al. 2025): NIAH_NEEDLES needles `key is value. ` (3-letter keys, 3-digit
# values) at uniform sentence boundaries of `length` filler sentences, then a question.
NIAH_NEEDLES = 2


def _niah_prompt(rng: np.random.Generator, length: int, needles: list[bytes], question: bytes):
  """`length` filler sentences with `needles` at sorted uniform boundaries, then `question`."""
  at = np.sort(rng.integers(0, length + 1, size=len(needles)))
  parts = []
  for i in range(length + 1):
    parts += [n for n, a in zip(needles, at) if a == i]
    if i < length:
      parts.append(FILLER[i % len(FILLER)])
  return b"".join(parts) + question


def _distinct_keys(rng: np.random.Generator, n: int) -> list[bytes]:
  keys: list[bytes] = []
  while len(keys) < n:
    key = letters(rng, 3)
    keys += [] if key in keys else [key]
  return keys


def _distinct_values(rng: np.random.Generator, n: int) -> list[bytes]:
  return [str(v).encode() for v in rng.choice(np.arange(100, 1000), size=n, replace=False)]


def niah_multikey(rng: np.random.Generator, length: int) -> Example:
  """Needles of distinct keys; one key is asked: `... What is abc? ` -> `123`."""
  keys, values = _distinct_keys(rng, NIAH_NEEDLES), _distinct_values(rng, NIAH_NEEDLES)
  needles = [k + b" is " + v + b". " for k, v in zip(keys, values)]
  query = int(rng.integers(NIAH_NEEDLES))
  return Example(
    _niah_prompt(rng, length, needles, b"What is " + keys[query] + b"? "), values[query]
  )


def niah_multiquery(rng: np.random.Generator, length: int) -> Example:
  """Needles of distinct keys; all are asked, in a random order: `What are abc and xyz? `
  -> `123,456` (values in the asked order)."""
  keys, values = _distinct_keys(rng, NIAH_NEEDLES), _distinct_values(rng, NIAH_NEEDLES)
  needles = [k + b" is " + v + b". " for k, v in zip(keys, values)]
  order = rng.permutation(NIAH_NEEDLES)
  question = b"What are " + b" and ".join(keys[i] for i in order) + b"? "
  return Example(_niah_prompt(rng, length, needles, question), b",".join(values[i] for i in order))


def niah_multivalue(rng: np.random.Generator, length: int) -> Example:
  """Needles of one key with distinct values: `What are all values of abc? ` -> `123,456`
  (in the order they appear)."""
  (key,), values = _distinct_keys(rng, 1), _distinct_values(rng, NIAH_NEEDLES)
  needles = [key + b" is " + v + b". " for v in values]
  question = b"What are all values of " + key + b"? "
  return Example(_niah_prompt(rng, length, needles, question), b",".join(values))


NIAH = {"multikey": niah_multikey, "multiquery": niah_multiquery, "multivalue": niah_multivalue}


def niah(rng: np.random.Generator, length: int) -> Example:
  """One of the three NIAH variants, drawn uniformly: a model trained on all three."""
  return tuple(NIAH.values())[int(rng.integers(len(NIAH)))](rng, length)


def niah_max_bytes(length: int) -> int:
  """The longest variant's prompt + answer (each variant has one size at a length)."""
  rng = np.random.default_rng(0)
  return max(len(e.prompt) + len(e.answer) for e in (f(rng, length) for f in NIAH.values()))
