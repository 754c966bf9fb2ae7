"""An evaluator kind (a result JSON's "kind") is one record: which runs get it, which results
it writes (one per planned variant and protocol, or one per variant), the lengths and eval.*
fields its settings hash, and the function that computes a result's body. `evaluate` iterates
KINDS and nothing else, so a new evaluator is its module and one record here (and its report
kind, `lcx/tools/report/kinds.py`, of the same name)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import ml_collections

from lcx.config import checks as config_lib, variants
from lcx.tools.evaluate import lengths as lengths_lib, passkey, tasks as tasks_lib

# (result name, variant as written, overrides, the variant's config): `evaluate.plan`'s entries
Planned = tuple[str, str, dict, ml_collections.ConfigDict]

# eval.* fields no text or task result depends on (beta_fit too unless a variant fits)
_NOT_SETTINGS = (
  "variants",
  "named_variants",
  "during_train",
  "during_train_tokens",
  "longrope",
  "passkey",
)


@dataclasses.dataclass(frozen=True)
class Context:
  """What every body may read, made once per `evaluate`: the prepared run, its eval lengths,
  its training length, `drawn(eval config)` (the documents sample, drawn once) and the
  tokenizer's byte lengths."""

  prepared: object
  eval_lengths: list[int]
  train_len: int
  drawn: Callable[[ml_collections.ConfigDict], list]
  byte_lengths: object


def _no_check(cfg, tokenizer) -> None:
  del cfg, tokenizer


def _per_planned(todo: Sequence[Planned]) -> list[Planned]:
  return list(todo)


def _eval_lengths(cfg) -> list[int]:
  return config_lib.eval_lengths(cfg)


def _most_settings(ev: dict) -> dict:
  return {
    k: v for k, v in ev.items() if k not in _NOT_SETTINGS and (k != "beta_fit" or v["fitted"])
  }


@dataclasses.dataclass(frozen=True)
class Kind:
  """`runs(config)`: whether a run's evaluation writes this kind; `results(plan)`: its
  (name, variant, overrides, config) from `evaluate.plan`'s; `lengths(config)` and
  `settings(eval dict)`: what its settings hash holds of them; `scored`: the hash holds the
  tokens it scores too (`samples.fingerprint`), so edited validation files are new results;
  `body(context, runner)`: the result's own keys; `check(config, tokenizer)`: refuses before
  anything compiles what it cannot evaluate (a ValueError naming the field); `tracked`: its
  perplexity and loss go to the run's trackers; `no_report`: why no report kind of its name
  reads its results (empty: one does)."""

  name: str
  runs: Callable[[ml_collections.ConfigDict], bool]
  body: Callable[[Context, object], dict]
  results: Callable[[Sequence[Planned]], list[Planned]] = _per_planned
  lengths: Callable[[ml_collections.ConfigDict], list[int]] = _eval_lengths
  settings: Callable[[dict], dict] = _most_settings
  scored: bool = False
  check: Callable[[ml_collections.ConfigDict, object], None] = _no_check
  tracked: bool = False
  no_report: str = ""


def _is_task(cfg) -> bool:
  return cfg.data.name == "task"


def _lengths_body(ctx: Context, runner) -> dict:
  scored = ctx.drawn(runner.config.eval)
  return lengths_lib.sweep(runner, scored, ctx.eval_lengths, ctx.byte_lengths, ctx.train_len)


def plain_positions(changes: dict, variant_cfg) -> tuple[dict, ml_collections.ConfigDict]:
  """A variant's overrides and config without eval.random_positions: the passkey probe generates
  at plain positions, so the setting is not its own (nor may it skip its lengths)."""
  if not variant_cfg.eval.random_positions:
    return changes, variant_cfg
  plain = ml_collections.ConfigDict(variant_cfg.to_dict())
  plain.eval.random_positions = 0
  return {k: v for k, v in changes.items() if k != "eval.random_positions"}, plain


def _passkey_results(todo: Sequence[Planned]) -> list[Planned]:
  """Once per variant, whatever the protocols: `passkey@<variant's result name>`."""
  first = {}
  for _, spec, changes, variant_cfg in todo:
    first.setdefault(spec, plain_positions(changes, variant_cfg))
  return [
    (passkey.result_name(variants.file_name(spec)[: -len(".json")]), spec, changes, variant_cfg)
    for spec, (changes, variant_cfg) in first.items()
  ]


LENGTHS = Kind(
  name="lengths",
  runs=lambda cfg: not _is_task(cfg),
  body=_lengths_body,
  scored=True,
  tracked=True,
)

TASKS = Kind(
  name="tasks",
  runs=_is_task,
  body=lambda ctx, runner: tasks_lib.sweep(runner, ctx.prepared.tokenizer),
)

PASSKEY = Kind(
  name="passkey",
  runs=lambda cfg: not _is_task(cfg) and bool(cfg.eval.passkey.lengths),
  body=lambda ctx, runner: passkey.sweep(runner, ctx.prepared.tokenizer),
  results=_passkey_results,
  lengths=lambda cfg: sorted({int(n) for n in cfg.eval.passkey.lengths}),
  settings=lambda ev: {"passkey": ev["passkey"]},
  check=passkey.check_lengths,
)

# Evaluation order: every result of a kind before the next kind's.
KINDS: dict[str, Kind] = {k.name: k for k in (LENGTHS, TASKS, PASSKEY)}
