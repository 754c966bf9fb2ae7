"""`beta@fit`: DroPE's temperature (logits x 1 + C ln(T/L) past the training length L) with C
fitted, as the paper fits its temperature, on data the evaluation never scores.

Each value of `eval.beta_fit.grid` is scored on held-out data past L and the best one is kept
(a tie goes to the smaller C, the nearer to no temperature):
  task runs  exact match, mean over the size buckets past the training sizes, on examples drawn
             with data.seed = eval.beta_fit.seed (another stream than the evaluation's data.seed)
  text runs  mean loss over the evaluated lengths past L, on the documents of the `search`
             split of the validation books (`samples.split_ids`), never the evaluation's
The evaluation then scores the variant's own data with the chosen C, and its result records the
fit (`beta_fit`: C, the grid, every value's score, what was scored).
"""

from __future__ import annotations

import ml_collections
import numpy as np

from lcx import data
from lcx.run import prepare as prepare_lib
from lcx.run.metrics import say
from lcx.tools.evaluate import lengths as lengths_lib, samples, tasks as tasks_lib
from lcx.tools.report import tasks as report_tasks


def choose(grid, scores, higher_is_better: bool) -> float:
  """The grid value with the best score; ties to the smallest value."""
  sign = 1.0 if higher_is_better else -1.0
  best = max(sign * s for s in scores)
  return min(c for c, s in zip(grid, scores) if sign * s == best)


def with_c(cfg: ml_collections.ConfigDict, c: float) -> ml_collections.ConfigDict:
  """`cfg` with beta_c = c (a copy)."""
  out = ml_collections.ConfigDict(cfg.to_dict())
  out.model.attention.beta_c = float(c)
  return out


def _task_score(runner, tokenizer) -> float:
  """Mean exact match over the size buckets past the training sizes, as the report ranks it."""
  score = report_tasks.extrapolation_accuracy(tasks_lib.sweep(runner, tokenizer))
  if score is None:
    raise ValueError(
      f"eval.variants: beta@fit needs sizes past the training sizes (data.task_max_len="
      f"{runner.config.data.task_max_len}) to fit on; raise data.task_eval_factor"
    )
  return score


def fit(prepared, params, variant_cfg, eval_lengths, runner_cls) -> tuple[float, dict]:
  """(C, the record of the fit) for `variant_cfg` (`eval.beta_fit.fitted` set)."""
  ev, train_len = variant_cfg.eval, variant_cfg.model.max_len
  grid = [float(c) for c in ev.beta_fit.grid]
  if variant_cfg.data.name == "task":
    held_out = ml_collections.ConfigDict(variant_cfg.to_dict())
    held_out.data.seed = int(ev.beta_fit.seed)
    what = f"exact match past the training sizes, examples of data.seed={ev.beta_fit.seed}"

    def score(c):
      runner = runner_cls(prepare_lib.for_variant(prepared, with_c(held_out, c)), params)
      return _task_score(runner, prepared.tokenizer)

    higher = True
  else:
    past = [n for n in eval_lengths if n > train_len]
    if not past:
      raise ValueError("eval.variants: beta@fit needs eval lengths past L to fit on")
    sequences = samples.select(
      data.validation_documents(variant_cfg.data, prepared.tokenizer),
      ev.documents.split(",")[0],
      max(past),
      ev.num_tokens,
      ev.sample_seed,
      "search",
    )
    what = f"mean loss at {past} on the search split's documents"

    def score(c):
      runner = runner_cls(prepare_lib.for_variant(prepared, with_c(variant_cfg, c)), params)
      byte_lengths = prepared.tokenizer.byte_lengths()
      result = lengths_lib.sweep(runner, sequences, past, byte_lengths, train_len)
      losses = [entry["loss"] for entry in result["lengths"].values()]
      if not losses:
        raise ValueError(f"eval.variants: beta@fit: no length past L could be scored: {result}")
      return float(np.mean(losses))

    higher = False
  scores = []
  for c in grid:
    scores.append(score(c))
    say(f"beta@fit: C={c:g}: {scores[-1]:.4f} ({what})")
  c = choose(grid, scores, higher)
  say(f"beta@fit: C={c:g}")
  return c, {"c": c, "grid": grid, "scores": scores, "scored": what}
