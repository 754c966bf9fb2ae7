"""The "lengths" kind: perplexity, paired, effective-length, LongPPL, seed, variant and
position tables of results evaluated at several lengths."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lcx.tools import bootstrap
from lcx.tools.report import tables
from lcx.tools.report.tables import describe_protocol


def group_key(r: dict) -> tuple:
  """Results that share a table: the same protocol and training length."""
  return (tables.protocol_key(r), r["train_len"])


def length_table(
  results: Sequence[dict], metric: str = "perplexity", *, row_label=tables.label
) -> str:
  """One protocol group: a row per result, a column per eval length, `value [lo, hi]` cells,
  from each result's CSV rows. `metric`: perplexity | loss | bits_per_byte. Skipped lengths say
  so; reasons below."""
  fmt = tables.ppl if metric == "perplexity" else tables.f3
  train_len = results[0]["train_len"]
  rows_R = [csv_rows(r) for r in results]
  lengths = sorted({int(x["length"]) for rows in rows_R for x in rows})
  body = [
    [row_label(r)] + tables.pivot_cells(rows, "length", lengths, metric, fmt)
    for r, rows in zip(results, rows_R)
  ]
  head = ["run/variant" if row_label is tables.label else "variant"] + [
    tables.times(n, train_len) for n in lengths
  ]
  loss_R = [{int(x["length"]): x for x in rows if x["metric"] == "loss"} for rows in rows_R]
  counts = "; ".join(
    f"{n}: {tables.span(loss.get(n, {}).get('tokens') for loss in loss_R)} tokens, "
    f"{tables.span(loss.get(n, {}).get('num_documents') for loss in loss_R)} documents"
    for n in lengths
  )
  skips = [
    f"- {row_label(r)} at {x['length']}: skipped: {x['note']}"
    for r, rows in zip(results, rows_R)
    for x in rows
    if x["metric"] == "skipped"
  ]
  lines = [
    f"{describe_protocol(results[0].get('protocol'), results)}; train length {train_len}.",
    f"Per length: {counts}.",
    "",
    tables.markdown_table(head, body),
  ]
  return "\n".join(lines + ([""] + skips if skips else []))


def length_tables(results: Sequence[dict], metric: str = "perplexity") -> str:
  """(a)/(b): every "lengths" result, one table per protocol (and training length)."""
  chosen = [
    r
    for r in tables.of_kind(results, "lengths")
    if metric != "bits_per_byte"
    or any(e.get("bits_per_byte") is not None for e in r["lengths"].values())
  ]
  return "\n\n".join(length_table(g, metric) for g in tables.groups(chosen, group_key))


def variant_tables(results: Sequence[dict], metric: str = "perplexity") -> str:
  """(c): for each run evaluated with more than one variant, variants x lengths."""
  out = []
  for run_results in tables.groups(tables.of_kind(results, "lengths"), lambda r: r["run"]):
    if len({r["variant"] for r in run_results}) < 2:
      continue
    for group in tables.groups(run_results, group_key):
      out.append(
        f"### {group[0]['run']}\n\n"
        + length_table(group, metric, row_label=lambda r: str(r["variant"]))
      )
  return "\n\n".join(out)


def seed_tables(results: Sequence[dict], metric: str = "perplexity") -> str:
  """Runs named STEM-s<seed> that differ only in the seed: per length, the mean over seeds and
  [min, max] across them (the run-to-run spread, where the per-run CIs above are the sampling
  spread over documents), from the CSV's rows. One table per protocol group; stems with one
  seed are left out."""
  fmt = tables.ppl if metric == "perplexity" else tables.f3
  out = []
  for group in tables.groups(tables.of_kind(results, "lengths"), group_key):
    rows = [row for r in group for row in csv_rows(r) if row["metric"] == metric]
    lengths, body = tables.seed_table(rows, "length", metric, fmt, order=int)
    if not body:
      continue
    train_len = group[0]["train_len"]
    out.append(
      f"{describe_protocol(group[0].get('protocol'), group)}; train length {train_len}. "
      f"Cells: mean over seeds [min, max across seeds].\n\n"
      + tables.markdown_table(
        ["runs/variant", "seeds"] + [tables.times(int(n), train_len) for n in lengths],
        body,
        align="ll" + "r" * len(lengths),
      )
    )
  return "\n\n".join(out)


def length_rank_tables(results: Sequence[dict], metric: str = "perplexity") -> str:
  """Runs named STEM-s<seed> ranked at each length by their mean over seeds (1 = lowest
  perplexity; equal as printed, equal rank), rows in the order of the longest length, so a
  scheme that wins at L and loses past it shows its fall. One table per protocol group."""
  out = []
  for group in tables.groups(tables.of_kind(results, "lengths"), group_key):
    rows = [row for r in group for row in csv_rows(r) if row["metric"] == metric]
    lengths, values = tables.seed_values(rows, "length", metric, order=int)
    if len(values) < 2:
      continue
    means = {n: {} for n in lengths}  # length -> "stem/variant" -> mean over seeds
    for (stem, variant), (_, by_length) in values.items():
      for n, vs in by_length.items():
        if vs is not None:
          means[n][f"{stem}/{variant}"] = sum(vs) / len(vs)
    rank = {n: tables.ranks(means[n], tables.ppl) for n in lengths}
    last = lengths[-1]
    names = sorted(
      {name for by in means.values() for name in by},
      key=lambda name: (rank[last].get(name, len(values) + 1), name),
    )
    body = [
      [name]
      + [
        f"{rank[n][name]} ({tables.ppl(means[n][name])})" if name in means[n] else "-"
        for n in lengths
      ]
      for name in names
    ]
    train_len = group[0]["train_len"]
    out.append(
      f"{describe_protocol(group[0].get('protocol'), group)}; train length {train_len}. "
      f"Cells: rank (1 = lowest) of the mean {metric} over seeds (that mean); equal as "
      f"printed, equal rank; rows in the order of {tables.times(int(last), train_len)}.\n\n"
      + tables.markdown_table(
        ["runs/variant"] + [tables.times(int(n), train_len) for n in lengths],
        body,
        align="l" + "r" * len(lengths),
      )
    )
  return "\n\n".join(out)


def documents(entry: dict) -> tuple | None:
  """(ids, mean loss per document, tokens per document) of a length entry, None where the
  result predates per-document losses."""
  d = entry.get("per_document")
  if not d or not d.get("ids"):
    return None
  return tuple(d["ids"]), np.asarray(d["loss"], np.float64), np.asarray(d["tokens"], np.float64)


def _same_documents(da: tuple | None, db: tuple | None) -> bool:
  """Two `documents` of the same documents and tokens per document (one run's lengths of the
  windows protocol: the same tokens, scored with more context), so they pair document by
  document."""
  return da is not None and db is not None and da[0] == db[0] and np.array_equal(da[2], db[2])


def paired(a: dict, b: dict, protocol: dict) -> tuple[float, list[float] | None] | None:
  """(A - B, its interval) in mean loss per token, paired over the documents of two length
  entries (a seeded bootstrap: the protocol's seed and resamples); None unless both hold
  per-document losses of the same documents and tokens."""
  da, db = documents(a), documents(b)
  if not _same_documents(da, db):
    return None
  weights_RxD = bootstrap.resample_weights(
    len(da[0]), protocol.get("bootstrap", 1000), protocol.get("seed", 0)
  )
  return bootstrap.paired_difference(
    da[1], da[2], db[1], db[2], weights_RxD, protocol.get("confidence", bootstrap.CONFIDENCE)
  )


def minus(a: dict | None, b: dict | None) -> dict | None:
  """A length entry holding each document's loss in `a` minus its loss in `b` (a rise: one run
  at a length minus at 1x), for `paired` to compare two rises document by document; None
  unless both hold per-document losses of the same documents and tokens."""
  da, db = (None if e is None else documents(e) for e in (a, b))
  if not _same_documents(da, db):
    return None
  ids, tokens_D = list(da[0]), [int(t) for t in da[2]]
  return {"per_document": {"ids": ids, "loss": (da[1] - db[1]).tolist(), "tokens": tokens_D}}


def paired_cell(a: dict, b: dict, protocol: dict) -> str:
  """`A - B [lo, hi]` (`paired`), `-` where the two cannot be paired."""
  got = paired(a, b, protocol)
  return "-" if got is None else tables.cell(*got, tables.signed)


def _with_documents(results: Sequence[dict]) -> list[dict]:
  return [
    r
    for r in tables.of_kind(results, "lengths")
    if any(documents(e) for e in r["lengths"].values())
  ]


def _paired_note(group: Sequence[dict]) -> str:
  p = group[0].get("protocol") or {}
  return (
    f"{describe_protocol(p, group)}; train length {group[0]['train_len']}. Cells: difference "
    f"in mean loss (nats/token; negative: lower loss) [{p.get('confidence', 0.95) * 100:g}% paired "
    f"bootstrap interval over the same documents, {p.get('bootstrap', 1000)} resamples, seed "
    f"{p.get('seed', 0)}]; - where the documents or their tokens differ."
  )


def length_pairs(results: Sequence[dict]) -> list[tuple[list[dict], str, list[int]]]:
  """Per protocol group with per-document losses: (its results holding the training length,
  the training length, the other lengths), for each length minus 1x."""
  out = []
  for group in tables.groups(_with_documents(results), group_key):
    train = str(group[0]["train_len"])
    chosen = [r for r in group if train in r["lengths"]]
    lengths = sorted({int(n) for r in chosen for n in r["lengths"] if n != train})
    if chosen and lengths:
      out.append((chosen, train, lengths))
  return out


def _seed_of(r: dict) -> tuple[str, int] | None:
  """(stem/variant, seed) of a run named STEM-s<seed>, None for another name."""
  match = tables.SEEDED_RUN.match(str(r["run"]))
  return (f"{match['stem']}/{r['variant']}", int(match["seed"])) if match else None


def _bases(group: Sequence[dict], baseline: str) -> list[tuple[dict, list[dict]]]:
  """(baseline result, results paired with it) in one protocol group. `baseline`: empty for
  the group's first result; a run/variant label; or STEM/VARIANT naming seeded runs
  STEM-s<seed>, each seed's run then the baseline of that seed's other seeded results."""
  if not baseline:
    return [(group[0], list(group[1:]))]
  named = [r for r in group if tables.label(r) == baseline]
  if named:
    return [(named[0], [r for r in group if r is not named[0]])]
  out = []
  for base in group:
    stem_seed = _seed_of(base)
    if stem_seed and stem_seed[0] == baseline:
      same_seed = [
        r for r in group if r is not base and (_seed_of(r) or ("", -1))[1] == stem_seed[1]
      ]
      out.append((base, same_seed))
  return out


def baseline_pairs(
  results: Sequence[dict], baseline: str = ""
) -> list[tuple[dict, list[dict], list[int]]]:
  """Per protocol group with per-document losses: (the baseline, the other results, the
  lengths), once per seed for a seeded baseline (`_bases`)."""
  out = []
  for group in tables.groups(_with_documents(results), group_key):
    lengths = sorted({int(n) for r in group for n in r["lengths"]})
    out.extend((base, others, lengths) for base, others in _bases(group, baseline) if others)
  return out


def _pair(a: dict, b: dict, n: int, protocol: dict):
  """`paired` of two results at length n, None where either lacks it."""
  if str(n) not in a["lengths"] or str(n) not in b["lengths"]:
    return None
  return paired(a["lengths"][str(n)], b["lengths"][str(n)], protocol)


def _pair_text(got) -> str:
  return "-" if got is None else tables.cell(*got, tables.signed)


def length_pair_tables(results: Sequence[dict]) -> str:
  """Loss at each length minus loss at the training length (1x), per result, paired over the
  same documents: does the loss past L differ from L's beyond document sampling?"""
  out = []
  for chosen, train, lengths in length_pairs(results):
    rows = [
      [tables.label(r)]
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
      + tables.markdown_table(
        ["run/variant"] + [f"{tables.times(n, int(train))} - 1x" for n in lengths], rows
      )
    )
  return "\n\n".join(out)


def length_seed_pair_tables(results: Sequence[dict]) -> str:
  """`length_pair_tables` summarized over seeds: per run stem and variant with two or more seeds
  (runs STEM-s<seed>), per length, the mean of each seed's loss there minus its loss at 1x [min,
  max across seeds] k/n (`tables.seed_summary`): does the loss past L rise in every seed?"""
  out = []
  for chosen, train, lengths in length_pairs(results):
    diffs: dict = {}  # stem/variant -> seed -> length -> (difference, interval)
    for r in chosen:
      stem_seed = _seed_of(r)
      if stem_seed:
        diffs.setdefault(stem_seed[0], {})[stem_seed[1]] = {
          n: paired(r["lengths"][str(n)], r["lengths"][train], r.get("protocol") or {})
          for n in lengths
          if str(n) in r["lengths"]
        }
    table = tables.seed_summary_table(
      diffs,
      lengths,
      ["runs/variant"] + [f"{tables.times(n, int(train))} - 1x" for n in lengths],
      min_seeds=2,
    )
    if table:
      out.append(_seed_pair_note(chosen, f"Each length against 1x ({train}) in each seed") + table)
  return "\n\n".join(out)


def _seed_pair_note(group: Sequence[dict], what: str) -> str:
  p, r = group[0].get("protocol") or {}, group[0]
  return (
    f"{describe_protocol(p, group)}; train length {r['train_len']}. {what}, in mean loss"
    f" (nats/token; negative: lower loss). Cells: the mean over seeds [min, max across seeds]"
    f" k/n: of the n seeds, the k whose {p.get('confidence', 0.95) * 100:g}% paired bootstrap"
    f" interval over the same documents ({p.get('bootstrap', 1000)} resamples, seed"
    f" {p.get('seed', 0)}) excludes zero on the mean's side.\n\n"
  )


def pair_tables(results: Sequence[dict], baseline: str = "") -> str:
  """Each result minus a baseline result (`baseline_pairs`), per length, paired over the same
  documents. One table per protocol group."""
  out = []
  for base, others, lengths in baseline_pairs(results, baseline):
    protocol = base.get("protocol") or {}
    rows = [
      [tables.label(r)] + [_pair_text(_pair(r, base, n, protocol)) for n in lengths] for r in others
    ]
    out.append(
      _paired_note([base, *others])
      + f" Each result minus {tables.label(base)}.\n\n"
      + tables.markdown_table(
        [f"run/variant - {tables.label(base)}"]
        + [tables.times(n, base["train_len"]) for n in lengths],
        rows,
      )
    )
  return "\n\n".join(out)


def seed_pair_tables(results: Sequence[dict], baseline: str = "") -> str:
  """With a seeded baseline STEM/VARIANT (`_bases`): per run stem and variant, per length, its
  difference from the baseline of its own seed, summarized over the seeds: the mean [min, max
  across seeds] and k/n, the seeds whose paired interval (`pair_tables`) excludes zero on the
  mean's side. Empty for any other baseline: one seed has nothing to summarize."""
  if not baseline or baseline in {tables.label(r) for r in results}:
    return ""
  out = []
  for group in tables.groups(baseline_pairs(results, baseline), lambda p: group_key(p[0])):
    diffs: dict = {}  # stem/variant -> seed -> length -> (difference, interval)
    for base, others, lengths in group:
      for r in others:
        stem, seed = _seed_of(r)
        by_length = diffs.setdefault(stem, {}).setdefault(seed, {})
        for n in lengths:
          got = _pair(r, base, n, base.get("protocol") or {})
          if got:
            by_length[n] = got
    base, _, lengths = group[0]
    table = tables.seed_summary_table(
      diffs,
      lengths,
      [f"runs/variant - {baseline}"] + [tables.times(n, base["train_len"]) for n in lengths],
      min_seeds=1,
    )
    if table:
      shown = [x for b, others, _ in group for x in (b, *others)]
      out.append(_seed_pair_note(shown, f"Each result minus {baseline} of its own seed") + table)
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
  docs = [documents(e) for e in entries]
  if not all(_same_documents(d, docs[0]) for d in docs):
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
  for group in tables.groups(tables.of_kind(results, "lengths"), group_key):
    rows = []
    for r in group:
      got = effective_length(r, tolerance)
      if got is None:
        rows.append([tables.label(r), "-", "-"])
        continue
      n, ci = got
      interval = "-" if ci is None else f"[{ci[0]}, {ci[1]}]"
      rows.append([tables.label(r), tables.times(n, r["train_len"]), interval])
    p = group[0].get("protocol") or {}
    out.append(
      f"{describe_protocol(p, group)}; train length {group[0]['train_len']}. The longest evaluated "
      f"length up to which the loss stays within {tolerance:g} nats/token of the loss at the "
      f"training length (at every length from L to it); interval: "
      f"{p.get('confidence', 0.95) * 100:g}% over the paired per-document bootstrap "
      f"({p.get('bootstrap', 1000)} resamples, seed {p.get('seed', 0)}), - without "
      "per-document losses.\n\n"
      + tables.markdown_table(["run/variant", "effective length", "interval"], rows)
    )
  return "\n\n".join(out)


def longppl_tables(results: Sequence[dict]) -> str:
  """LongPPL (eval.longppl) per result and length: `value [lo, hi]` and its key tokens; only
  results that computed it."""
  out = []
  chosen = [
    r
    for r in tables.of_kind(results, "lengths")
    if any("longppl" in e for e in r["lengths"].values())
  ]
  for group in tables.groups(chosen, group_key):
    lengths = sorted({int(n) for r in group for n in r["lengths"]})
    rows = []
    for r in group:
      row = [tables.label(r)]
      for n in lengths:
        got = r["lengths"].get(str(n), {}).get("longppl")
        if got is None or got["longppl"] is None:
          row.append("-")
        else:
          row.append(
            f"{tables.cell(got['longppl'], got['longppl_ci'], tables.ppl)} ({got['key_tokens']})"
          )
      rows.append(row)
    first = next(e["longppl"] for e in group[0]["lengths"].values() if "longppl" in e)
    out.append(
      f"{describe_protocol(group[0].get('protocol'), group)}; train length "
      f"{group[0]['train_len']}. Perplexity on the key tokens (in parentheses: how many): "
      f"loss with at most {first['short']} tokens of context minus loss with the window > "
      f"{first['alpha']:g} nats, and loss with the window < {-first['beta']:g} nats (Fang et "
      "al. 2025); - where no token is key (lengths up to the short context have none).\n\n"
      + tables.markdown_table(
        ["run/variant"] + [tables.times(n, group[0]["train_len"]) for n in lengths], rows
      )
    )
  return "\n\n".join(out)


def baselines(results: Sequence[dict]) -> list[str]:
  """The labels `pair_tables` accepts as a baseline: results with per-document losses, and
  STEM/VARIANT of seeded runs STEM-s<seed> among them (each seed against its own)."""
  found = _with_documents(results)
  return sorted({tables.label(r) for r in found} | {s[0] for r in found if (s := _seed_of(r))})


def longest(r: dict) -> str:
  return max(r["lengths"], key=int)


def position_tables(results: Sequence[dict]) -> str:
  """Loss per position bucket at each result's longest length: where past-L context hurts."""
  out = []
  chosen = [
    r
    for r in tables.of_kind(results, "lengths")
    if r["lengths"] and r["lengths"][longest(r)].get("loss_by_position")
  ]
  for group in tables.groups(chosen, group_key):
    spans = sorted(
      {(b["start"], b["end"]) for r in group for b in r["lengths"][longest(r)]["loss_by_position"]}
    )
    rows = []
    for r in group:
      by_span = {(b["start"], b["end"]): b for b in r["lengths"][longest(r)]["loss_by_position"]}
      rows.append(
        [tables.label(r), longest(r)]
        + [
          tables.cell(by_span[s]["loss"], by_span[s].get("loss_ci"), tables.f3)
          if s in by_span
          else "-"
          for s in spans
        ]
      )
    head = ["run/variant", "length"] + [f"[{a}, {b})" for a, b in spans]
    out.append(
      f"{describe_protocol(group[0].get('protocol'), group)}; train length "
      f"{group[0]['train_len']}. Loss (nats/token) by position p (tokens of context "
      f"before the target), at each result's longest length.\n\n"
      + tables.markdown_table(head, rows)
    )
  return "\n\n".join(out)


# SHORT


# CSV


def short_protocol(r: dict) -> str:
  """`windows/stream`, `sliding/long stride 256`, `last_k/long last 64`."""
  p = r.get("protocol") or {}
  extra = (
    f" stride {p.get('stride')}"
    if p.get("protocol") == "sliding"
    else f" last {p.get('last_k')}"
    if p.get("protocol") == "last_k"
    else ""
  )
  return f"{p.get('protocol', '?')}/{p.get('documents', '?')}{extra}"


def csv_rows(r: dict) -> list[dict]:
  """Per length: loss, perplexity, bits per byte, then the loss per position bucket; then the
  skipped lengths."""
  out = []
  p = r.get("protocol") or {}
  base = {
    **tables.row_base(r),
    "protocol": p.get("protocol", ""),
    "documents": p.get("documents", ""),
  }
  for n in sorted(r["lengths"], key=int):
    e = r["lengths"][n]
    counts = {"tokens": e.get("tokens"), "num_documents": e.get("documents")}
    for metric in ("loss", "perplexity", "bits_per_byte"):
      if e.get(metric) is not None:
        out.append(
          tables.row(
            base, length=n, metric=metric, value=e[metric], ci=e.get(f"{metric}_ci"), **counts
          )
        )
    for b in e.get("loss_by_position", []):
      out.append(
        tables.row(
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
    out.append(tables.row(base, length=n, metric="skipped", note=why))
  return out


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
          out.append(
            tables.row(
              tables.row_base(r), length=n, metric="loss_minus_1x", value=got[0], ci=got[1]
            )
          )
  for base, others, lengths in baseline_pairs(results, baseline):
    for r in others:
      for n in lengths:
        got = _pair(r, base, n, base.get("protocol") or {})
        if got:
          out.append(
            tables.row(
              tables.row_base(r),
              length=n,
              metric="loss_minus_baseline",
              value=got[0],
              ci=got[1],
              note=f"minus {tables.label(base)}",
            )
          )
  return out
