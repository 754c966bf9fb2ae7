"""Synthetic tasks: deterministic (prompt, answer) generators for length generalisation.

Each task maps `(rng, length)` to an `Example` of bytes. `length` is the task's size
(how many symbols to copy, digits to add, key-value pairs, filler sentences, terms,
variables, clauses, functions...), and an example's token count depends on `length`
only, so a training length bound is a token bound. Answers are random given the length:
only the prompt determines them. Flip-flop (`FLIP_FLOP`) is the exception: its answer is the
whole sequence, and only the bytes it marks `scored` (the read bits) are determined.

SCAN and PCFG cannot keep that property (what a command or a function composition
produces varies with the draw), so their answers end with `.` (a model must say where
an answer stops) and `MAX_BYTES` declares the most bytes their examples can take at a
length; `document_tokens` uses it, so the training bound stays a token bound. `niah`
(a uniform mix of the three NIAH variants, each of one size) declares its bound too; its
question says which variant, hence how long the answer is.

Training draws sizes uniformly from [task_min_len, task_max_len]; evaluation draws
them uniformly up to task_eval_factor * task_max_len and reports exact match per size
bucket (`eval_buckets`: the training range, then doublings). A training document is
`[BOS] + prompt + answer + [EOS]`, with loss on the answer tokens only.

The package, by task family: `algorithmic`, `retrieval` (passkey, NIAH), `kazemnejad`,
`sequence` (flip-flop, MQAR) and `chomsky`, each task an `Example` generator (`example`); here
the registry (`TASKS`, `MAX_BYTES`, `AT_DEPTH`) and what reads it: training documents,
evaluation examples and exact match. Every task's names are re-exported here.
"""

import functools
import sys
from collections.abc import Callable

import numpy as np

from lcx import errors
from lcx.data.tasks.algorithmic import (
  INDUCTION_CUE,
  addition,
  associative_recall,
  copy,
  induction,
  parity,
  reverse,
  sort,
)
from lcx.data.tasks.chomsky import (
  CHOMSKY_MODULUS,
  STACK_ACTIONS,
  binary_addition,
  bucket_sort,
  cycle_navigation,
  duplicate_string,
  even_pairs,
  modular_arithmetic,
  stack_manipulation,
)
from lcx.data.tasks.example import LETTERS, Example
from lcx.data.tasks.kazemnejad import (
  LEGO_NAMES,
  PCFG_BINARY,
  PCFG_LEAF,
  PCFG_UNARY,
  SCAN_ACTIONS,
  SCAN_CLAUSES,
  SCAN_LINKS,
  SYMBOLS,
  lego,
  pcfg,
  pcfg_max_bytes,
  polynomial,
  scan,
  scan_max_bytes,
  summation,
)
from lcx.data.tasks.retrieval import (
  FILLER,
  NIAH,
  NIAH_NEEDLES,
  PASSKEY_QUESTION,
  niah,
  niah_max_bytes,
  niah_multikey,
  niah_multiquery,
  niah_multivalue,
  passkey,
  passkey_at_depth,
)
from lcx.data.tasks.sequence import FLIP_FLOP, MQAR_VALUES, SEQUENCE_TASKS, flip_flop_mix, mqar

# Tasks whose evaluation can place the needle at chosen depths (data.task_eval_depths).
AT_DEPTH: dict[str, Callable[[np.random.Generator, int, float], Example]] = {
  "passkey": passkey_at_depth,
}


TASKS: dict[str, Callable[[np.random.Generator, int], Example]] = {
  "copy": copy,
  "reverse": reverse,
  "sort": sort,
  "addition": addition,
  "parity": parity,
  "associative_recall": associative_recall,
  "passkey": passkey,
  "induction": induction,
  "polynomial": polynomial,
  "summation": summation,
  "lego": lego,
  "scan": scan,
  "pcfg": pcfg,
  "niah_multikey": niah_multikey,
  "niah_multiquery": niah_multiquery,
  "niah_multivalue": niah_multivalue,
  "niah": niah,
  **{
    name: functools.partial(flip_flop_mix, p_ignore=p_ignore)
    for name, p_ignore in FLIP_FLOP.items()
  },
  "mqar": mqar,
  "even_pairs": even_pairs,
  "modular_arithmetic": modular_arithmetic,
  "cycle_navigation": cycle_navigation,
  "stack_manipulation": stack_manipulation,
  "bucket_sort": bucket_sort,
  "duplicate_string": duplicate_string,
  "binary_addition": binary_addition,
}

# Tasks whose example size varies at a given length: the most bytes prompt + answer
# can take (some draw reaches it). Every other task's examples all have one size.
MAX_BYTES: dict[str, Callable[[int], int]] = {
  "scan": scan_max_bytes,
  "pcfg": pcfg_max_bytes,
  "niah": niah_max_bytes,
  "stack_manipulation": lambda length: 2 * length + 2,  # the stack at most `length` bits
}


def _task(name: str) -> Callable[[np.random.Generator, int], Example]:
  if name not in TASKS:
    raise errors.not_allowed("data.task", name, TASKS)
  return TASKS[name]


def _at_depth(name: str, depth: float) -> Callable[[np.random.Generator, int], Example]:
  if name not in AT_DEPTH:
    raise ValueError(
      f"data.task={name!r} has no needle depth; tasks with one: {', '.join(AT_DEPTH)}."
    )
  return functools.partial(AT_DEPTH[name], depth=depth)


def _train_rng(seed: int, index: int) -> np.random.Generator:
  return np.random.default_rng([seed, 0, index])


def _eval_rng(seed: int, length: int, index: int) -> np.random.Generator:
  """Tagged apart from `_train_rng`, so evaluation never replays training examples."""
  return np.random.default_rng([seed, 1, length, index])


def train_length(data_cfg, rng: np.random.Generator) -> int:
  return int(rng.integers(data_cfg.task_min_len, data_cfg.task_max_len + 1))


def eval_lengths(data_cfg, num: int, seed: int = 0) -> np.ndarray:
  """`num` sizes uniform in [task_min_len, task_eval_factor * task_max_len]."""
  high = data_cfg.task_eval_factor * data_cfg.task_max_len
  return np.random.default_rng([seed, 2]).integers(data_cfg.task_min_len, high + 1, size=num)


def eval_buckets(data_cfg) -> list[tuple[int, int]]:
  """Inclusive size ranges: [task_min_len, task_max_len] (seen in training), then
  doublings (max, 2 max], (2 max, 4 max], ... up to task_eval_factor * task_max_len."""
  high = data_cfg.task_eval_factor * data_cfg.task_max_len
  edges = [data_cfg.task_min_len - 1, data_cfg.task_max_len]
  while edges[-1] < high:
    edges.append(min(2 * edges[-1], high))
  return [(low + 1, top) for low, top in zip(edges[:-1], edges[1:])]


def scored_mask(example: Example, answer_ids: np.ndarray) -> np.ndarray:
  """Which answer ids are scored: all, or the `scored` bytes (tasks are byte-level)."""
  if example.scored is None:
    return np.ones(len(answer_ids), bool)
  mask_N = np.zeros(len(answer_ids), bool)
  mask_N[list(example.scored)] = True
  return mask_N


def training_document(example: Example, tokenizer) -> dict:
  """`[BOS] + prompt + answer + [EOS]` ids, loss mask 1 exactly on the (scored) answer ids."""
  prompt_ids = tokenizer.encode(example.prompt)
  answer_ids = tokenizer.encode(example.answer)
  ids_N = np.concatenate([[tokenizer.bos_id], prompt_ids, answer_ids, [tokenizer.eos_id]]).astype(
    np.int32
  )
  loss_mask_N = np.zeros(ids_N.shape, np.float32)
  loss_mask_N[1 + len(prompt_ids) : 1 + len(prompt_ids) + len(answer_ids)] = scored_mask(
    example, answer_ids
  )
  return {"ids": ids_N, "loss_mask": loss_mask_N}


def document_tokens(task: str, length: int, tokenizer=None) -> int:
  """Token count of the longest training document of this size: every draw's for a
  task of one size, BOS + `MAX_BYTES` + EOS for one that varies (tasks are byte-level:
  data.tokenizer must be 'byte')."""
  if task in MAX_BYTES:
    return MAX_BYTES[task](length) + 2
  if tokenizer is None:
    from lcx.data import tokenizers  # Tasks are byte-level.

    tokenizer = tokenizers.ByteTokenizer()
  example = _task(task)(np.random.default_rng(0), length)
  return len(training_document(example, tokenizer)["ids"])


def train_examples(data_cfg, tokenizer, process_index: int, process_count: int):
  """An endless grain MapDataset of training documents; this process takes every
  `process_count`-th example index, so processes never share an example."""
  import grain  # here, not at the top: checking a config (data.validate) needs none of it

  generate = _task(data_cfg.task)
  longest = document_tokens(data_cfg.task, data_cfg.task_max_len, tokenizer)
  if longest - 1 > data_cfg.seq_len:
    raise ValueError(
      f"data.task={data_cfg.task!r} at data.task_max_len={data_cfg.task_max_len}"
      f" makes documents of up to {longest} tokens, more than data.seq_len="
      f"{data_cfg.seq_len} + 1; raise data.seq_len or lower data.task_max_len."
    )

  def document(index: int) -> dict:
    rng = _train_rng(data_cfg.seed, index)
    return training_document(generate(rng, train_length(data_cfg, rng)), tokenizer)

  indices = grain.MapDataset.range(process_index, sys.maxsize, process_count)
  return indices.map(document)


def eval_examples(
  task: str,
  length: int,
  num: int,
  seed: int = 0,
  tokenizer=None,
  depth: float | None = None,
  scored: bool = False,
) -> list[tuple[np.ndarray, ...]]:
  """`num` (prompt_ids, answer_ids) pairs of size `length`; prompts start with BOS.

  `depth` places the needle of an `AT_DEPTH` task; the same draws are used at every
  depth, so depths compare like for like. Decode greedily from the prompt and score
  with `exact_match`. `scored` adds each answer's `scored_mask` as a third item.
  """
  if tokenizer is None:
    from lcx.data import tokenizers  # Tasks are byte-level by default.

    tokenizer = tokenizers.ByteTokenizer()
  generate = _task(task) if depth is None else _at_depth(task, depth)
  pairs = []
  for index in range(num):
    example = generate(_eval_rng(seed, length, index), length)
    prompt_ids = np.concatenate([[tokenizer.bos_id], tokenizer.encode(example.prompt)])
    answer_ids = tokenizer.encode(example.answer)
    mask = (scored_mask(example, answer_ids),) if scored else ()
    pairs.append((prompt_ids.astype(np.int32), answer_ids, *mask))
  return pairs


def exact_match(pred_ids, answer_ids) -> bool:
  """Whether the first len(answer_ids) predicted ids are exactly the answer.

  Ids after the answer are ignored, so decoding may run a fixed budget past it.
  """
  pred_N = np.asarray(pred_ids).reshape(-1)
  answer_N = np.asarray(answer_ids).reshape(-1)
  return len(pred_N) >= len(answer_N) and bool(np.array_equal(pred_N[: len(answer_N)], answer_N))


__all__ = [
  "AT_DEPTH",
  "CHOMSKY_MODULUS",
  "Example",
  "FILLER",
  "FLIP_FLOP",
  "INDUCTION_CUE",
  "LEGO_NAMES",
  "LETTERS",
  "MAX_BYTES",
  "MQAR_VALUES",
  "NIAH",
  "NIAH_NEEDLES",
  "PASSKEY_QUESTION",
  "PCFG_BINARY",
  "PCFG_LEAF",
  "PCFG_UNARY",
  "SCAN_ACTIONS",
  "SCAN_CLAUSES",
  "SCAN_LINKS",
  "SEQUENCE_TASKS",
  "STACK_ACTIONS",
  "SYMBOLS",
  "TASKS",
  "addition",
  "associative_recall",
  "binary_addition",
  "bucket_sort",
  "copy",
  "cycle_navigation",
  "document_tokens",
  "duplicate_string",
  "eval_buckets",
  "eval_examples",
  "eval_lengths",
  "even_pairs",
  "exact_match",
  "flip_flop_mix",
  "induction",
  "lego",
  "modular_arithmetic",
  "mqar",
  "niah",
  "niah_max_bytes",
  "niah_multikey",
  "niah_multiquery",
  "niah_multivalue",
  "parity",
  "passkey",
  "passkey_at_depth",
  "pcfg",
  "pcfg_max_bytes",
  "polynomial",
  "reverse",
  "scan",
  "scan_max_bytes",
  "scored_mask",
  "sort",
  "stack_manipulation",
  "summation",
  "train_examples",
  "train_length",
  "training_document",
]
