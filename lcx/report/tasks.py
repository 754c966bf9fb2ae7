"""The "tasks" kind: exact match and error rate per task-size bucket, across seeds, ranked."""

from __future__ import annotations

import re
from collections.abc import Sequence

from lcx.report import tables


def _bucket_order(name: str):
  lo, _, hi = name.partition("-")
  return (int(lo), int(hi)) if lo.isdigit() and hi.isdigit() else (1 << 62, 0, name)


def _accuracy_cell(b: dict) -> str:
  if b.get("skipped"):
    return "skipped"
  return tables.cell(b.get("accuracy"), b.get("accuracy_ci"), tables.f3, tables.f2)


def task_tables(results: Sequence[dict]) -> str:
  """(d): exact match per size bucket, a row per result, one table per task; per needle depth
  (depth x bucket, one table per result) for passkey-style tasks."""
  out = []
  for group in tables.groups(
    tables.of_kind(results, "tasks"), lambda r: (r["task"], tuple(r["train_sizes"]))
  ):
    buckets = sorted({b for r in group for b in r["buckets"]}, key=_bucket_order)
    rows = [
      [tables.label(r)]
      + [_accuracy_cell(r["buckets"][b]) if b in r["buckets"] else "-" for b in buckets]
      for r in group
    ]
    low, high = group[0]["train_sizes"]
    examples = "; ".join(
      f"{b}: {tables.span(r['buckets'].get(b, {}).get('examples') for r in group)}" for b in buckets
    )
    skips = [
      f"- {tables.label(r)} sizes {b}: skipped: {r['buckets'][b]['skipped']}"
      for r in group
      for b in buckets
      if r["buckets"].get(b, {}).get("skipped")
    ]
    out.append(
      "\n".join(
        [
          f"Task {group[0]['task']}: exact match by task size, 95% CI; trained "
          f"on sizes {low}-{high}. Examples per bucket: {examples}.",
          "",
          tables.markdown_table(["run/variant"] + buckets, rows),
        ]
        + ([""] + skips if skips else [])
      )
    )
    for r in group:
      if r.get("depths"):
        depths = sorted(r["depths"], key=float)
        rows = [
          [f"depth {d}"] + [_accuracy_cell(r["depths"][d].get(b, {})) for b in buckets]
          for d in depths
        ]
        out.append(
          f"{tables.label(r)}: {r['task']} exact match by needle depth and size\n\n"
          + tables.markdown_table(["depth"] + buckets, rows)
        )
  return "\n\n".join(out)


def task_error_tables(results: Sequence[dict]) -> str:
  """Per task: the error rate on the scored answer tokens (wrong / all, pooled over examples:
  flip-flop's read bits, MQAR's values) per size bucket; results recorded before it have none."""
  out = []
  chosen = [
    r
    for r in tables.of_kind(results, "tasks")
    if any("error_rate" in b for b in r["buckets"].values())
  ]
  for group in tables.groups(chosen, lambda r: (r["task"], tuple(r["train_sizes"]))):
    buckets = sorted({b for r in group for b in r["buckets"]}, key=_bucket_order)
    rows = [
      [tables.label(r)]
      + [
        tables.cell(
          r["buckets"][b].get("error_rate"), r["buckets"][b].get("error_rate_ci"), tables.f3
        )
        if r["buckets"].get(b, {}).get("error_rate") is not None
        else "-"
        for b in buckets
      ]
      for r in group
    ]
    low, high = group[0]["train_sizes"]
    out.append(
      f"Task {group[0]['task']}: error rate on the scored answer tokens by task size, 95% CI; "
      f"trained on sizes {low}-{high}.\n\n" + tables.markdown_table(["run/variant"] + buckets, rows)
    )
  return "\n\n".join(out)


TASK_METRICS = {"accuracy": "exact match", "error_rate": "error rate on the scored answer tokens"}


def task_seed_tables(results: Sequence[dict], metric: str = "accuracy") -> str:
  """Task runs named STEM-s<seed> that differ only in the seed: per size bucket, the mean of
  `metric` (a TASK_METRICS key) over seeds [min, max across seeds]. One table per task; stems
  with one seed, and results that do not record `metric`, are left out."""
  out = []
  chosen = [
    r for r in tables.of_kind(results, "tasks") if any(metric in b for b in r["buckets"].values())
  ]
  for group in tables.groups(chosen, lambda r: (r["task"], tuple(r["train_sizes"]))):
    by_stem = tables.seeded_stems(group)
    if not by_stem:
      continue
    buckets = sorted(
      {b for rs in by_stem.values() for r in rs for b in r["buckets"]}, key=_bucket_order
    )
    rows = []
    for (stem, variant), rs in by_stem.items():
      row = [f"{stem}/{variant}", tables.seeds(rs)]
      for b in buckets:
        values = [r["buckets"].get(b, {}).get(metric) for r in rs]
        row.append(
          "-"
          if None in values
          else tables.cell(sum(values) / len(values), [min(values), max(values)], tables.f3)
        )
      rows.append(row)
    low, high = group[0]["train_sizes"]
    out.append(
      f"Task {group[0]['task']}: {TASK_METRICS[metric]} by task size; trained on sizes "
      f"{low}-{high}. Cells: mean over seeds [min, max across seeds].\n\n"
      + tables.markdown_table(
        ["runs/variant", "seeds"] + buckets, rows, align="ll" + "r" * len(buckets)
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


def extrapolation_accuracy(r: dict) -> float | None:
  """Mean exact match over the size buckets past the training sizes (None: none scored)."""
  high = r["train_sizes"][1]
  scores = [
    b["accuracy"]
    for name, b in r["buckets"].items()
    if b.get("accuracy") is not None and _bucket_order(name)[0] > high
  ]
  return sum(scores) / len(scores) if scores else None


def rank_tables(results: Sequence[dict]) -> str:
  """Mean reciprocal rank of systems across tasks (the NoPE paper's summary): per task, systems
  ranked by exact match on sizes past training (seeds averaged; ties share the better rank);
  shown only when at least two systems were evaluated on at least two tasks."""
  scores = {}  # task -> system -> [accuracy per seed]
  for r in tables.of_kind(results, "tasks"):
    if extrapolation_accuracy(r) is not None:
      scores.setdefault(r["task"], {}).setdefault(system(r), []).append(extrapolation_accuracy(r))
  tasks = sorted(t for t, by in scores.items() if len(by) >= 2)
  systems = sorted({s for t in tasks for s in scores[t]})
  if len(tasks) < 2 or len(systems) < 2:
    return ""
  mean = {(t, s): sum(v) / len(v) for t in tasks for s, v in scores[t].items()}
  reciprocal = {}
  for t in tasks:
    values = sorted({mean[t, s] for s in systems if (t, s) in mean}, reverse=True)
    for s in systems:
      if (t, s) in mean:
        reciprocal.setdefault(s, []).append(1 / (1 + sum(v > mean[t, s] for v in values)))
  mrr = {s: sum(v) / len(tasks) for s, v in reciprocal.items()}  # a missing task counts 0
  order = sorted(systems, key=lambda s: (-mrr.get(s, 0.0), s))
  rows = [
    [s, f"{mrr.get(s, 0.0):.3f}"]
    + [tables.f3(mean[t, s]) if (t, s) in mean else "-" for t in tasks]
    for s in order
  ]
  return (
    "Mean reciprocal rank across tasks of each system's exact match on sizes past "
    "training (mean over seeds and over those size buckets), and that exact match per "
    "task.\n\n" + tables.markdown_table(["system", "MRR"] + tasks, rows)
  )


def csv_rows(r: dict) -> list[dict]:
  """Per size bucket (then per needle depth and bucket): exact match and token accuracy, or
  why the bucket was skipped."""
  out = []
  base = {**tables.row_base(r), "task": r["task"]}
  cuts = [("", r["buckets"])] + [
    (d, r["depths"][d]) for d in sorted(r.get("depths") or {}, key=float)
  ]
  for depth, buckets in cuts:
    for name in sorted(buckets, key=_bucket_order):
      b = buckets[name]
      where = dict(bucket=name, depth=depth, examples=b.get("examples"))
      if b.get("skipped"):
        out.append(tables.row(base, metric="skipped", note=b["skipped"], **where))
        continue
      out.append(
        tables.row(
          base, metric="accuracy", value=b.get("accuracy"), ci=b.get("accuracy_ci"), **where
        )
      )
      if b.get("token_accuracy") is not None:
        out.append(tables.row(base, metric="token_accuracy", value=b["token_accuracy"], **where))
  return out
