"""beta@fit: DroPE's temperature with C chosen on held-out data past L (never the evaluated
data), recorded in the result beside the evaluation at that C."""

import json
import shutil

import numpy as np
import pytest

from lcx.config import variants
from lcx.data import tasks
from lcx.tools import evaluate
from lcx.tools.evaluate import beta_fit, samples
from tests.helpers import tiny_config


def test_choose_takes_the_best_score_and_the_smaller_c_on_a_tie():
  grid = [0.0, 0.1, 0.2, 0.3]
  assert beta_fit.choose(grid, [0.2, 0.5, 0.4, 0.5], higher_is_better=True) == 0.1
  assert beta_fit.choose(grid, [2.0, 1.5, 1.5, 1.7], higher_is_better=False) == 0.1
  assert beta_fit.choose(grid, [1.0, 1.0, 1.0, 1.0], higher_is_better=False) == 0.0


def test_the_variant_asks_for_a_fit_and_a_number_stays_a_number():
  assert variants.overrides("beta@fit", {}) == {"eval.beta_fit.fitted": True}
  assert variants.overrides("beta@0.5", {}) == {"model.attention.beta_c": 0.5}


@pytest.mark.slow  # evaluates three variants and two fits
def test_a_text_run_is_fitted_on_the_search_split_past_l_and_evaluated_at_the_chosen_c(
  tiny_run, monkeypatch, tmp_path
):
  run = str(tmp_path / "run")
  shutil.copytree(tiny_run, run)
  splits = []
  select = samples.select

  def recording(*args, **kwargs):
    splits.append(args[5] if len(args) > 5 else kwargs.get("split"))
    return select(*args, **kwargs)

  monkeypatch.setattr(samples, "select", recording)
  config = tiny_config("rope")
  config.model.vocab_size = 259
  config.eval.update(multipliers=(1, 2), variants="beta@fit,beta@0,beta@3", bootstrap=0)
  config.eval.beta_fit.grid = (0.0, 3.0)
  results = evaluate.evaluate(config, run)
  fitted = results["beta@fit"]
  fit = fitted["beta_fit"]
  fixed = results[f"beta@{fit['c']:g}"]  # the evaluation at the chosen C
  # the sample every result scores (drawn first: it is in each result's reuse key), then the
  # fit's, once, on the search split
  assert splits == ["evaluation", "search"]
  assert fit["grid"] == [0.0, 3.0] and len(fit["scores"]) == 2 and "search split" in fit["scored"]
  assert fit["c"] == beta_fit.choose(fit["grid"], fit["scores"], higher_is_better=False)
  assert fitted["config"]["model"]["attention"]["beta_c"] == fit["c"]
  for n in ("32", "64"):
    assert fitted["lengths"][n]["loss"] == pytest.approx(fixed["lengths"][n]["loss"])
  assert results["beta@3"]["lengths"]["64"]["loss"] != pytest.approx(
    results["beta@0"]["lengths"]["64"]["loss"]
  )  # the temperature acts past L
  saved = json.load(open(f"{run}/eval/beta@fit.json"))
  assert saved["beta_fit"] == json.loads(json.dumps(fit))


@pytest.mark.slow
def test_a_task_run_is_fitted_on_examples_of_another_seed_past_the_training_sizes(
  copy_run, monkeypatch
):
  config, workdir = copy_run
  config = config.copy_and_resolve_references()
  config.eval.update(variants="beta@fit", bootstrap=0)
  config.eval.beta_fit.update(grid=(0.0, 0.5), seed=77)
  seeds = []
  examples = tasks.eval_examples

  def recording(task, size, count, seed, *args, **kwargs):
    seeds.append(seed)
    return examples(task, size, count, seed, *args, **kwargs)

  monkeypatch.setattr(tasks, "eval_examples", recording)
  result = evaluate.evaluate(config, workdir, force=True)["beta@fit"]
  fit = result["beta_fit"]
  assert set(seeds[: len(seeds) * 2 // 3]) == {77} and set(seeds[len(seeds) * 2 // 3 :]) == {
    config.data.seed
  }  # two fits on seed 77, then the evaluation on the run's own examples
  assert "exact match past the training sizes" in fit["scored"]
  assert all(0.0 <= s <= 1.0 for s in fit["scores"])
  assert fit["c"] == beta_fit.choose([0.0, 0.5], fit["scores"], higher_is_better=True)
  assert result["config"]["model"]["attention"]["beta_c"] == fit["c"]
  assert np.isfinite(result["buckets"]["1-6"]["accuracy"])
