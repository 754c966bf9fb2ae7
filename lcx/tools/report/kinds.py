"""A result kind (the JSON's "kind") is one record: the keys and checks its results need, its
report sections, its CSV rows and its plots. Loading, report.md, results.csv and the plots read
only these records, each given the results of its kind, so a new kind is its module (tables,
rows, plots) and one record in KINDS, nothing else."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from lcx.tools.report import lengths, passkey, plots, tables, tasks


@dataclasses.dataclass(frozen=True)
class Section:
  """A report.md section: `build(results of the kind, baseline, tolerance)` is its markdown,
  empty where the results have nothing for it; `plot`: the key of the plot linked below it."""

  heading: str
  build: Callable[[Sequence[dict], str, float | None], str]
  plot: str | None = None


@dataclasses.dataclass(frozen=True)
class Plot:
  """A PNG: `draw(results of the kind, path)` writes it and returns the path, None without data."""

  key: str
  file: str
  draw: Callable[[Sequence[dict], str], str | None]


def _no_check(result: dict, where: str) -> None:
  del result, where


def _no_pairs(results: Sequence[dict], baseline: str) -> list[dict]:
  del results, baseline
  return []


def _no_baselines(results: Sequence[dict]) -> list[str]:
  del results
  return []


@dataclasses.dataclass(frozen=True)
class Kind:
  """`keys`: what a result needs beyond load.COMMON_KEYS; `check(result, where)` raises a
  ValueError naming `where` for what the keys cannot say; `rows(result)`: its long-form CSV
  rows (tables.row); `pair_rows(results, baseline)`: rows comparing results, after every
  result's own; `baselines(results)`: what `--baseline` may name among them; `describe(result)`:
  a few words for the index table and plot titles."""

  name: str
  keys: tuple[str, ...]
  sections: tuple[Section, ...]
  rows: Callable[[dict], list[dict]]
  describe: Callable[[dict], str]
  plots: tuple[Plot, ...] = ()
  check: Callable[[dict, str], None] = _no_check
  pair_rows: Callable[[Sequence[dict], str], list[dict]] = _no_pairs
  baselines: Callable[[Sequence[dict]], list[str]] = _no_baselines


def _lengths_check(result: dict, where: str) -> None:
  for n, entry in result["lengths"].items():
    if not n.isdigit() or not all(k in entry for k in ("loss", "perplexity")):
      raise ValueError(f"{where}: lengths[{n!r}] needs a decimal length with loss and perplexity")


LENGTHS = Kind(
  name="lengths",
  keys=("protocol", "lengths"),
  check=_lengths_check,
  sections=(
    Section(
      "Perplexity by evaluation length", lambda rs, b, t: lengths.length_tables(rs), "perplexity"
    ),
    Section(
      "Bits per byte by evaluation length",
      lambda rs, b, t: lengths.length_tables(rs, "bits_per_byte"),
    ),
    Section("Paired: each length against 1x", lambda rs, b, t: lengths.length_pair_tables(rs)),
    Section(
      "Paired across seeds: each length against 1x",
      lambda rs, b, t: lengths.length_seed_pair_tables(rs),
    ),
    Section("Paired: each result against a baseline", lambda rs, b, t: lengths.pair_tables(rs, b)),
    Section(
      "Paired across seeds: each result against its seed's baseline",
      lambda rs, b, t: lengths.seed_pair_tables(rs, b),
    ),
    Section("Effective context length", lambda rs, b, t: lengths.effective_length_tables(rs, t)),
    Section("LongPPL by evaluation length", lambda rs, b, t: lengths.longppl_tables(rs)),
    Section("Perplexity across seeds", lambda rs, b, t: lengths.seed_tables(rs)),
    Section("Ranking by length across seeds", lambda rs, b, t: lengths.length_rank_tables(rs)),
    Section(
      "Variants by evaluation length, per run",
      lambda rs, b, t: lengths.variant_tables(rs),
      "variants",
    ),
    Section("Loss by position", lambda rs, b, t: lengths.position_tables(rs), "loss_by_position"),
  ),
  rows=lengths.csv_rows,
  pair_rows=lengths.paired_csv_rows,
  baselines=lengths.baselines,
  describe=lengths.short_protocol,
  plots=(
    Plot("perplexity", "perplexity.png", plots.plot_perplexity),
    Plot("loss_by_position", "loss_by_position.png", plots.plot_loss_by_position),
    Plot("variants", "variants.png", plots.plot_variants),
  ),
)

TASKS = Kind(
  name="tasks",
  keys=("task", "train_sizes", "buckets"),
  sections=(
    Section("Task exact match by size", lambda rs, b, t: tasks.task_tables(rs), "tasks"),
    Section(
      "Task error rate on scored tokens",
      lambda rs, b, t: tasks.task_error_tables(rs),
      "task_errors",
    ),
    Section("Task exact match across seeds", lambda rs, b, t: tasks.task_seed_tables(rs)),
    Section(
      "Task error rate across seeds", lambda rs, b, t: tasks.task_seed_tables(rs, "error_rate")
    ),
    Section(
      "Task pairs: each result against a baseline", lambda rs, b, t: tasks.pair_tables(rs, b)
    ),
    Section(
      "Task pairs across seeds: each system against its seed's baseline",
      lambda rs, b, t: tasks.seed_pair_tables(rs, b),
    ),
    Section("Ranking across tasks", lambda rs, b, t: tasks.rank_tables(rs)),
    Section("Ranking per seed", lambda rs, b, t: tasks.rank_seed_tables(rs)),
  ),
  rows=tasks.csv_rows,
  baselines=tasks.baselines,
  describe=lambda r: f"task {r['task']}",
  plots=(
    Plot("tasks", "tasks.png", plots.plot_tasks),
    Plot("task_errors", "task_errors.png", plots.plot_task_errors),
  ),
)

PASSKEY = Kind(
  name="passkey",
  keys=("lengths", "depths", "cells"),
  sections=(Section("Passkey retrieval", lambda rs, b, t: passkey.passkey_tables(rs), "passkey"),),
  rows=passkey.csv_rows,
  describe=lambda r: "passkey",
  plots=(Plot("passkey", "passkey.png", plots.plot_passkey),),
)

# Report order: each kind's sections, CSV rows and plots come in this order.
KINDS: dict[str, Kind] = {k.name: k for k in (LENGTHS, TASKS, PASSKEY)}


def baselines(results: Sequence[dict]) -> list[str]:
  """Every name `--baseline` accepts: each kind's, over its own results."""
  return sorted(
    {b for kind in KINDS.values() for b in kind.baselines(tables.of_kind(results, kind.name))}
  )
