"""The one table renderer, the cell formats and the long-form row (`row`) that the CSV and the
tables share, and the tables built from such rows: pivots, means across seeds, ranks."""

from __future__ import annotations

import json
import os
import pathlib
import re
from collections.abc import Iterable, Sequence

from lcx.config import protocols

CSV_COLUMNS = (
  "run",
  "variant",
  "step",
  "kind",
  "scheme",
  "train_len",
  "protocol",
  "documents",
  "task",
  "length",
  "position_start",
  "position_end",
  "bucket",
  "depth",
  "metric",
  "value",
  "ci_lo",
  "ci_hi",
  "tokens",
  "num_documents",
  "examples",
  "note",
)


def markdown_table(
  header: Sequence[str], rows: Sequence[Sequence[str]], align: str | None = None
) -> str:
  """The one table renderer: a pipe table padded so the plain text reads as a table too.
  `align`: a letter per column, l or r; default: the first column left, the rest right."""
  cells = [[str(c).replace("|", "\\|") for c in row] for row in [header, *rows]]
  widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
  align = align or "l" + "r" * (len(header) - 1)

  def line(row):
    return (
      "| "
      + " | ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(row, widths, align))
      + " |"
    )

  rule = (
    "|"
    + "|".join(
      ":" + "-" * (w + 1) if a == "l" else "-" * (w + 1) + ":" for w, a in zip(widths, align)
    )
    + "|"
  )
  return "\n".join([line(cells[0]), rule, *map(line, cells[1:])])


def ppl(x: float) -> str:
  """Perplexity to ~3-4 significant digits: 8.35, 132.9, 12345."""
  return f"{x:.2f}" if abs(x) < 100 else f"{x:.1f}" if abs(x) < 1000 else f"{x:.0f}"


def f3(x: float) -> str:
  return f"{x:.3f}"


def f2(x: float) -> str:
  return f"{x:.2f}"


def cell(value, ci, fmt, ci_fmt=None) -> str:
  """`8.35 [8.21, 8.49]`; the value alone without a CI; `-` without a value."""
  if value is None:
    return "-"
  if not ci or ci[0] is None:
    return fmt(value)
  ci_fmt = ci_fmt or fmt
  return f"{fmt(value)} [{ci_fmt(ci[0])}, {ci_fmt(ci[1])}]"


def label(r: dict) -> str:
  """A result's row name: run/variant."""
  return f"{r['run']}/{r['variant']}" if r.get("variant") else str(r["run"])


def times(n: int, train_len: int) -> str:
  return f"{n} ({n / train_len:g}x)" if train_len else str(n)


def protocol_key(r: dict) -> str:
  return json.dumps(r.get("protocol") or {}, sort_keys=True)


def scored(p: dict, results: Sequence[dict]) -> str:
  """What the results' lengths scored, beside what the protocol asked (`eval.num_tokens`), so a
  header never claims 32768 tokens where 7 documents gave 7168:
  `7168 tokens of the 32768 asked, in 7 documents, windows: 112 at 64, 7 at 1024`."""
  entries = {int(n): [] for r in results for n in r.get("lengths", {})}
  for r in results:
    for n, e in r.get("lengths", {}).items():
      entries[int(n)].append(e)
  every = [e for es in entries.values() for e in es]
  if not every or any(e.get("tokens") is None for e in every):
    return f"{p['num_tokens']} tokens per length asked (scored counts not recorded)"
  text = (
    f"{span(e['tokens'] for e in every)} tokens per length of the {p['num_tokens']} asked, in "
    f"{span(e.get('documents') for e in every)} documents"
  )
  if all(e.get("windows") is not None for e in every):
    text += ", windows: " + ", ".join(
      f"{span(e['windows'] for e in entries[n])} at {n}" for n in sorted(entries)
    )
  return text


def describe_protocol(p: dict, results: Sequence[dict] = ()) -> str:
  """`windows protocol on stream documents, 7168 tokens per length of the 32768 asked, in 7
  documents, windows: 112 at 64, 7 at 1024, 95% bootstrap CI ...`: the counts `scored` by the
  results the table shows (none given: what was asked, said so)."""
  if not p:
    return "protocol not recorded"
  text = f"{p.get('protocol', '?')} protocol on {p.get('documents', '?')} documents"
  if p.get("protocol") in protocols.PROTOCOLS:
    text += protocols.PROTOCOLS[p["protocol"]].describe(p)
  if p.get("num_tokens"):
    text += f", {scored(p, results)}"
  if p.get("bootstrap"):
    text += (
      f", {p.get('confidence', 0.95) * 100:g}% bootstrap CI over documents "
      f"({p['bootstrap']} resamples, seed {p.get('seed', 0)})"
    )
  return text


def groups(results: Sequence[dict], key) -> list[list[dict]]:
  """Results split by key(result), groups in order of first appearance."""
  out: dict = {}
  for r in results:
    out.setdefault(key(r), []).append(r)
  return list(out.values())


def span(values: Iterable) -> str:
  values = sorted(set(v for v in values if v is not None))
  return "-" if not values else str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def pivot_cells(
  rows: Sequence[dict], column: str, columns: Sequence, metric: str, fmt, ci_fmt=None, skipped=True
) -> list[str]:
  """One table row from one result's long-form rows (`row`): per value of `column` in
  `columns`, its `metric` as `value [ci_lo, ci_hi]`; else `skipped` where a skipped row says so
  (unless not `skipped`), else `-`."""
  found: dict = {}
  for r in rows:
    if r["metric"] == metric:
      found[str(r[column])] = r
    elif skipped and r["metric"] == "skipped":
      found.setdefault(str(r[column]), None)
  out = []
  for c in map(str, columns):
    if c not in found:
      out.append("-")
    elif found[c] is None:
      out.append("skipped")
    else:
      r = found[c]
      ci = None if r["ci_lo"] == "" else [r["ci_lo"], r["ci_hi"]]
      out.append(cell(None if r["value"] == "" else r["value"], ci, fmt, ci_fmt))
  return out


SEEDED_RUN = re.compile(r"^(?P<stem>.+)-s(?P<seed>[0-9]+)$")


def distinct_runs(results: Sequence[dict]) -> list[dict]:
  """The results with runs of one name but different workdirs (runs/toy/a, runs/other/a) named
  by the shortest suffix of their workdirs that tells them apart (toy/a, other/a), so that two
  runs never share a label (nor is one paired against the other as its baseline); copies where
  a name changes."""
  workdirs: dict[str, set] = {}
  for r in results:
    workdirs.setdefault(str(r["run"]), set()).add(_workdir(r))
  names = {}
  for run, found in workdirs.items():
    paths = sorted(w for w in found if w)
    if len(found) < 2 or not paths:
      continue
    parts = [pathlib.PurePath(p).parts for p in paths]
    for k in range(1, max(map(len, parts)) + 1):
      suffixes = [str(pathlib.PurePath(*part[-k:])) for part in parts]
      if len(set(suffixes)) == len(suffixes):
        break
    names.update({(run, path): suffix for path, suffix in zip(paths, suffixes)})
  return [
    {**r, "run": names[key]} if (key := (str(r["run"]), _workdir(r))) in names else r
    for r in results
  ]


def _workdir(r: dict) -> str | None:
  return os.path.normpath(r["workdir"]) if r.get("workdir") else None


def as_seeds(results: Sequence[dict]) -> list[dict]:
  """The results as the seed tables read them, copies where a name changes: runs that share a
  name are told apart by their workdirs (`distinct_runs`); a run named STEM
  beside runs STEM-s<k> (a sweep whose seed 0 kept its first names, as rope_extension's) is
  STEM-s<seed>, the seed its config records; a variant naming a file in its run's own workdir
  (a LongRoPE factors file) names it `{workdir}/...`, so that each seed's variant is the same
  label and no machine path is printed. Results the tables already read are returned as they are."""
  results = distinct_runs(results)
  stems = {m["stem"] for r in results if (m := SEEDED_RUN.match(str(r["run"])))}
  names = {str(r["run"]) for r in results}
  out = []
  for r in results:
    run, variant, workdir = str(r["run"]), r["variant"], r.get("workdir")
    seed = (r.get("config") or {}).get("seed")
    if run in stems and isinstance(seed, int) and f"{run}-s{seed}" not in names:
      run = f"{run}-s{seed}"
    if workdir and isinstance(variant, str) and f"{workdir}/" in variant:
      variant = variant.replace(f"{workdir}/", "{workdir}/")
    same = (run, variant) == (r["run"], r["variant"])
    out.append(r if same else {**r, "run": run, "variant": variant})
  return out


def seed_values(rows: Sequence[dict], column: str, metric: str, order=None) -> tuple[list, dict]:
  """(columns, {(stem, variant): (seeds, {column value: [value per run] or None})}) from
  long-form rows (`row`): runs named STEM-s<seed>, two or more per (stem, variant); columns are
  the values of `column` its runs' rows hold, sorted by `order`; None unless every run has a
  value there."""
  by_stem: dict = {}  # (stem, variant) -> run -> {column value: metric value}
  for r in rows:
    match = SEEDED_RUN.match(str(r["run"]))
    if match:
      values = by_stem.setdefault((match["stem"], str(r["variant"])), {}).setdefault(r["run"], {})
      values.setdefault(r[column], None)
      if r["metric"] == metric and r["value"] != "":
        values[r[column]] = r["value"]
  by_stem = {key: runs for key, runs in by_stem.items() if len(runs) >= 2}
  columns = sorted({c for runs in by_stem.values() for v in runs.values() for c in v}, key=order)
  out = {}
  for key, runs in by_stem.items():
    seeds = sorted((SEEDED_RUN.match(str(run))["seed"] for run in runs), key=int)
    found = {c: [v[c] for v in runs.values() if v.get(c) is not None] for c in columns}
    out[key] = (seeds, {c: vs if len(vs) == len(runs) else None for c, vs in found.items()})
  return columns, out


def seed_table(
  rows: Sequence[dict], column: str, metric: str, fmt, order=None
) -> tuple[list, list[list[str]]]:
  """(columns, table rows) of `seed_values`: `stem/variant`, the seeds, then per column the
  mean over the runs [min, max across them], `-` unless every run has a value there."""
  columns, values = seed_values(rows, column, metric, order)
  out = []
  for (stem, variant), (seeds, by_column) in values.items():
    cells = [
      "-" if vs is None else cell(sum(vs) / len(vs), [min(vs), max(vs)], fmt)
      for vs in by_column.values()
    ]
    out.append([f"{stem}/{variant}", ",".join(seeds), *cells])
  return columns, out


def ranks(scores: dict, fmt, highest_first: bool = False) -> dict:
  """{name: rank} by score, lowest first (highest with `highest_first`); names whose scores
  print the same (`fmt`) share the better rank."""
  printed = {name: fmt(v) for name, v in scores.items()}
  sign = -1 if highest_first else 1
  return {
    name: 1
    + sum(printed[o] != printed[name] and sign * scores[o] < sign * scores[name] for o in scores)
    for name in scores
  }


def signed(x: float) -> str:
  return f"{x:+.3f}"


def seed_summary(pairs: Sequence) -> str:
  """`mean [min, max] k/n` of per-seed (difference, interval) pairs: of the n seeds, the k whose
  interval excludes zero on the mean's side; `-` unless every seed has one."""
  if not pairs or any(p is None for p in pairs):
    return "-"
  values = [p[0] for p in pairs]
  mean = sum(values) / len(values)
  apart = sum(1 for _, ci in pairs if ci and ((mean < 0 and ci[1] < 0) or (mean > 0 and ci[0] > 0)))
  return f"{cell(mean, [min(values), max(values)], signed)} {apart}/{len(pairs)}"


def seed_summary_table(diffs: dict, columns: Sequence, header: list[str], min_seeds: int) -> str:
  """The markdown table of `diffs` (row name -> seed -> column -> (difference, interval)): a
  row per name with at least `min_seeds` seeds, its seeds, then `seed_summary` per column;
  `header`: the first column's name and one per column. Empty without a row."""
  rows = [
    [name, ",".join(map(str, sorted(by_seed)))]
    + [seed_summary([by_seed[s].get(c) for s in sorted(by_seed)]) for c in columns]
    for name, by_seed in diffs.items()
    if len(by_seed) >= min_seeds
  ]
  if not rows:
    return ""
  return markdown_table([header[0], "seeds", *header[1:]], rows, align="ll" + "r" * len(columns))


def reciprocal_ranks(rows: Sequence[dict]) -> tuple[list[str], dict, dict]:
  """(tasks, {system: MRR}, {(task, system): mean over seeds}) from long-form rows {task,
  system, value} (one per seed): per task with two or more systems, systems ranked by their
  mean over seeds (ties share the better rank); a system's MRR is over those tasks (a task it
  lacks counts 0). Empty unless two tasks and two systems."""
  scores: dict = {}  # task -> system -> [value per seed]
  for r in rows:
    scores.setdefault(r["task"], {}).setdefault(r["system"], []).append(r["value"])
  tasks = sorted(t for t, by in scores.items() if len(by) >= 2)
  systems = sorted({s for t in tasks for s in scores[t]})
  if len(tasks) < 2 or len(systems) < 2:
    return [], {}, {}
  mean = {(t, s): sum(v) / len(v) for t in tasks for s, v in scores[t].items()}
  reciprocal = {}
  for t in tasks:
    values = sorted({mean[t, s] for s in systems if (t, s) in mean}, reverse=True)
    for s in systems:
      if (t, s) in mean:
        reciprocal.setdefault(s, []).append(1 / (1 + sum(v > mean[t, s] for v in values)))
  return tasks, {s: sum(v) / len(tasks) for s, v in reciprocal.items()}, mean


def rank_table(rows: Sequence[dict]) -> tuple[list[str], list[list[str]]]:
  """(tasks, table rows) of `reciprocal_ranks`: a row per system, best first: its MRR, then its
  mean per task. Empty unless two tasks and two systems."""
  tasks, mrr, mean = reciprocal_ranks(rows)
  order = sorted(mrr, key=lambda s: (-mrr[s], s))
  return tasks, [
    [s, f"{mrr[s]:.3f}"] + [f3(mean[t, s]) if (t, s) in mean else "-" for t in tasks] for s in order
  ]


def row(base: dict, *, ci=None, **fields) -> dict:
  row = dict.fromkeys(CSV_COLUMNS, "")
  row.update(base)
  row.update({k: v for k, v in fields.items() if v is not None})
  if ci and ci[0] is not None:
    row["ci_lo"], row["ci_hi"] = ci
  return row


def row_base(r: dict) -> dict:
  """The columns every kind's CSV rows share."""
  return {
    "run": r["run"],
    "variant": r["variant"],
    "step": r["step"],
    "kind": r["kind"],
    "scheme": r.get("scheme", ""),
    "train_len": r["train_len"],
  }


def of_kind(results: Sequence[dict], kind: str) -> list[dict]:
  """The results of one kind: each kind's public tables and plots take any mix of results."""
  return [r for r in results if r["kind"] == kind]
