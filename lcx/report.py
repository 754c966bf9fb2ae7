"""Tables, a CSV and plots from evaluation results (schema "lcx.eval/1"), nothing else.

    python -m lcx.report PATH... --out=DIR [--title=TEXT] [--baseline=RUN/VARIANT]
      [--effective_tolerance=NATS]

PATH: a result JSON, a directory (every lcx result JSON below it, e.g. runs/x/eval/ or
experiments/NAME/results/) or a glob. Prints the markdown tables and writes DIR/report.md,
DIR/results.csv and the PNG plots that have data. Reads JSON only: no jax, no model, so it runs
anywhere the results were copied to. Every table goes through one renderer (`markdown_table`);
report.md and results.csv are byte-identical for the same inputs, so README tables reproduce.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import os
import re
import sys
from collections.abc import Iterable, Sequence

import numpy as np

from lcx import bootstrap, errors, protocols

SCHEMA = "lcx.eval/1"
# eval/history/: results an evaluation replaced (another checkpoint or other settings); a
# directory's results are the newest ones, so the history is read only when named.
HISTORY = "history"
KINDS = ("lengths", "tasks", "passkey")
# Keys each kind must have (beyond the common ones) for the report to render it.
COMMON_KEYS = ("schema", "kind", "run", "variant", "step", "train_len")
KIND_KEYS = {
  "lengths": ("protocol", "lengths"),
  "tasks": ("task", "train_sizes", "buckets"),
  "passkey": ("lengths", "depths", "cells"),
}
PLOTS = {
  "perplexity": "perplexity.png",
  "loss_by_position": "loss_by_position.png",
  "variants": "variants.png",
  "tasks": "tasks.png",
  "task_errors": "task_errors.png",
  "passkey": "passkey.png",
}
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


# --- Loading. ---


def check(result: dict, where: str = "result") -> None:
  """Raises ValueError naming `where` unless `result` is an lcx result the report can render."""
  if not isinstance(result, dict) or result.get("schema") != SCHEMA:
    found = result.get("schema") if isinstance(result, dict) else type(result).__name__
    raise ValueError(f"{where}: not an lcx result: schema={found!r}; expected {SCHEMA!r}")
  missing = [k for k in COMMON_KEYS if k not in result]
  if missing:
    raise ValueError(f"{where}: lcx result lacks {', '.join(missing)}")
  kind = result["kind"]
  if kind not in KINDS:
    raise errors.not_allowed(f"{where}: kind", kind, KINDS)
  missing = [k for k in KIND_KEYS[kind] if k not in result]
  if missing:
    raise ValueError(f"{where}: kind {kind!r} result lacks {', '.join(missing)}")
  if kind == "lengths":
    for n, entry in result["lengths"].items():
      if not n.isdigit() or not all(k in entry for k in ("loss", "perplexity")):
        raise ValueError(f"{where}: lengths[{n!r}] needs a decimal length with loss and perplexity")


def load(
  paths: str | os.PathLike | Sequence[str | os.PathLike], *, allow_empty: bool = False
) -> list[dict]:
  """Results from files, directories (every lcx result JSON below, recursively) and globs.

  A path that matches nothing, a named file that is not an lcx result, or (unless allow_empty)
  a directory without any is a ValueError naming the path. Directories skip other JSON (a run's
  config.json, checkpoint metadata) and replaced results (`HISTORY` folders, see `superseded`),
  but not a .json file that does not parse (a truncated result). Sorted by run, variant ("none"
  first), kind, then the rest.
  """
  if isinstance(paths, (str, os.PathLike)):
    paths = [paths]
  found: dict[str, dict] = {}  # real path -> result: a file named twice is read once
  for path in map(os.fspath, paths):
    if re.search(r"[*?[]", path):
      matches = sorted(glob.glob(path, recursive=True))
      if not matches:
        raise ValueError(f"{path}: the pattern matches no file")
    elif os.path.exists(path):
      matches = [path]
    else:
      raise ValueError(f"{path}: no such file or directory")
    for match in matches:
      if os.path.isdir(match):
        below = {os.path.realpath(f): r for f, r in _results_below(match)}
        if not below and not allow_empty:
          raise ValueError(f"{match}: no lcx result JSON (schema {SCHEMA!r}) below it")
        found.update(below)
      else:
        result = _read_json(match)
        check(result, match)
        found[os.path.realpath(match)] = result
  return [found[p] for p in sorted(found, key=lambda p: (_sort_key(found[p]), p))]


def corpus_warning(results: Sequence[dict]) -> str | None:
  """A warning when the results come from different corpora (their `corpus` fingerprints,
  e.g. stdlib built by two Python versions): their numbers do not compare. Results written
  before lcx recorded the corpus are left out."""
  runs: dict[str, set[str]] = {}
  for r in results:
    if r.get("corpus"):
      runs.setdefault(r["corpus"], set()).add(r["run"])
  if len(runs) < 2:
    return None
  listed = "; ".join(f"{c} ({', '.join(sorted(names))})" for c, names in sorted(runs.items()))
  return (
    "warning: the results compared come from different corpora, so their numbers do not "
    f"compare: {listed}"
  )


def _read_json(path: str):
  try:
    with open(path) as f:
      return json.load(f)
  except (UnicodeDecodeError, json.JSONDecodeError) as error:
    raise ValueError(f"{path}: not an lcx result: not JSON ({error})") from None


def superseded(paths: Sequence[str]) -> list[str]:
  """The replaced results (`HISTORY` folders) below the directories among `paths`: a directory
  gives the newest result of each name, and the report says what it left out."""
  out = []
  for pattern in paths:
    for path in glob.glob(pattern, recursive=True) if re.search(r"[*?[]", pattern) else [pattern]:
      for root, _, files in os.walk(path) if os.path.isdir(path) else ():
        if os.path.basename(root) == HISTORY and not os.path.samefile(root, path):
          out += [os.path.join(root, f) for f in sorted(files) if f.endswith(".json")]
  return sorted(set(out))


def _results_below(directory: str) -> Iterable[tuple[str, dict]]:
  """Every result below `directory`; other JSON is skipped, but a .json file that does not parse
  is a ValueError naming it: a result truncated by a kill or a full disk is no longer
  recognizable as one, and skipping it would drop a row from the tables without a word."""
  for root, dirs, files in os.walk(directory):
    dirs[:] = sorted(d for d in dirs if d not in (HISTORY, "checkpoints"))  # no Orbax files
    for name in sorted(files):
      if not name.endswith(".json"):
        continue
      path = os.path.join(root, name)
      try:
        result = _read_json(path)
      except ValueError as error:
        raise ValueError(
          f"{error}; a truncated result? Remove the file, or name the files to read"
        ) from None
      if isinstance(result, dict) and result.get("schema") == SCHEMA:
        check(result, path)
        yield path, result


def _sort_key(r: dict) -> tuple:
  return (
    str(r["run"]),
    r["variant"] != "none",
    str(r["variant"]),
    r["kind"],
    str(r.get("task", "")),
    _protocol_key(r),
    str(r.get("workdir", "")),
    int(r["step"]),
  )


# --- Formatting. ---


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


def _ppl(x: float) -> str:
  """Perplexity to ~3-4 significant digits: 8.35, 132.9, 12345."""
  return f"{x:.2f}" if abs(x) < 100 else f"{x:.1f}" if abs(x) < 1000 else f"{x:.0f}"


def _f3(x: float) -> str:
  return f"{x:.3f}"


def _f2(x: float) -> str:
  return f"{x:.2f}"


def _cell(value, ci, fmt, ci_fmt=None) -> str:
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


def _times(n: int, train_len: int) -> str:
  return f"{n} ({n / train_len:g}x)" if train_len else str(n)


def _protocol_key(r: dict) -> str:
  return json.dumps(r.get("protocol") or {}, sort_keys=True)


def describe_protocol(p: dict) -> str:
  """`windows protocol on stream documents, 65536 tokens per length, 95% bootstrap CI (1000)`."""
  if not p:
    return "protocol not recorded"
  text = f"{p.get('protocol', '?')} protocol on {p.get('documents', '?')} documents"
  if p.get("protocol") in protocols.PROTOCOLS:
    text += protocols.PROTOCOLS[p["protocol"]].describe(p)
  if p.get("num_tokens"):
    text += f", {p['num_tokens']} tokens per length"
  if p.get("bootstrap"):
    text += (
      f", {p.get('confidence', 0.95) * 100:g}% bootstrap CI over documents "
      f"({p['bootstrap']} resamples, seed {p.get('seed', 0)})"
    )
  return text


def _groups(results: Sequence[dict], key) -> list[list[dict]]:
  """Results split by key(result), groups in order of first appearance."""
  out: dict = {}
  for r in results:
    out.setdefault(key(r), []).append(r)
  return list(out.values())


def _span(values: Iterable) -> str:
  values = sorted(set(v for v in values if v is not None))
  return "-" if not values else str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def _lengths_results(results):
  return [r for r in results if r["kind"] == "lengths"]


def _length_group_key(r):
  return (_protocol_key(r), r["train_len"])


def length_table(results: Sequence[dict], metric: str = "perplexity", *, row_label=label) -> str:
  """One protocol group: a row per result, a column per eval length, `value [lo, hi]` cells.
  `metric`: perplexity | loss | bits_per_byte. Skipped lengths say so; reasons below."""
  fmt = _ppl if metric == "perplexity" else _f3
  train_len = results[0]["train_len"]
  lengths = sorted({int(n) for r in results for n in [*r["lengths"], *r.get("skipped", {})]})
  rows = []
  for r in results:
    row = [row_label(r)]
    for n in map(str, lengths):
      entry = r["lengths"].get(n)
      if entry is not None:
        row.append(_cell(entry.get(metric), entry.get(f"{metric}_ci"), fmt))
      else:
        row.append("skipped" if n in r.get("skipped", {}) else "-")
    rows.append(row)
  head = ["run/variant" if row_label is label else "variant"] + [
    _times(n, train_len) for n in lengths
  ]
  counts = "; ".join(
    f"{n}: {_span(r['lengths'].get(str(n), {}).get('tokens') for r in results)} tokens, "
    f"{_span(r['lengths'].get(str(n), {}).get('documents') for r in results)} documents"
    for n in lengths
  )
  skips = [
    f"- {row_label(r)} at {n}: skipped: {why}"
    for r in results
    for n, why in sorted(r.get("skipped", {}).items(), key=lambda kv: int(kv[0]))
  ]
  lines = [
    f"{describe_protocol(results[0].get('protocol'))}; train length {train_len}.",
    f"Per length: {counts}.",
    "",
    markdown_table(head, rows),
  ]
  return "\n".join(lines + ([""] + skips if skips else []))


def length_tables(results: Sequence[dict], metric: str = "perplexity") -> str:
  """(a)/(b): every "lengths" result, one table per protocol (and training length)."""
  chosen = [
    r
    for r in _lengths_results(results)
    if metric != "bits_per_byte"
    or any(e.get("bits_per_byte") is not None for e in r["lengths"].values())
  ]
  return "\n\n".join(length_table(g, metric) for g in _groups(chosen, _length_group_key))


def variant_tables(results: Sequence[dict], metric: str = "perplexity") -> str:
  """(c): for each run evaluated with more than one variant, variants x lengths."""
  out = []
  for run_results in _groups(_lengths_results(results), lambda r: r["run"]):
    if len({r["variant"] for r in run_results}) < 2:
      continue
    for group in _groups(run_results, _length_group_key):
      out.append(
        f"### {group[0]['run']}\n\n"
        + length_table(group, metric, row_label=lambda r: str(r["variant"]))
      )
  return "\n\n".join(out)


SEEDED_RUN = re.compile(r"^(?P<stem>.+)-s(?P<seed>[0-9]+)$")


def _seeded_stems(results: Sequence[dict]) -> dict[tuple[str, str], list[dict]]:
  """(stem, variant) -> the results of runs named STEM-s<seed>, where two or more runs share it."""
  by_stem: dict = {}
  for r in results:
    match = SEEDED_RUN.match(str(r["run"]))
    if match:
      by_stem.setdefault((match["stem"], str(r["variant"])), []).append(r)
  return {key: rs for key, rs in by_stem.items() if len({r["run"] for r in rs}) >= 2}


def _seeds(results: Sequence[dict]) -> str:
  """The seeds of runs named STEM-s<seed>, ascending: "0,1,2"."""
  return ",".join(sorted((SEEDED_RUN.match(r["run"])["seed"] for r in results), key=int))


def seed_tables(results: Sequence[dict], metric: str = "perplexity") -> str:
  """Runs named STEM-s<seed> that differ only in the seed: per length, the mean over seeds and
  [min, max] across them (the run-to-run spread, where the per-run CIs above are the sampling
  spread over documents). One table per protocol group; stems with one seed are left out."""
  fmt = _ppl if metric == "perplexity" else _f3
  out = []
  for group in _groups(_lengths_results(results), _length_group_key):
    by_stem = _seeded_stems(group)
    if not by_stem:
      continue
    lengths = sorted({int(n) for rs in by_stem.values() for r in rs for n in r["lengths"]})
    rows = []
    for (stem, variant), rs in by_stem.items():
      row = [f"{stem}/{variant}", _seeds(rs)]
      for n in map(str, lengths):
        values = [r["lengths"][n][metric] for r in rs if n in r["lengths"]]
        row.append(
          _cell(sum(values) / len(values), [min(values), max(values)], fmt)
          if len(values) == len(rs)
          else "-"
        )
      rows.append(row)
    train_len = group[0]["train_len"]
    out.append(
      f"{describe_protocol(group[0].get('protocol'))}; train length {train_len}. "
      f"Cells: mean over seeds [min, max across seeds].\n\n"
      + markdown_table(
        ["runs/variant", "seeds"] + [_times(n, train_len) for n in lengths],
        rows,
        align="ll" + "r" * len(lengths),
      )
    )
  return "\n\n".join(out)


def _documents(entry: dict) -> tuple | None:
  """(ids, mean loss per document, tokens per document) of a length entry, None where the
  result predates per-document losses."""
  d = entry.get("per_document")
  if not d or not d.get("ids"):
    return None
  return tuple(d["ids"]), np.asarray(d["loss"], np.float64), np.asarray(d["tokens"], np.float64)


def paired(a: dict, b: dict, protocol: dict) -> tuple[float, list[float] | None] | None:
  """(A - B, its interval) in mean loss per token, paired over the documents of two length
  entries (a seeded bootstrap: the protocol's seed and resamples); None unless both hold
  per-document losses of the same documents and tokens."""
  da, db = _documents(a), _documents(b)
  if da is None or db is None or da[0] != db[0] or not np.array_equal(da[2], db[2]):
    return None
  weights_RxD = bootstrap.resample_weights(
    len(da[0]), protocol.get("bootstrap", 1000), protocol.get("seed", 0)
  )
  return bootstrap.paired_difference(
    da[1], da[2], db[1], db[2], weights_RxD, protocol.get("confidence", bootstrap.CONFIDENCE)
  )


def paired_cell(a: dict, b: dict, protocol: dict) -> str:
  """`A - B [lo, hi]` (`paired`), `-` where the two cannot be paired."""
  got = paired(a, b, protocol)
  return "-" if got is None else _cell(*got, _signed)


def _signed(x: float) -> str:
  return f"{x:+.3f}"


def _with_documents(results: Sequence[dict]) -> list[dict]:
  return [r for r in _lengths_results(results) if any(_documents(e) for e in r["lengths"].values())]


def _paired_note(group: Sequence[dict]) -> str:
  p = group[0].get("protocol") or {}
  return (
    f"{describe_protocol(p)}; train length {group[0]['train_len']}. Cells: difference in mean "
    f"loss (nats/token; negative: lower loss) [{p.get('confidence', 0.95) * 100:g}% paired "
    f"bootstrap interval over the same documents, {p.get('bootstrap', 1000)} resamples, seed "
    f"{p.get('seed', 0)}]; - where the documents or their tokens differ."
  )


def length_pairs(results: Sequence[dict]) -> list[tuple[list[dict], str, list[int]]]:
  """Per protocol group with per-document losses: (its results holding the training length,
  the training length, the other lengths), for each length minus 1x."""
  out = []
  for group in _groups(_with_documents(results), _length_group_key):
    train = str(group[0]["train_len"])
    chosen = [r for r in group if train in r["lengths"]]
    lengths = sorted({int(n) for r in chosen for n in r["lengths"] if n != train})
    if chosen and lengths:
      out.append((chosen, train, lengths))
  return out


def baseline_pairs(
  results: Sequence[dict], baseline: str = ""
) -> list[tuple[dict, list[dict], list[int]]]:
  """Per protocol group with per-document losses: (the baseline, the other results, the
  lengths). `baseline`: a run/variant label; default each group's first result."""
  out = []
  for group in _groups(_with_documents(results), _length_group_key):
    named = [r for r in group if label(r) == baseline] if baseline else group[:1]
    if named and len(group) > 1:
      lengths = sorted({int(n) for r in group for n in r["lengths"]})
      out.append((named[0], [r for r in group if r is not named[0]], lengths))
  return out


def _pair(a: dict, b: dict, n: int, protocol: dict):
  """`paired` of two results at length n, None where either lacks it."""
  if str(n) not in a["lengths"] or str(n) not in b["lengths"]:
    return None
  return paired(a["lengths"][str(n)], b["lengths"][str(n)], protocol)


def _pair_text(got) -> str:
  return "-" if got is None else _cell(*got, _signed)


def length_pair_tables(results: Sequence[dict]) -> str:
  """Loss at each length minus loss at the training length (1x), per result, paired over the
  same documents: does the loss past L differ from L's beyond document sampling?"""
  out = []
  for chosen, train, lengths in length_pairs(results):
    rows = [
      [label(r)]
      + [
        _pair_text(
          paired(r["lengths"][str(n)], r["lengths"][train], r.get("protocol") or {})
          if str(n) in r["lengths"]
          else None
        )
        for n in lengths
      ]
      for r in chosen
    ]
    out.append(
      _paired_note(chosen)
      + f" Each length against 1x ({train}).\n\n"
      + markdown_table(["run/variant"] + [f"{_times(n, int(train))} - 1x" for n in lengths], rows)
    )
  return "\n\n".join(out)


def pair_tables(results: Sequence[dict], baseline: str = "") -> str:
  """Each result minus a baseline result (`baseline_pairs`), per length, paired over the same
  documents. One table per protocol group."""
  out = []
  for base, others, lengths in baseline_pairs(results, baseline):
    protocol = base.get("protocol") or {}
    rows = [[label(r)] + [_pair_text(_pair(r, base, n, protocol)) for n in lengths] for r in others]
    out.append(
      _paired_note([base])
      + f" Each result minus {label(base)}.\n\n"
      + markdown_table(
        [f"run/variant - {label(base)}"] + [_times(n, base["train_len"]) for n in lengths], rows
      )
    )
  return "\n\n".join(out)


def _within(diff_xN: np.ndarray, lengths_N: Sequence[int], tolerance: float):
  """The longest of `lengths_N` (ascending, from L) before the first difference over
  `tolerance`, along the last axis."""
  over_xN = diff_xN > tolerance
  first_over = np.where(over_xN.any(-1), over_xN.argmax(-1), len(lengths_N))
  return np.asarray(lengths_N)[np.maximum(first_over - 1, 0)]


def effective_length(r: dict, tolerance: float) -> tuple[int, list[int] | None] | None:
  """(the longest evaluated length N >= L up to which the loss at every length stays within
  `tolerance` nats/token of the loss at L, its interval), None without L's loss.

  The interval: the same statistic on each resample of the paired per-document bootstrap (the
  documents resampled once for every length); None where the lengths do not hold per-document
  losses of the same documents and tokens."""
  train = r["train_len"]
  if str(train) not in r["lengths"]:
    return None
  lengths_N = sorted(int(n) for n in r["lengths"] if int(n) >= train)
  entries = [r["lengths"][str(n)] for n in lengths_N]
  diff_N = np.array([e["loss"] - entries[0]["loss"] for e in entries])
  point = int(_within(diff_N, lengths_N, tolerance))
  docs = [_documents(e) for e in entries]
  if any(d is None or d[0] != docs[0][0] or not np.array_equal(d[2], docs[0][2]) for d in docs):
    return point, None
  p = r.get("protocol") or {}
  weights_RxD = bootstrap.resample_weights(
    len(docs[0][0]), p.get("bootstrap", 1000), p.get("seed", 0)
  )
  if not len(weights_RxD):
    return point, None
  _, base_D, tokens_D = docs[0]
  diff_RxN = np.stack(
    [bootstrap.difference_resamples(d[1], d[2], base_D, tokens_D, weights_RxD) for d in docs], -1
  )
  length_R = _within(diff_RxN, lengths_N, tolerance)
  tail = (1 - p.get("confidence", bootstrap.CONFIDENCE)) / 2
  low, high = (
    np.quantile(length_R, tail, method="lower"),
    np.quantile(length_R, 1 - tail, method="higher"),
  )
  return point, [int(low), int(high)]


def effective_length_tables(results: Sequence[dict], tolerance: float | None) -> str:
  """Per protocol group: each result's effective context length (`effective_length`); empty
  unless a tolerance is given (`--effective_tolerance`)."""
  if tolerance is None:
    return ""
  out = []
  for group in _groups(_lengths_results(results), _length_group_key):
    rows = []
    for r in group:
      got = effective_length(r, tolerance)
      if got is None:
        rows.append([label(r), "-", "-"])
        continue
      n, ci = got
      interval = "-" if ci is None else f"[{ci[0]}, {ci[1]}]"
      rows.append([label(r), _times(n, r["train_len"]), interval])
    p = group[0].get("protocol") or {}
    out.append(
      f"{describe_protocol(p)}; train length {group[0]['train_len']}. The longest evaluated "
      f"length up to which the loss stays within {tolerance:g} nats/token of the loss at the "
      f"training length (at every length from L to it); interval: "
      f"{p.get('confidence', 0.95) * 100:g}% over the paired per-document bootstrap "
      f"({p.get('bootstrap', 1000)} resamples, seed {p.get('seed', 0)}), - without "
      "per-document losses.\n\n"
      + markdown_table(["run/variant", "effective length", "interval"], rows)
    )
  return "\n\n".join(out)


def longppl_tables(results: Sequence[dict]) -> str:
  """LongPPL (eval.longppl) per result and length: `value [lo, hi]` and its key tokens; only
  results that computed it."""
  out = []
  chosen = [
    r for r in _lengths_results(results) if any("longppl" in e for e in r["lengths"].values())
  ]
  for group in _groups(chosen, _length_group_key):
    lengths = sorted({int(n) for r in group for n in r["lengths"]})
    rows = []
    for r in group:
      row = [label(r)]
      for n in lengths:
        got = r["lengths"].get(str(n), {}).get("longppl")
        if got is None or got["longppl"] is None:
          row.append("-")
        else:
          row.append(f"{_cell(got['longppl'], got['longppl_ci'], _ppl)} ({got['key_tokens']})")
      rows.append(row)
    first = next(e["longppl"] for e in group[0]["lengths"].values() if "longppl" in e)
    out.append(
      f"{describe_protocol(group[0].get('protocol'))}; train length {group[0]['train_len']}. "
      f"Perplexity on the key tokens (in parentheses: how many): loss with at most "
      f"{first['short']} tokens of context minus loss with the window > {first['alpha']:g} "
      f"nats, and loss with the window < {-first['beta']:g} nats (Fang et al. 2025); - where "
      "no token is key (lengths up to the short context have none).\n\n"
      + markdown_table(["run/variant"] + [_times(n, group[0]["train_len"]) for n in lengths], rows)
    )
  return "\n\n".join(out)


def baselines(results: Sequence[dict]) -> list[str]:
  """The labels `pair_tables` accepts as a baseline: results with per-document losses."""
  return sorted({label(r) for r in _with_documents(results)})


def _longest(r: dict) -> str:
  return max(r["lengths"], key=int)


def position_tables(results: Sequence[dict]) -> str:
  """Loss per position bucket at each result's longest length: where past-L context hurts."""
  out = []
  chosen = [
    r
    for r in _lengths_results(results)
    if r["lengths"] and r["lengths"][_longest(r)].get("loss_by_position")
  ]
  for group in _groups(chosen, _length_group_key):
    spans = sorted(
      {(b["start"], b["end"]) for r in group for b in r["lengths"][_longest(r)]["loss_by_position"]}
    )
    rows = []
    for r in group:
      by_span = {(b["start"], b["end"]): b for b in r["lengths"][_longest(r)]["loss_by_position"]}
      rows.append(
        [label(r), _longest(r)]
        + [
          _cell(by_span[s]["loss"], by_span[s].get("loss_ci"), _f3) if s in by_span else "-"
          for s in spans
        ]
      )
    head = ["run/variant", "length"] + [f"[{a}, {b})" for a, b in spans]
    out.append(
      f"{describe_protocol(group[0].get('protocol'))}; train length "
      f"{group[0]['train_len']}. Loss (nats/token) by position p (tokens of context "
      f"before the target), at each result's longest length.\n\n" + markdown_table(head, rows)
    )
  return "\n\n".join(out)


def _bucket_order(name: str):
  lo, _, hi = name.partition("-")
  return (int(lo), int(hi)) if lo.isdigit() and hi.isdigit() else (1 << 62, 0, name)


def _accuracy_cell(b: dict) -> str:
  if b.get("skipped"):
    return "skipped"
  return _cell(b.get("accuracy"), b.get("accuracy_ci"), _f3, _f2)


def task_tables(results: Sequence[dict]) -> str:
  """(d): exact match per size bucket, a row per result, one table per task; per needle depth
  (depth x bucket, one table per result) for passkey-style tasks."""
  out = []
  chosen = [r for r in results if r["kind"] == "tasks"]
  for group in _groups(chosen, lambda r: (r["task"], tuple(r["train_sizes"]))):
    buckets = sorted({b for r in group for b in r["buckets"]}, key=_bucket_order)
    rows = [
      [label(r)] + [_accuracy_cell(r["buckets"][b]) if b in r["buckets"] else "-" for b in buckets]
      for r in group
    ]
    low, high = group[0]["train_sizes"]
    examples = "; ".join(
      f"{b}: {_span(r['buckets'].get(b, {}).get('examples') for r in group)}" for b in buckets
    )
    skips = [
      f"- {label(r)} sizes {b}: skipped: {r['buckets'][b]['skipped']}"
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
          markdown_table(["run/variant"] + buckets, rows),
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
          f"{label(r)}: {r['task']} exact match by needle depth and size\n\n"
          + markdown_table(["depth"] + buckets, rows)
        )
  return "\n\n".join(out)


def task_error_tables(results: Sequence[dict]) -> str:
  """Per task: the error rate on the scored answer tokens (wrong / all, pooled over examples:
  flip-flop's read bits, MQAR's values) per size bucket; results recorded before it have none."""
  out = []
  chosen = [
    r
    for r in results
    if r["kind"] == "tasks" and any("error_rate" in b for b in r["buckets"].values())
  ]
  for group in _groups(chosen, lambda r: (r["task"], tuple(r["train_sizes"]))):
    buckets = sorted({b for r in group for b in r["buckets"]}, key=_bucket_order)
    rows = [
      [label(r)]
      + [
        _cell(r["buckets"][b].get("error_rate"), r["buckets"][b].get("error_rate_ci"), _f3)
        if r["buckets"].get(b, {}).get("error_rate") is not None
        else "-"
        for b in buckets
      ]
      for r in group
    ]
    low, high = group[0]["train_sizes"]
    out.append(
      f"Task {group[0]['task']}: error rate on the scored answer tokens by task size, 95% CI; "
      f"trained on sizes {low}-{high}.\n\n" + markdown_table(["run/variant"] + buckets, rows)
    )
  return "\n\n".join(out)


TASK_METRICS = {"accuracy": "exact match", "error_rate": "error rate on the scored answer tokens"}


def task_seed_tables(results: Sequence[dict], metric: str = "accuracy") -> str:
  """Task runs named STEM-s<seed> that differ only in the seed: per size bucket, the mean of
  `metric` (a TASK_METRICS key) over seeds [min, max across seeds]. One table per task; stems
  with one seed, and results that do not record `metric`, are left out."""
  out = []
  chosen = [
    r for r in results if r["kind"] == "tasks" and any(metric in b for b in r["buckets"].values())
  ]
  for group in _groups(chosen, lambda r: (r["task"], tuple(r["train_sizes"]))):
    by_stem = _seeded_stems(group)
    if not by_stem:
      continue
    buckets = sorted(
      {b for rs in by_stem.values() for r in rs for b in r["buckets"]}, key=_bucket_order
    )
    rows = []
    for (stem, variant), rs in by_stem.items():
      row = [f"{stem}/{variant}", _seeds(rs)]
      for b in buckets:
        values = [r["buckets"].get(b, {}).get(metric) for r in rs]
        row.append(
          "-"
          if None in values
          else _cell(sum(values) / len(values), [min(values), max(values)], _f3)
        )
      rows.append(row)
    low, high = group[0]["train_sizes"]
    out.append(
      f"Task {group[0]['task']}: {TASK_METRICS[metric]} by task size; trained on sizes "
      f"{low}-{high}. Cells: mean over seeds [min, max across seeds].\n\n"
      + markdown_table(["runs/variant", "seeds"] + buckets, rows, align="ll" + "r" * len(buckets))
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
  for r in results:
    if r["kind"] == "tasks" and extrapolation_accuracy(r) is not None:
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
    [s, f"{mrr.get(s, 0.0):.3f}"] + [_f3(mean[t, s]) if (t, s) in mean else "-" for t in tasks]
    for s in order
  ]
  return (
    "Mean reciprocal rank across tasks of each system's exact match on sizes past "
    "training (mean over seeds and over those size buckets), and that exact match per "
    "task.\n\n" + markdown_table(["system", "MRR"] + tasks, rows)
  )


def passkey_tables(results: Sequence[dict]) -> str:
  """(e): passkey retrieval accuracy, length x depth, one table per result."""
  out = []
  for r in (r for r in results if r["kind"] == "passkey"):
    depths = sorted({float(d) for d in r["depths"]})
    lengths = sorted({int(n) for n in r["lengths"]})
    cells = {(int(c["length"]), float(c["depth"])): c for c in r["cells"]}
    rows = [
      [_times(n, r["train_len"])]
      + [_f3(cells[n, d]["accuracy"]) if (n, d) in cells else "-" for d in depths]
      for n in lengths
    ]
    examples = _span(c.get("examples") for c in r["cells"])
    out.append(
      f"{label(r)}: passkey retrieval accuracy by length and needle depth; train "
      f"length {r['train_len']}; {examples} examples per cell.\n\n"
      + markdown_table(["length"] + [f"depth {d:g}" for d in depths], rows)
    )
  return "\n\n".join(out)


def sections(
  results: Sequence[dict], baseline: str = "", tolerance: float | None = None
) -> list[tuple[str, str, str | None]]:
  """(heading, markdown, plot key) for every table that has data, in report order. The paired
  tables need per-document losses, so older results leave them out. `baseline`: see
  `pair_tables`."""
  candidates = [
    ("Perplexity by evaluation length", length_tables(results), "perplexity"),
    ("Bits per byte by evaluation length", length_tables(results, "bits_per_byte"), None),
    ("Paired: each length against 1x", length_pair_tables(results), None),
    ("Paired: each result against a baseline", pair_tables(results, baseline), None),
    ("Effective context length", effective_length_tables(results, tolerance), None),
    ("LongPPL by evaluation length", longppl_tables(results), None),
    ("Perplexity across seeds", seed_tables(results), None),
    ("Variants by evaluation length, per run", variant_tables(results), "variants"),
    ("Loss by position", position_tables(results), "loss_by_position"),
    ("Task exact match by size", task_tables(results), "tasks"),
    ("Task error rate on scored tokens", task_error_tables(results), "task_errors"),
    ("Task exact match across seeds", task_seed_tables(results), None),
    ("Task error rate across seeds", task_seed_tables(results, "error_rate"), None),
    ("Ranking across tasks", rank_tables(results), None),
    ("Passkey retrieval", passkey_tables(results), "passkey"),
  ]
  return [(h, body, plot) for h, body, plot in candidates if body]


def format_tables(
  results: Sequence[dict], baseline: str = "", tolerance: float | None = None
) -> str:
  """All tables as markdown: what the CLI prints and evaluation shows after a run."""
  return "\n\n".join(f"## {h}\n\n{body}" for h, body, _ in sections(results, baseline, tolerance))


def _short_protocol(r: dict) -> str:
  """`windows/stream`, `sliding/long stride 256`, `task copy`, `passkey`."""
  if r["kind"] != "lengths":
    return f"task {r['task']}" if r["kind"] == "tasks" else "passkey"
  p = r.get("protocol") or {}
  extra = (
    f" stride {p.get('stride')}"
    if p.get("protocol") == "sliding"
    else f" last {p.get('last_k')}"
    if p.get("protocol") == "last_k"
    else ""
  )
  return f"{p.get('protocol', '?')}/{p.get('documents', '?')}{extra}"


def _index_table(results: Sequence[dict]) -> str:
  rows = [
    [
      r["run"],
      str(r["variant"]),
      r["kind"],
      str(r["step"]),
      str(r.get("scheme", "-")),
      str(r.get("remap", "-")),
      str(r["train_len"]),
      _short_protocol(r),
    ]
    for r in results
  ]
  return markdown_table(
    ["run", "variant", "kind", "step", "scheme", "remap", "train length", "protocol"],
    rows,
    align="lllrllrl",
  )


# --- CSV. ---


def _csv_base(r: dict) -> dict:
  return {
    "run": r["run"],
    "variant": r["variant"],
    "step": r["step"],
    "kind": r["kind"],
    "scheme": r.get("scheme", ""),
    "train_len": r["train_len"],
  }


def paired_csv_rows(results: Sequence[dict], baseline: str = "") -> list[dict]:
  """The paired tables' numbers: metric loss_minus_1x (each length minus the training length)
  and loss_minus_baseline (note: which baseline), with their paired intervals."""
  out = []
  for chosen, train, lengths in length_pairs(results):
    for r in chosen:
      for n in lengths:
        got = str(n) in r["lengths"] and paired(
          r["lengths"][str(n)], r["lengths"][train], r.get("protocol") or {}
        )
        if got:
          out.append(_row(_csv_base(r), length=n, metric="loss_minus_1x", value=got[0], ci=got[1]))
  for base, others, lengths in baseline_pairs(results, baseline):
    for r in others:
      for n in lengths:
        got = _pair(r, base, n, base.get("protocol") or {})
        if got:
          out.append(
            _row(
              _csv_base(r),
              length=n,
              metric="loss_minus_baseline",
              value=got[0],
              ci=got[1],
              note=f"minus {label(base)}",
            )
          )
  return out


def csv_rows(results: Sequence[dict], baseline: str = "") -> list[dict]:
  """Tidy long format: one row per result x measurement (length, position bucket, size bucket,
  depth, passkey cell) x metric, then the paired differences (`paired_csv_rows`); unused
  columns empty."""
  out = []
  for r in results:
    base = _csv_base(r)
    if r["kind"] == "lengths":
      p = r.get("protocol") or {}
      base.update(protocol=p.get("protocol", ""), documents=p.get("documents", ""))
      for n in sorted(r["lengths"], key=int):
        e = r["lengths"][n]
        counts = {"tokens": e.get("tokens"), "num_documents": e.get("documents")}
        for metric in ("loss", "perplexity", "bits_per_byte"):
          if e.get(metric) is not None:
            out.append(
              _row(
                base, length=n, metric=metric, value=e[metric], ci=e.get(f"{metric}_ci"), **counts
              )
            )
        for b in e.get("loss_by_position", []):
          out.append(
            _row(
              base,
              length=n,
              position_start=b["start"],
              position_end=b["end"],
              metric="loss_by_position",
              value=b["loss"],
              ci=b.get("loss_ci"),
              tokens=b.get("tokens"),
            )
          )
      for n, why in sorted(r.get("skipped", {}).items(), key=lambda kv: int(kv[0])):
        out.append(_row(base, length=n, metric="skipped", note=why))
    elif r["kind"] == "tasks":
      base["task"] = r["task"]
      cuts = [("", r["buckets"])] + [
        (d, r["depths"][d]) for d in sorted(r.get("depths") or {}, key=float)
      ]
      for depth, buckets in cuts:
        for name in sorted(buckets, key=_bucket_order):
          b = buckets[name]
          where = dict(bucket=name, depth=depth, examples=b.get("examples"))
          if b.get("skipped"):
            out.append(_row(base, metric="skipped", note=b["skipped"], **where))
            continue
          out.append(
            _row(base, metric="accuracy", value=b.get("accuracy"), ci=b.get("accuracy_ci"), **where)
          )
          if b.get("token_accuracy") is not None:
            out.append(_row(base, metric="token_accuracy", value=b["token_accuracy"], **where))
    else:
      for c in sorted(r["cells"], key=lambda c: (int(c["length"]), float(c["depth"]))):
        out.append(
          _row(
            base,
            length=c["length"],
            depth=c["depth"],
            metric="accuracy",
            value=c["accuracy"],
            examples=c.get("examples"),
          )
        )
  return out + paired_csv_rows(results, baseline)


def _row(base: dict, *, ci=None, **fields) -> dict:
  row = dict.fromkeys(CSV_COLUMNS, "")
  row.update(base)
  row.update({k: v for k, v in fields.items() if v is not None})
  if ci and ci[0] is not None:
    row["ci_lo"], row["ci_hi"] = ci
  return row


def format_csv(results: Sequence[dict], baseline: str = "") -> str:
  buffer = io.StringIO()
  writer = csv.DictWriter(buffer, CSV_COLUMNS, lineterminator="\n")
  writer.writeheader()
  writer.writerows(csv_rows(results, baseline))
  return buffer.getvalue()


# --- Plots. ---


def _pyplot():
  import matplotlib  # only the plots need it; tables and CSV do not

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  return plt


MANY_LINES = 10  # more lines than this: 20 colors x line styles, legend outside the axes
MANY_BANDS = 4  # more variants than this in a panel: one CI band (the first's), legend outside


def _subplots(n: int, width: float = 6.0, height: float = 4.0, cols: int = 2):
  plt = _pyplot()
  cols = min(n, cols)
  rows = -(-n // cols)
  fig, axes = plt.subplots(
    rows, cols, figsize=(width * cols, height * rows), dpi=110, squeeze=False
  )
  for ax in axes.flat[n:]:
    ax.set_visible(False)
  return fig, list(axes.flat[:n])


def _line_panels(groups):
  """A panel per group of lines: two columns, or past MANY_LINES one wider column tall enough
  for the legend outside the axes."""
  most = max(map(len, groups))
  many = most > MANY_LINES
  height = max(4.0, 0.18 * (most + 1))  # room for an outside legend
  return _subplots(len(groups), width=8.0 if many else 6.0, height=height, cols=1 if many else 2)


def _band_alpha(count: int) -> float:
  """CI band opacity: many overlapping bands turn to mud."""
  return 0.2 if count <= MANY_LINES else 0.06


def _save(fig, path: str) -> str:
  fig.tight_layout()
  fig.savefig(path, metadata={"Software": None}, bbox_inches="tight")  # keeps outside legends
  _pyplot().close(fig)
  return path


def _mark_train_lengths(ax, train_lens) -> None:
  for i, n in enumerate(sorted(set(train_lens))):
    ax.axvline(
      n, color="gray", linestyle="--", linewidth=1, label=f"train length {n}" if i < 3 else None
    )


def _length_axes(ax, lengths, ylabel: str, values, legend_outside: bool = False) -> None:
  ax.set_xscale("log", base=2)
  ax.set_xticks(lengths, [str(n) for n in lengths])
  ax.minorticks_off()
  values = [v for v in values if v and v > 0]
  if values and max(values) / min(values) > 20:  # a blown-up scheme would flatten the rest
    from matplotlib import ticker

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
  ax.set_xlabel("evaluation length (tokens)")
  ax.set_ylabel(ylabel)
  ax.grid(True, alpha=0.3)
  if legend_outside or len(ax.get_lines()) > MANY_LINES:
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
  else:
    ax.legend(fontsize=7)


def _line_style(i: int, count: int) -> dict:
  """Matplotlib's 10 default colors up to MANY_LINES lines; past that tab20's 20 colors, each
  round of 20 in the next line style, so no two lines of a panel look alike."""
  if count <= MANY_LINES:
    return {}
  color = _pyplot().get_cmap("tab20")(i % 20)
  return {"color": color, "linestyle": ("-", "--", ":", "-.")[(i // 20) % 4]}


def _plot_metric_lines(ax, results, metric: str, row_label, crowded: bool = False) -> None:
  """One line per result over its lengths, with its CI band where recorded (crowded: only the
  first result's band, the reference the others are read against, and the legend outside)."""
  lengths, values = set(), []
  band = _band_alpha(len(results))
  for i, r in enumerate(results):
    ns = sorted(int(n) for n in r["lengths"] if r["lengths"][n].get(metric) is not None)
    ys = [r["lengths"][str(n)][metric] for n in ns]
    (line,) = ax.plot(
      ns, ys, marker="o", markersize=3, label=row_label(r), **_line_style(i, len(results))
    )
    cis = [r["lengths"][str(n)].get(f"{metric}_ci") for n in ns]
    if ns and all(ci and ci[0] is not None for ci in cis) and not (crowded and i):
      ax.fill_between(
        ns,
        [c[0] for c in cis],
        [c[1] for c in cis],
        color=line.get_color(),
        alpha=band,
        linewidth=0,
      )
      values += [c[0] for c in cis] + [c[1] for c in cis]
    lengths.update(ns)
    values += ys
  _mark_train_lengths(ax, [r["train_len"] for r in results if r.get("train_len")])
  _length_axes(
    ax,
    sorted(lengths),
    metric.replace("_", " ") + " per token" if metric == "perplexity" else metric.replace("_", " "),
    values,
    legend_outside=crowded,
  )


def plot_perplexity(results: Sequence[dict], path: str, title: str = "") -> str | None:
  """Perplexity against eval length (log2 x), a line and 95% CI band per result, training
  length dashed; one panel per protocol."""
  groups = _groups(_lengths_results(results), _length_group_key)
  if not groups:
    return None
  fig, axes = _line_panels(groups)
  for ax, group in zip(axes, groups):
    _plot_metric_lines(ax, group, "perplexity", label)
    ax.set_title(title or f"perplexity by length, {_short_protocol(group[0])} (95% CI)", fontsize=9)
  return _save(fig, path)


def plot_length_sweep(results_by_name: dict[str, dict], path: str, title: str = "") -> str:
  """{name: lengths result} as one perplexity plot (the quickstart's two runs); older results
  without run/variant/CI fields plot too."""
  results = [
    {"kind": "lengths", **r, "run": name, "variant": ""} for name, r in results_by_name.items()
  ]
  fig, (ax,) = _subplots(1)
  _plot_metric_lines(ax, results, "perplexity", label)
  ax.set_title(title or "perplexity by evaluation length", fontsize=9)
  return _save(fig, path)


def plot_variants(results: Sequence[dict], path: str) -> str | None:
  """Per run with several variants: perplexity against length, one line per variant."""
  runs = [
    g
    for g in _groups(_lengths_results(results), lambda r: (r["run"], _protocol_key(r)))
    if len({r["variant"] for r in g}) > 1
  ]
  if not runs:
    return None
  crowded = max(map(len, runs)) > MANY_BANDS  # one column: the legends go right of the axes
  fig, axes = _subplots(len(runs), width=8.0 if crowded else 6.0, cols=1 if crowded else 2)
  for ax, group in zip(axes, runs):
    _plot_metric_lines(ax, group, "perplexity", lambda r: str(r["variant"]), crowded)
    band = f"95% CI of {group[0]['variant']}" if crowded else "95% CI"
    ax.set_title(f"{group[0]['run']}: variants, {_short_protocol(group[0])} ({band})", fontsize=9)
  return _save(fig, path)


def plot_loss_by_position(results: Sequence[dict], path: str) -> str | None:
  """Loss per position bucket at each result's longest length, a step line per result (log2
  x: bucket [0, L) drawn from 1), CI band, training length dashed; one panel per protocol."""
  chosen = [
    r
    for r in _lengths_results(results)  # a single bucket (last_k) is no curve
    if r["lengths"] and len(r["lengths"][_longest(r)].get("loss_by_position") or []) > 1
  ]
  groups = _groups(chosen, _length_group_key)
  if not groups:
    return None
  fig, axes = _line_panels(groups)
  for ax, group in zip(axes, groups):
    edges_all, values = set(), []
    band = _band_alpha(len(group))
    for i, r in enumerate(group):
      buckets = sorted(r["lengths"][_longest(r)]["loss_by_position"], key=lambda b: b["start"])
      edges = [max(1, buckets[0]["start"])] + [b["end"] for b in buckets]
      ys = [b["loss"] for b in buckets]
      (line,) = ax.step(
        edges,
        ys + ys[-1:],
        where="post",
        label=f"{label(r)} @{_longest(r)}",
        **_line_style(i, len(group)),
      )
      if all(b.get("loss_ci") for b in buckets):
        ax.fill_between(
          edges,
          [b["loss_ci"][0] for b in buckets] + [buckets[-1]["loss_ci"][0]],
          [b["loss_ci"][1] for b in buckets] + [buckets[-1]["loss_ci"][1]],
          step="post",
          color=line.get_color(),
          alpha=band,
          linewidth=0,
        )
      edges_all.update(edges)
      values += ys
    _mark_train_lengths(ax, [r["train_len"] for r in group])
    top = max(edges_all)  # ticks at powers of two: every bucket edge would overprint
    ticks = [2**k for k in range(top.bit_length()) if 2**k >= min(edges_all)] + [top]
    _length_axes(ax, sorted(set(ticks)), "loss (nats/token)", values)
    ax.set_xlabel("position (tokens of context before the target)")
    ax.set_title(f"loss by position at the longest length, {_short_protocol(group[0])}", fontsize=9)
  return _save(fig, path)


def plot_tasks(results: Sequence[dict], path: str) -> str | None:
  """Exact match against task-size bucket, a line with 95% CI bars per result, the last
  trained bucket dashed; one panel per task."""
  groups = _groups(
    [r for r in results if r["kind"] == "tasks"], lambda r: (r["task"], tuple(r["train_sizes"]))
  )
  if not groups:
    return None
  fig, axes = _subplots(len(groups))
  for ax, group in zip(axes, groups):
    buckets = sorted({b for r in group for b in r["buckets"]}, key=_bucket_order)
    for r in group:
      xs, ys, lo, hi = [], [], [], []
      for i, name in enumerate(buckets):
        b = r["buckets"].get(name, {})
        if b.get("accuracy") is None:
          continue
        ci = b.get("accuracy_ci") or [b["accuracy"]] * 2
        xs.append(i)
        ys.append(b["accuracy"])
        lo.append(b["accuracy"] - ci[0])
        hi.append(ci[1] - b["accuracy"])
      ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", markersize=3, capsize=3, label=label(r))
    trained = [
      i for i, name in enumerate(buckets) if _bucket_order(name)[1] <= group[0]["train_sizes"][1]
    ]
    if trained:
      ax.axvline(
        trained[-1] + 0.5, color="gray", linestyle="--", linewidth=1, label="trained sizes end"
      )
    for i, name in enumerate(buckets):
      if any(r["buckets"].get(name, {}).get("skipped") for r in group):
        ax.text(i, 0.02, "skipped", ha="center", fontsize=7, color="gray")
    ax.set_xticks(range(len(buckets)), buckets, rotation=30, fontsize=7)
    ax.set_xlim(-0.5, len(buckets) - 0.5)
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("task size bucket")
    ax.set_ylabel("exact match")
    ax.set_title(f"task {group[0]['task']}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
  return _save(fig, path)


def plot_task_errors(results: Sequence[dict], path: str) -> str | None:
  """Error rate on the scored tokens at the trained sizes, one column per task (flip-flop's test
  mixes), a color per run stem (runs named STEM-s<seed>: one dot with 95% CI bars per seed, a
  bar at their mean), so seeds' spread and each seed's interval show side by side."""
  points = {}  # (task, stem) -> [(error, ci)]
  for r in (r for r in results if r["kind"] == "tasks"):
    trained = r["buckets"].get("-".join(map(str, r["train_sizes"]))) or {}
    if trained.get("error_rate") is None:
      continue
    match = SEEDED_RUN.match(str(r["run"]))
    stem = match["stem"] if match else str(r["run"])
    points.setdefault((r["task"], stem), []).append(
      (trained["error_rate"], trained["error_rate_ci"])
    )
  if not points:
    return None
  tasks_ = sorted({t for t, _ in points})
  stems = list(dict.fromkeys(s for _, s in points))
  fig, (ax,) = _subplots(1, width=max(6.0, 1.2 * len(tasks_) * max(1, len(stems)) ** 0.5))
  width = 0.8 / len(stems)
  for j, stem in enumerate(stems):
    color = f"C{j % 10}"
    for i, task in enumerate(tasks_):
      values = points.get((task, stem), [])
      x = i - 0.4 + width * (j + 0.5)
      for k, (value, ci) in enumerate(values):
        ci = ci or [value, value]
        ax.errorbar(
          x + width * 0.6 * (k / max(1, len(values) - 1) - 0.5) * (len(values) > 1),
          value,
          yerr=[[value - ci[0]], [ci[1] - value]],
          fmt="o",
          markersize=3,
          capsize=2,
          color=color,
        )
      if values:
        mean = sum(v for v, _ in values) / len(values)
        ax.hlines(mean, x - width * 0.45, x + width * 0.45, color=color, linewidth=2)
    ax.plot([], [], "o-", color=color, label=stem)
  ax.set_xticks(range(len(tasks_)), tasks_, fontsize=8)
  ax.set_xlim(-0.5, len(tasks_) - 0.5)
  ax.set_ylim(bottom=0)
  ax.set_ylabel("error rate on scored tokens")
  ax.set_title(
    "error rate at the trained sizes: dots are seeds (95% CI), bars their mean", fontsize=9
  )
  ax.grid(True, axis="y", alpha=0.3)
  ax.legend(fontsize=7)
  return _save(fig, path)


def plot_passkey(results: Sequence[dict], path: str) -> str | None:
  """Passkey accuracy heatmaps, length (rows) x needle depth (columns), one per result."""
  chosen = [r for r in results if r["kind"] == "passkey"]
  if not chosen:
    return None
  fig, axes = _subplots(len(chosen), width=5.0, height=4.0)
  for ax, r in zip(axes, chosen):
    depths = sorted({float(d) for d in r["depths"]})
    lengths = sorted({int(n) for n in r["lengths"]})
    cells = {(int(c["length"]), float(c["depth"])): c["accuracy"] for c in r["cells"]}
    grid = [[cells.get((n, d), float("nan")) for d in depths] for n in lengths]
    image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
    for i, row in enumerate(grid):
      for j, v in enumerate(row):
        if v == v:
          ax.text(
            j,
            i,
            f"{v:.2f}",
            ha="center",
            va="center",
            fontsize=7,
            color="white" if v < 0.6 else "black",
          )
    ax.set_xticks(range(len(depths)), [f"{d:g}" for d in depths])
    ax.set_yticks(range(len(lengths)), [_times(n, r["train_len"]) for n in lengths])
    ax.set_xlabel("needle depth")
    ax.set_ylabel("length")
    ax.set_title(f"{label(r)}: passkey accuracy", fontsize=9)
    fig.colorbar(image, ax=ax)
  return _save(fig, path)


PLOTTERS = {
  "perplexity": plot_perplexity,
  "loss_by_position": plot_loss_by_position,
  "variants": plot_variants,
  "tasks": plot_tasks,
  "task_errors": plot_task_errors,
  "passkey": plot_passkey,
}


# --- Writing. ---


def format_report(
  results: Sequence[dict],
  title: str,
  plots: dict[str, str],
  baseline: str = "",
  tolerance: float | None = None,
) -> str:
  """report.md: title, the tables with links to their plots, and what each result is."""
  parts = [
    f"# {title}",
    "",
    f"{len(results)} results (schema `{SCHEMA}`), rendered by `python -m lcx.report`. "
    "Cells: value [95% CI].",
  ]
  for heading, body, plot in sections(results, baseline, tolerance):
    parts += ["", f"## {heading}", "", body]
    if plot in plots:
      parts += ["", f"![{plot.replace('_', ' ')}]({os.path.basename(plots[plot])})"]
  if not results:
    parts += ["", "No results yet."]
  else:
    parts += ["", "## Results", "", _index_table(results)]
  return "\n".join(parts) + "\n"


def write(
  results: Sequence[dict],
  out_dir: str,
  title: str = "lcx report",
  baseline: str = "",
  tolerance: float | None = None,
) -> dict[str, str]:
  """Writes out_dir/report.md, results.csv and the plots that have data; returns
  {"report": path, "csv": path, plot key: path, ...}."""
  for i, r in enumerate(results):
    check(r, f"results[{i}]")
  os.makedirs(out_dir, exist_ok=True)
  paths = {}
  for key, plotter in PLOTTERS.items():
    path = plotter(results, os.path.join(out_dir, PLOTS[key]))
    if path:
      paths[key] = path
  report = os.path.join(out_dir, "report.md")
  _write_text(report, format_report(results, title, paths, baseline, tolerance))
  table = os.path.join(out_dir, "results.csv")
  _write_text(table, format_csv(results, baseline))
  return {"report": report, "csv": table, **paths}


def _write_text(path: str, text: str) -> None:
  with open(path + ".tmp", "w", newline="") as f:
    f.write(text)
  os.replace(path + ".tmp", path)


# --- Command line. ---


def main(argv):
  from absl import flags

  from lcx import cli

  paths = argv[1:]
  if not paths:
    cli.fail("give at least one PATH: a result JSON, a directory or a glob")
  out = flags.FLAGS.out
  if os.path.exists(out) and not os.path.isdir(out):
    cli.fail(f"--out={out}: exists and is not a directory")
  try:
    results = load(paths)
  except ValueError as error:
    cli.fail(str(error))
  baseline = flags.FLAGS.baseline
  if baseline and baseline not in baselines(results):
    cli.fail(str(errors.not_allowed("--baseline", baseline, baselines(results) or ["(none)"])))
  tolerance = flags.FLAGS.effective_tolerance
  if tolerance is not None and not tolerance >= 0:
    cli.fail(str(errors.not_allowed("--effective_tolerance", tolerance, ">= 0 (nats/token)")))
  older = superseded(paths)
  if older:
    print(
      f"[report] read the newest result of each name (eval/NAME.json); left out {len(older)} "
      f"replaced ones in {HISTORY}/ folders (name such a file to read it): " + ", ".join(older),
      file=sys.stderr,
      flush=True,
    )
  warning = corpus_warning(results)
  if warning:
    print(warning, file=sys.stderr, flush=True)
  print(format_tables(results, baseline, tolerance), flush=True)
  written = write(results, out, flags.FLAGS.title, baseline, tolerance)
  print("\nwrote:\n" + "\n".join(f"  {p}" for p in written.values()), flush=True)


if __name__ == "__main__":
  from absl import app, flags

  from lcx import cli

  flags.DEFINE_string("out", None, "Directory for report.md, results.csv and the plots.")
  flags.DEFINE_string("title", "lcx report", "Title of report.md.")
  flags.DEFINE_string(
    "baseline", "", "run/variant each result is paired against (default: each group's first)."
  )
  flags.DEFINE_float(
    "effective_tolerance",
    None,
    "Adds the effective context length table: the longest length whose loss stays within this "
    "many nats/token of the loss at the training length.",
  )
  flags.mark_flag_as_required("out")
  app.run(main, flags_parser=cli.parse_flags)
