"""The "tasks" kind: exact match and error rate per task-size bucket, across seeds, ranked, and
paired against a baseline system example by example."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from lcx.tools import bootstrap
from lcx.tools.report import tables


def bucket_order(name: str):
  """Size buckets `LO-HI` by their sizes, any other name after them."""
  lo, _, hi = name.partition("-")
  return (int(lo), int(hi)) if lo.isdigit() and hi.isdigit() else (1 << 62, 0, name)


def group_key(r: dict) -> tuple:
  """Results that share a table: the same task and trained sizes."""
  return (r["task"], tuple(r["train_sizes"]))


def task_tables(results: Sequence[dict]) -> str:
  """(d): exact match per size bucket, a row per result, one table per task; per needle depth
  (depth x bucket, one table per result) for passkey-style tasks; from the CSV rows."""
  out = []
  for group in tables.groups(tables.of_kind(results, "tasks"), group_key):
    rows_R = [csv_rows(r) for r in group]
    top_R = [[x for x in rows if x["depth"] == ""] for rows in rows_R]
    buckets = sorted({x["bucket"] for rows in top_R for x in rows}, key=bucket_order)

    def cells(rows):
      return tables.pivot_cells(rows, "bucket", buckets, "accuracy", tables.f3, tables.f2)

    body = [[tables.label(r)] + cells(rows) for r, rows in zip(group, top_R)]
    low, high = group[0]["train_sizes"]
    by_bucket_R = [{x["bucket"]: x for x in rows} for rows in top_R]
    examples = "; ".join(
      f"{b}: {tables.span(by.get(b, {}).get('examples') for by in by_bucket_R)}" for b in buckets
    )
    skips = [
      f"- {tables.label(r)} sizes {x['bucket']}: skipped: {x['note']}"
      for r, rows in zip(group, top_R)
      for x in rows
      if x["metric"] == "skipped"
    ]
    out.append(
      "\n".join(
        [
          f"Task {group[0]['task']}: exact match by task size, 95% CI; trained "
          f"on sizes {low}-{high}. Examples per bucket: {examples}.",
          "",
          tables.markdown_table(["run/variant"] + buckets, body),
        ]
        + ([""] + skips if skips else [])
      )
    )
    for r, rows in zip(group, rows_R):
      if r.get("depths"):
        depths = sorted(r["depths"], key=float)
        body = [[f"depth {d}"] + cells([x for x in rows if x["depth"] == d]) for d in depths]
        out.append(
          f"{tables.label(r)}: {r['task']} exact match by needle depth and size\n\n"
          + tables.markdown_table(["depth"] + buckets, body)
        )
  return "\n\n".join(out)


def task_error_tables(results: Sequence[dict]) -> str:
  """Per task: the error rate on the scored answer tokens (wrong / all, pooled over examples:
  flip-flop's read bits, MQAR's values) per size bucket, from the long-form rows; results
  recorded before it have none."""
  out = []
  chosen = [
    r
    for r in tables.of_kind(results, "tasks")
    if any("error_rate" in b for b in r["buckets"].values())
  ]
  for group in tables.groups(chosen, group_key):
    # With the accuracy rows, which every scored bucket has, every bucket is a column.
    metrics = ("accuracy", "error_rate")
    top_R = [[x for x in csv_rows(r, metrics) if x["depth"] == ""] for r in group]
    buckets = sorted({x["bucket"] for rows in top_R for x in rows}, key=bucket_order)
    body = [
      [tables.label(r)]
      + tables.pivot_cells(rows, "bucket", buckets, "error_rate", tables.f3, skipped=False)
      for r, rows in zip(group, top_R)
    ]
    low, high = group[0]["train_sizes"]
    out.append(
      f"Task {group[0]['task']}: error rate on the scored answer tokens by task size, 95% CI; "
      f"trained on sizes {low}-{high}.\n\n" + tables.markdown_table(["run/variant"] + buckets, body)
    )
  return "\n\n".join(out)


TASK_METRICS = {"accuracy": "exact match", "error_rate": "error rate on the scored answer tokens"}


def task_seed_tables(results: Sequence[dict], metric: str = "accuracy") -> str:
  """Task runs named STEM-s<seed> that differ only in the seed: per size bucket, the mean of
  `metric` (a TASK_METRICS key) over seeds [min, max across seeds], from the long-form rows.
  One table per task; stems with one seed, and results that do not record `metric`, are left
  out."""
  out = []
  chosen = [
    r for r in tables.of_kind(results, "tasks") if any(metric in b for b in r["buckets"].values())
  ]
  for group in tables.groups(chosen, group_key):
    # With the accuracy rows, which every scored bucket has, every bucket is a column.
    metrics = tuple(dict.fromkeys(("accuracy", metric)))
    rows = [row for r in group for row in csv_rows(r, metrics) if row["depth"] == ""]
    buckets, body = tables.seed_table(rows, "bucket", metric, tables.f3, order=bucket_order)
    if not body:
      continue
    low, high = group[0]["train_sizes"]
    out.append(
      f"Task {group[0]['task']}: {TASK_METRICS[metric]} by task size; trained on sizes "
      f"{low}-{high}. Cells: mean over seeds [min, max across seeds].\n\n"
      + tables.markdown_table(
        ["runs/variant", "seeds"] + buckets, body, align="ll" + "r" * len(buckets)
      )
    )
  return "\n\n".join(out)


def system(r: dict) -> str:
  """What a task result ranks as: its run name without the task (`copy-alibi-s1` -> `alibi`)
  and seed suffix, joined with its variant unless `none` (sweeps name runs TASK-LABEL-sSEED).
  A variant that picks the task (`data.task`) ranks without the words of its name that name
  the task: `multikey_yarn` on niah_multikey is `yarn`, `multikey` is the run itself."""
  name = re.sub(r"-s\d+$", "", r["run"])
  name = name[len(r["task"]) + 1 :] if name.startswith(r["task"] + "-") else name
  variant = r.get("variant", "none")
  if "data.task" in (r.get("overrides") or {}):
    variant = "_".join(w for w in variant.split("_") if w not in r["task"].split("_")) or "none"
  return name if variant == "none" else f"{name}/{variant}"


def _mean_accuracy(r: dict, past: bool) -> float | None:
  """Mean exact match over the scored size buckets past the training sizes (`past`) or inside
  them (None: none scored). `r`: a task result, or the body `evaluate.tasks.sweep` returns."""
  high = r["train_sizes"][1]
  scores = [
    b["accuracy"]
    for name, b in r["buckets"].items()
    if b.get("accuracy") is not None
    and (bucket_order(name)[0] > high if past else bucket_order(name)[1] <= high)
  ]
  return sum(scores) / len(scores) if scores else None


def extrapolation_accuracy(r: dict) -> float | None:
  """Mean exact match over the size buckets past the training sizes (None: none scored)."""
  return _mean_accuracy(r, past=True)


def in_distribution_accuracy(r: dict) -> float | None:
  """Mean exact match over the size buckets inside the training sizes (None: none scored)."""
  return _mean_accuracy(r, past=False)


# A task ranks only where some system learned it: exact match >= LEARNED at the training sizes
# (mean over seeds). Past the training sizes, a task no system learned ranks noise (issue 27).
LEARNED = 0.9


def unlearned_tasks(results: Sequence[dict]) -> dict[str, float]:
  """{task: the best system's exact match at the training sizes} of the tasks below LEARNED."""
  seen: dict = {}  # task -> system -> [in-distribution exact match per seed]
  for r in tables.of_kind(results, "tasks"):
    value = in_distribution_accuracy(r)
    if value is not None:
      seen.setdefault(r["task"], {}).setdefault(system(r), []).append(value)
  best = {t: max(sum(v) / len(v) for v in by.values()) for t, by in seen.items()}
  return {t: b for t, b in sorted(best.items()) if b < LEARNED}


def _ranked_rows(results: Sequence[dict]) -> tuple[list[dict], dict[str, float]]:
  """(long-form rows {task, system, seed, value} of exact match past training, the tasks no
  system learned at the training sizes: `unlearned_tasks`)."""
  every = [
    {"task": r["task"], "system": system(r), "seed": _seed(r), "value": value}
    for r in tables.of_kind(results, "tasks")
    if (value := extrapolation_accuracy(r)) is not None
  ]
  return every, unlearned_tasks(results)


def rank_tables(results: Sequence[dict]) -> str:
  """Mean reciprocal rank of systems across tasks (the NoPE paper's summary): per task, systems
  ranked by exact match on sizes past training (seeds averaged; ties share the better rank),
  over the tasks some system learned in distribution (`LEARNED`; the others are named with
  their best exact match, and why); shown only when at least two systems were evaluated on at
  least two such tasks."""
  every, unlearned = _ranked_rows(results)
  if not tables.rank_table(every)[1]:
    return ""  # no ranking, learned or not
  tasks, body = tables.rank_table([row for row in every if row["task"] not in unlearned])
  note = (
    f"Not ranked: no system reaches exact match {LEARNED:g} at the training sizes (mean over "
    "seeds), so a ranking past them would rank noise: "
    + ", ".join(f"{t} (best {b:.3f})" for t, b in unlearned.items())
    + "."
    if unlearned
    else ""
  )
  if not body:
    return note
  table = (
    "Mean reciprocal rank across tasks of each system's exact match on sizes past "
    "training (mean over seeds and over those size buckets), and that exact match per "
    f"task; the tasks some system learned (exact match >= {LEARNED:g} at the training sizes)."
    "\n\n" + tables.markdown_table(["system", "MRR"] + tasks, body)
  )
  return table + ("\n\n" + note if note else "")


def rank_seed_tables(results: Sequence[dict]) -> str:
  """The ranking of `rank_tables` within each seed: whether an order holds seed by seed or only
  in the mean. Each seed's MRR over the ranked tasks (`rank_tables`' own; per seed, those with
  two or more systems), with each system's rank in that seed; systems in the order of their
  mean over the seeds. Shown when two or more seeds rank."""
  every, unlearned = _ranked_rows(results)
  rows = [row for row in every if row["task"] not in unlearned and row["seed"] is not None]
  mrr: dict = {}  # system -> seed -> (MRR, rank)
  for seed in sorted({row["seed"] for row in rows}):
    _, by_system, _ = tables.reciprocal_ranks([row for row in rows if row["seed"] == seed])
    rank = tables.ranks(by_system, tables.f3, highest_first=True)  # ties as printed
    for name, value in by_system.items():
      mrr.setdefault(name, {})[seed] = (value, rank[name])
  seeds = sorted({seed for by in mrr.values() for seed in by})
  if len(seeds) < 2:
    return ""

  def mean(name):
    return sum(value for value, _ in mrr[name].values()) / len(seeds)

  body = [
    [name]
    + [f"{mrr[name][s][0]:.3f} ({mrr[name][s][1]})" if s in mrr[name] else "-" for s in seeds]
    + [f"{mean(name):.3f}"]
    for name in sorted(mrr, key=lambda name: (-mean(name), name))
  ]
  return (
    "Mean reciprocal rank of each system within each seed, over the ranked tasks above (in a "
    "seed, those with two or more systems), with its rank in that seed in parentheses (ties "
    "share the better rank), and the mean over the seeds (a seed without the system counts 0)."
    "\n\n" + tables.markdown_table(["system"] + [f"seed {s}" for s in seeds] + ["mean"], body)
  )


def _exact(bucket: dict) -> tuple[str, np.ndarray] | None:
  """(digest of the examples, each one's exact match as 0/1) of a bucket; None where the
  result predates per-example outcomes or the bucket was skipped."""
  per = bucket.get("per_example")
  if not per or not per.get("exact"):
    return None
  return per["digest"], np.frombuffer(per["exact"].encode(), np.uint8).astype(np.float64) - 48


def bootstrap_of(r: dict) -> tuple[int, int]:
  """(resamples, seed) of a result's own intervals: eval.bootstrap and data.seed."""
  config = r.get("config") or {}
  return config.get("eval", {}).get("bootstrap", 1000), config.get("data", {}).get("seed", 0)


def paired(a: dict, b: dict, bucket: str, resamples: int, seed: int):
  """(A's exact match minus B's, its interval) in one size bucket, paired over the same
  examples (a seeded bootstrap over examples); None unless both hold the outcomes of the same
  examples (their digests agree)."""
  ea, eb = (_exact(r["buckets"].get(bucket, {})) for r in (a, b))
  if ea is None or eb is None or ea[0] != eb[0] or len(ea[1]) != len(eb[1]):
    return None
  ones_N = np.ones_like(ea[1])
  weights_RxN = bootstrap.resample_weights(len(ones_N), resamples, seed)
  return bootstrap.paired_difference(ea[1], ones_N, eb[1], ones_N, weights_RxN)


def _seed(r: dict) -> int | None:
  match = tables.SEEDED_RUN.match(str(r["run"]))
  return int(match["seed"]) if match else None


def _with_examples(results: Sequence[dict]) -> list[dict]:
  return [
    r for r in tables.of_kind(results, "tasks") if any(_exact(b) for b in r["buckets"].values())
  ]


def baselines(results: Sequence[dict]) -> list[str]:
  """The systems (`system`) `--baseline` can name for task results with per-example outcomes:
  in each task, each result is paired with that system's result of its own seed."""
  return sorted({system(r) for r in _with_examples(results)})


def baseline_pairs(results: Sequence[dict], baseline: str) -> list[tuple[dict, list[dict]]]:
  """Per task: (the baseline system's result, the other results of its seed), once per seed."""
  out = []
  for group in tables.groups(_with_examples(results), group_key):
    for base in group:
      if system(base) == baseline:
        others = [r for r in group if r is not base and _seed(r) == _seed(base)]
        if others:
          out.append((base, others))
  return out


def _buckets(group: Sequence[dict]) -> list[str]:
  return sorted({b for r in group for b in r["buckets"]}, key=bucket_order)


def _pair_note(r: dict, what: str, cells: str) -> str:
  low, high = r["train_sizes"]
  return (
    f"Task {r['task']}: {what}, in exact match by task size (trained on sizes {low}-{high}; "
    f"positive: more examples right). Cells: {cells}; - where the examples differ or one side "
    "has no per-example outcomes."
  )


def _interval(r: dict) -> str:
  resamples, seed = bootstrap_of(r)
  return (
    f"95% paired bootstrap interval over the same examples ({resamples} resamples, seed {seed})"
  )


def pair_tables(results: Sequence[dict], baseline: str = "") -> str:
  """Each task result minus the baseline system's result of its seed, per size bucket, paired
  example by example (`paired`). Empty without a baseline."""
  if not baseline:
    return ""
  out = []
  for base, others in baseline_pairs(results, baseline):
    buckets = _buckets([base, *others])
    resamples, seed = bootstrap_of(base)
    rows = [
      [tables.label(r)] + [_text(paired(r, base, b, resamples, seed)) for b in buckets]
      for r in others
    ]
    note = _pair_note(
      base, f"each result minus {tables.label(base)}", f"the difference [{_interval(base)}]"
    )
    out.append(
      note + "\n\n" + tables.markdown_table([f"run/variant - {tables.label(base)}"] + buckets, rows)
    )
  return "\n\n".join(out)


def seed_pair_tables(results: Sequence[dict], baseline: str = "") -> str:
  """`pair_tables` summarized over seeds: per task and system, per size bucket, the mean of
  each seed's difference from the baseline of its own seed [min, max across seeds] k/n
  (`tables.seed_summary`): does a system beat the baseline in every seed?"""
  if not baseline:
    return ""
  out = []
  pairs = [p for p in baseline_pairs(results, baseline) if _seed(p[0]) is not None]
  for group in tables.groups(pairs, lambda p: group_key(p[0])):
    diffs: dict = {}  # system -> seed -> bucket -> (difference, interval)
    buckets = _buckets([r for base, others in group for r in (base, *others)])
    for base, others in group:
      resamples, seed = bootstrap_of(base)
      for r in others:
        diffs.setdefault(system(r), {})[_seed(r)] = {
          b: got for b in buckets if (got := paired(r, base, b, resamples, seed))
        }
    table = tables.seed_summary_table(
      diffs, buckets, [f"system - {baseline}"] + buckets, min_seeds=1
    )
    if table:
      note = _pair_note(
        group[0][0],
        f"each system minus {baseline} of its own seed",
        "the mean over seeds [min, max across seeds] k/n: of the n seeds, the k whose "
        f"{_interval(group[0][0])} excludes zero on the mean's side",
      )
      out.append(note + "\n\n" + table)
  return "\n\n".join(out)


def _text(got) -> str:
  return "-" if got is None else tables.cell(*got, tables.signed)


# The CSV's task metrics; the seed tables ask for others too (error_rate).
CSV_METRICS = ("accuracy", "token_accuracy")


def csv_rows(r: dict, metrics: Sequence[str] = CSV_METRICS) -> list[dict]:
  """Per size bucket (then per needle depth and bucket): each of `metrics` it records (every
  scored bucket has an accuracy row, empty where not scored), or why it was skipped."""
  out = []
  base = {**tables.row_base(r), "task": r["task"]}
  cuts = [("", r["buckets"])] + [
    (d, r["depths"][d]) for d in sorted(r.get("depths") or {}, key=float)
  ]
  for depth, buckets in cuts:
    for name in sorted(buckets, key=bucket_order):
      b = buckets[name]
      where = dict(bucket=name, depth=depth, examples=b.get("examples"))
      if b.get("skipped"):
        out.append(tables.row(base, metric="skipped", note=b["skipped"], **where))
        continue
      for metric in metrics:
        if b.get(metric) is not None or metric == "accuracy":
          out.append(
            tables.row(base, metric=metric, value=b.get(metric), ci=b.get(f"{metric}_ci"), **where)
          )
  return out
