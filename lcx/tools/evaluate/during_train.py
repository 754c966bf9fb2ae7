"""Evaluation during training (`train.eval_every`): a fixed validation sample scored at a few
multiples of the training length (`eval.during_train`), so a run shows its extrapolation evolve.

The sample (`eval.during_train_tokens` tokens of stream documents, windows protocol, drawn with
`eval.sample_seed`) is drawn once at setup from the validation split; scoring touches no
training RNG or data-iterator state, so a run with it trains exactly as one without. One Runner
is kept and its parameters swapped at each call, so each length compiles once.
"""

from __future__ import annotations

import numpy as np

from lcx import data
from lcx.run.metrics import say
from lcx.tools.evaluate import samples, stats
from lcx.tools.evaluate.runner import Runner


def label(multiple: float) -> str:
  """How a multiple of the training length names its metrics: 1 -> '1x', 0.5 -> '0.5x'."""
  return f"{multiple:g}x"


class DuringTrain:
  """`evaluator(params) -> {"eval/loss@4x": nats/token, "eval/ppl@4x": perplexity, ...}`."""

  def __init__(self, prepared):
    cfg = prepared.config
    self.runner = Runner(prepared, params=None)
    lengths = {}
    for multiple in cfg.eval.during_train:
      length = max(1, int(round(multiple * cfg.model.max_len)))
      try:
        self.runner.check_length(length)
      except ValueError as error:
        say(f"train.eval_every: {label(multiple)} ({length} tokens) skipped: {error}")
        continue
      lengths[label(multiple)] = length
    self.windows = {}
    if not lengths:
      say("train.eval_every: no eval.during_train length can be scored; nothing to evaluate")
      return
    sequences = samples.select(
      data.validation_documents(cfg.data, prepared.tokenizer),
      "stream",
      max(lengths.values()),
      cfg.eval.during_train_tokens,
      cfg.eval.sample_seed,
      "evaluation",
    )
    self.windows = {
      name: samples.cut(sequences, length, "windows") for name, length in lengths.items()
    }
    say(
      "train.eval_every: scoring "
      + ", ".join(f"{name} ({length} tokens)" for name, length in lengths.items())
      + f" on {int(self.windows[next(iter(lengths))].scored_NxT.sum())} validation tokens "
      f"every {cfg.train.eval_every} steps"
    )

  def __call__(self, params) -> dict[str, float]:
    self.runner.params = params
    out = {}
    for name, w in self.windows.items():
      nll_NxT = self.runner.nll(w.inputs_NxT, w.targets_NxT, w.positions_NxT, w.segments_NxT)
      loss = float(nll_NxT[w.scored_NxT].astype(np.float64).mean())
      out[f"eval/loss@{name}"] = loss
      out[f"eval/ppl@{name}"] = stats.perplexity(loss)
    return out
