"""The passkey probe for text models: retrieve a number hidden in filler, through generation.

The prompt is the one the PI, YaRN and LongRoPE papers report (Mohtashami & Jaggi 2023): a
fixed filler, "The grass is green. The sky is blue. The sun is yellow. Here we go. There and
back again." repeated, with "The pass key is 12345. Remember it. 12345 is the pass key."
inserted at a depth (0: right after BOS, 1: right before the question), ending with "What is
the pass key? The pass key is". A fixed filler rather than validation documents: it holds no
digits to mistake for the key, and it is the same text for every corpus and tokenizer, so
results compare across runs and with the papers.

A length is the prompt's exact token count, BOS included: the filler is whole sentences cut to
the token budget at its start (so it may open mid-sentence, as training windows do, and always
ends on a full stop), and the needle goes to the sentence boundary nearest to `depth` of it
(the filler's start and end count as boundaries). The keys are `digits`-digit numbers drawn
with `seed`, the same keys at every length and depth, so cells compare like for like. The model
continues greedily for digits + 2 tokens (a leading space, the digits, and one more to see the
number end); an example is right when the first number in the continuation is exactly the key.
Prompts of one length are generated in batches of eval.batch_tokens // (length + digits + 2)
rows, one compiled program per length.
"""

from __future__ import annotations

import re

import numpy as np

from lcx.run import timing
from lcx.run.metrics import say
from lcx.tools import generate

SENTENCES = (
  "The grass is green. ",
  "The sky is blue. ",
  "The sun is yellow. ",
  "Here we go. ",
  "There and back again. ",
)
NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = "What is the pass key? The pass key is"


def result_name(variant_name: str) -> str:
  """A variant's passkey result beside its own: `passkey@none`, `passkey@yarn@4`."""
  return f"passkey@{variant_name}"


def keys(examples: int, digits: int, seed: int) -> list[str]:
  """`examples` numbers of `digits` digits, without a leading zero (0-9 for one digit)."""
  rng = np.random.default_rng(seed)
  low = 10 ** (digits - 1) if digits > 1 else 0
  return [str(k) for k in rng.integers(low, 10**digits, size=examples)]


def shortest(tokenizer, digits: int) -> int:
  """The shortest length that holds BOS, the needle and the question (no filler)."""
  return (
    1 + len(tokenizer.encode(NEEDLE.format(key="9" * digits))) + len(tokenizer.encode(QUESTION))
  )


def check_lengths(cfg, tokenizer) -> None:
  """ValueError naming eval.passkey.lengths if one cannot hold the needle and the question."""
  p = cfg.eval.passkey
  low = shortest(tokenizer, p.digits)
  short = [n for n in p.lengths if n < low]
  if short:
    raise ValueError(
      f"eval.passkey.lengths={tuple(p.lengths)}: {short[0]} tokens cannot hold "
      f"BOS, the needle and the question ({low} tokens with eval.passkey.digits="
      f"{p.digits}); use lengths >= {low}"
    )


def prompt(tokenizer, length: int, depth: float, key: str) -> np.ndarray:
  """The prompt of exactly `length` token ids: BOS, filler with the needle at `depth`, question."""
  needle, question = tokenizer.encode(NEEDLE.format(key=key)), tokenizer.encode(QUESTION)
  budget = length - 1 - len(needle) - len(question)
  if budget < 0:
    raise ValueError(
      f"eval.passkey.lengths: {length} tokens cannot hold the needle and the question"
    )
  pieces = [tokenizer.encode(s) for s in SENTENCES]
  cycle = np.concatenate(pieces)
  reps = budget // len(cycle) + 2
  cut = reps * len(cycle) - budget  # whole sentences, less a cut at the start
  filler = np.tile(cycle, reps)[cut:]
  starts = np.cumsum([0] + [len(p) for p in pieces])[:-1]
  boundaries = (starts[None] + len(cycle) * np.arange(reps)[:, None]).reshape(-1) - cut
  boundaries = np.concatenate([[0], boundaries[(boundaries > 0) & (boundaries < budget)], [budget]])
  at = int(boundaries[np.argmin(np.abs(boundaries - depth * budget))])
  ids = np.concatenate([[tokenizer.bos_id], filler[:at], needle, filler[at:], question])
  return ids.astype(np.int32)


def answer(tokenizer, continuation_ids) -> str | None:
  """The first number in the decoded continuation (after optional spaces), or None."""
  match = re.match(r"\s*(\d+)", tokenizer.decode(continuation_ids))
  return match.group(1) if match else None


def sweep(runner, tokenizer) -> dict:
  """{"lengths", "depths", "cells", "skipped", "protocol"} for the run's eval.passkey."""
  p = runner.config.eval.passkey
  lengths, depths = sorted({int(n) for n in p.lengths}), [float(d) for d in p.depths]
  secret = keys(p.examples, p.digits, p.seed)
  new_tokens = p.digits + 2
  cells, skipped = [], {}
  for length in lengths:
    size = length + new_tokens
    try:
      runner.check_length(size)
    except ValueError as error:
      skipped[str(length)] = str(error)
      say(f"passkey length {length}: skipped: {error}")
      continue
    prompts = [
      (depth, key, prompt(tokenizer, length, depth, key)) for depth in depths for key in secret
    ]
    rows = max(1, runner.config.eval.batch_tokens // size)
    right = []
    with timing.span() as took:
      for start in range(0, len(prompts), rows):
        batch = [ids for _, _, ids in prompts[start : start + rows]]
        batch += [batch[0]] * (rows - len(batch))  # fixed shapes: one program per length
        out_BxN = generate.generate(
          runner.prepared.graphdef,
          runner.params,
          np.stack(batch),
          new_tokens,
          kernel=runner.kernel(size),
        )
        right += [
          answer(tokenizer, ids) == key
          for ids, (_, key, _) in zip(out_BxN, prompts[start : start + rows])
        ]
    for depth in depths:
      hits = [ok for ok, (d, _, _) in zip(right, prompts) if d == depth]
      cells.append(
        {"length": length, "depth": depth, "accuracy": float(np.mean(hits)), "examples": len(hits)}
      )
    say(
      f"passkey length {length}: accuracy {np.mean(right):.3f} over {len(right)} examples ({took})"
    )
  return {
    "protocol": {
      "probe": "passkey",
      "examples": p.examples,
      "digits": p.digits,
      "seed": p.seed,
      "new_tokens": new_tokens,
    },
    "lengths": lengths,
    "depths": depths,
    "cells": cells,
    "skipped": skipped,
  }
