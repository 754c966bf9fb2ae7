"""The task sweep: exact match of a synthetic task per size bucket (and per needle depth).

Sizes are drawn uniformly up to task_eval_factor x task_max_len (`lcx.data.tasks`); each bucket
is scored at its own width, so short sizes do not pay for the longest, and a bucket the scheme
cannot score (a learned table too short) is reported as skipped with the reason. Exact match is
scored by teacher forcing in one forward pass: the argmax answer equals the greedy decode
exactly when every argmax along the true answer is right. Intervals resample examples.
"""

from __future__ import annotations

import hashlib

import numpy as np

from lcx.data import tasks
from lcx.run import timing
from lcx.run.metrics import say
from lcx.tools.evaluate import stats


def hits(runner, examples: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, np.ndarray]:
  """(exact match, share of answer tokens right) of each (prompt_ids, answer_ids[, scored_N])
  example; with `scored_N` (`tasks.eval_examples(scored=True)`) only those answer tokens count.

  Rows are right-padded with segment 0 to the longest example; positions restart at 0 per row.
  """
  width = max(len(e[0]) + len(e[1]) for e in examples) - 1
  inputs_NxT = np.zeros((len(examples), width), np.int32)
  segments_NxT = np.zeros((len(examples), width), np.int32)
  for row, (prompt, answer, *_) in enumerate(examples):
    sequence = np.concatenate([prompt, answer])[:-1]
    inputs_NxT[row, : len(sequence)], segments_NxT[row, : len(sequence)] = sequence, 1
  pos_NxT = np.broadcast_to(np.arange(width, dtype=np.int32), inputs_NxT.shape)
  pred_NxT = runner.predict(inputs_NxT, pos_NxT, segments_NxT)
  right = [
    (pred_NxT[row, len(p) - 1 : len(p) - 1 + len(a)] == a)[scored[0] if scored else ...]
    for row, (p, a, *scored) in enumerate(examples)
  ]
  return np.array([r.all() for r in right]), np.array([r.mean() for r in right])


def digest(examples) -> str:
  """What tells one set of evaluation examples from another: a hash of their tokens and scored
  masks, in order. Two results pair example by example only where their digests agree."""
  h = hashlib.sha256()
  for example in examples:
    for part in example:
      h.update(np.asarray(part).tobytes())
      h.update(b"|")
  return h.hexdigest()[:16]


def _summary(exact_N, token_N, scored_N, weights_RxN, examples) -> dict:
  """Exact match and per-token accuracy (Ruoss et al.'s: the mean over examples of the share
  of answer tokens right) per example; `error_rate` pools the scored tokens of all examples
  (flip-flop's error rate: wrong read bits / read bits). `per_example`: each example's exact
  match in order ("0"/"1") and the examples' `digest`, for comparisons paired example by
  example (report)."""
  if not exact_N.size:
    return {
      "accuracy": None,
      "accuracy_ci": None,
      "token_accuracy": None,
      "error_rate": None,
      "error_rate_ci": None,
      "examples": 0,
    }
  ones = np.ones_like(exact_N, np.float64)
  ci = stats.ratio_ci(exact_N.astype(np.float64), ones, weights_RxN) if len(weights_RxN) else None
  wrong_N = (1 - token_N) * scored_N
  return {
    "accuracy": float(exact_N.mean()),
    "accuracy_ci": ci,
    "token_accuracy": float(token_N.mean()),
    "error_rate": float(wrong_N.sum() / scored_N.sum()),
    "error_rate_ci": stats.ratio_ci(wrong_N, scored_N, weights_RxN),
    "examples": int(exact_N.size),
    "per_example": {
      "exact": "".join("1" if x else "0" for x in exact_N.tolist()),
      "digest": digest(examples),
    },
  }


def sweep(runner, tokenizer) -> dict:
  """{"task", "train_sizes", "buckets", "depths"} for the run's `data.task`."""
  d = runner.config.data
  sizes, counts = np.unique(tasks.eval_lengths(d, d.task_eval_examples, d.seed), return_counts=True)
  buckets = tasks.eval_buckets(d)
  depths = tuple(d.task_eval_depths) or (None,)
  examples, bucket_N, depth_N = [], [], []
  for depth in depths:
    for size, count in zip(sizes.tolist(), counts.tolist()):
      examples += tasks.eval_examples(d.task, size, count, d.seed, tokenizer, depth, scored=True)
      bucket_N += [next(i for i, (lo, hi) in enumerate(buckets) if lo <= size <= hi)] * count
      depth_N += [depth] * count
  bucket_N, depth_N = np.array(bucket_N), np.array(depth_N)
  exact_N, token_N, skipped = np.zeros(len(examples), bool), np.zeros(len(examples)), {}
  for i, (lo, hi) in enumerate(buckets):
    rows = np.flatnonzero(bucket_N == i)
    if not rows.size:
      continue
    chosen = [examples[r] for r in rows]
    try:
      runner.check_length(max(len(e[0]) + len(e[1]) for e in chosen) - 1)
    except ValueError as error:
      skipped[i] = str(error)
      say(f"task {d.task}: sizes {lo}-{hi} skipped: {error}")
      continue
    with timing.span() as took:
      exact_N[rows], token_N[rows] = hits(runner, chosen)
    say(f"task {d.task}: sizes {lo}-{hi}: {len(chosen)} examples ({took})")
  say(f"task {d.task}: {len(examples)} examples, {len(skipped)} size buckets skipped")
  scored_N = np.array([mask.sum() for _, _, mask in examples], np.float64)
  weights = stats.resample_weights(len(examples), runner.config.eval.bootstrap, d.seed)

  def by_bucket(rows_N):
    out = {}
    for i, (lo, hi) in enumerate(buckets):
      inside = rows_N & (bucket_N == i)
      if i in skipped:
        out[f"{lo}-{hi}"] = {
          "accuracy": None,
          "accuracy_ci": None,
          "token_accuracy": None,
          "error_rate": None,
          "error_rate_ci": None,
          "examples": int(inside.sum()),
          "skipped": skipped[i],
        }
      else:
        out[f"{lo}-{hi}"] = _summary(
          exact_N[inside],
          token_N[inside],
          scored_N[inside],
          weights[:, inside] if len(weights) else weights,
          [examples[i] for i in np.flatnonzero(inside)],
        )
    return out

  return {
    "task": d.task,
    "train_sizes": [d.task_min_len, d.task_max_len],
    "buckets": by_bucket(np.ones(len(examples), bool)),
    "depths": {f"{x:g}": by_bucket(depth_N == x) for x in d.task_eval_depths},
  }
