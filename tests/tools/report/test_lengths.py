"""The "lengths" kind: length, variant, paired, effective-length and LongPPL tables."""

import csv

import numpy as np
import pytest

from lcx.tools import bootstrap, report
from tests.tools.report.results import lengths_result, row_cells, with_documents


def test_length_table_header_and_ci_cells():
  text = report.length_tables([lengths_result(losses={1: 2.0, 2: 2.1, 4: 2.3})])
  lines = text.splitlines()
  assert lines[0].startswith(
    "windows protocol on stream documents, 4096 tokens per length of the 4096 asked, in 12 "
    "documents, windows: 64 at 64, 32 at 128, 16 at 256, "
    "95% bootstrap CI over documents (1000 resamples, seed 0); "
    "train length 64."
  )
  assert lines[1] == (
    "Per length: 64: 4096 tokens, 12 documents; 128: 4096 tokens, 12 "
    "documents; 256: 4096 tokens, 12 documents."
  )
  assert lines[3] == (
    "| run/variant |           64 (1x) |          128 (2x) |           256 (4x) |"
  )
  assert lines[4].startswith("|:") and lines[4].endswith(":|")
  cells = row_cells(lines[5])
  # exp(2.0) = 7.389, exp(1.98) = 7.243, exp(2.02) = 7.538
  assert cells[:2] == ["rope/none", "7.39 [7.24, 7.54]"]


def _scored(r, tokens, documents, windows_by_length):
  """r with its lengths scoring `tokens` in `documents` and the given windows, as a short
  evaluation sample records (fewer than eval.num_tokens)."""
  for n, windows in windows_by_length.items():
    r["lengths"][str(n)].update(tokens=tokens, documents=documents, windows=windows)
  return r


def test_every_lengths_header_states_what_was_scored_not_only_what_was_asked():
  """7 documents gave 7168 of the 32768 tokens asked, 7 windows at the longest length: every
  table's header said `32768 tokens per length`."""
  results = []
  for run, shift in (("alibi-s0", 0.0), ("alibi-s1", 0.1), ("rope-s0", 0.2), ("rope-s1", 0.3)):
    r = with_documents(lengths_result(run, losses={1: 2.0, 4: 2.3, 16: 2.5}), shift=shift)
    r["protocol"]["num_tokens"] = 32768
    results.append(_scored(r, 7168, 7, {64: 112, 256: 28, 1024: 7}))
  _scored(results[3], 9216, 9, {64: 144, 256: 36, 1024: 9})
  text = report.format_tables(results, "rope/none", tolerance=0.1)
  headers = [line for line in text.splitlines() if line.startswith("windows protocol")]
  assert len(headers) >= 7  # lengths, seeds, ranks, each minus 1x (and over seeds), baseline, ...
  every = (
    "windows protocol on stream documents, 7168-9216 tokens per length of the 32768 asked, in "
    "7-9 documents, windows: 112-144 at 64, 28-36 at 256, 7-9 at 1024, 95% bootstrap CI"
  )
  seed_0 = (  # each table counts the results it shows: seed 0's pairs hold no rope-s1
    "windows protocol on stream documents, 7168 tokens per length of the 32768 asked, in 7 "
    "documents, windows: 112 at 64, 28 at 256, 7 at 1024, 95% bootstrap CI"
  )
  (mine,) = [h for h in headers if h.endswith("Each result minus rope-s0/none.")]
  assert mine.startswith(seed_0)
  assert all(h.startswith(every) for h in headers if h != mine), headers
  assert "32768 tokens per length" not in text
  assert report.length_tables(results[:1]).startswith(seed_0)
  del results[0]["lengths"]["64"]["tokens"]
  assert report.length_tables(results[:1]).startswith(
    "windows protocol on stream documents, 32768 tokens per length asked (scored counts not "
    "recorded), 95%"
  )


def test_tables_group_by_protocol_and_mark_skipped_lengths():
  results = [
    lengths_result("alibi"),
    lengths_result("learned", losses={1: 2.0}, skipped={"128": "max_len=64 < 128"}),
    lengths_result("rope", documents="long"),
  ]
  text = report.length_tables(results)
  assert text.startswith("windows protocol on stream documents")
  stream, long = text.split("\n\nwindows protocol on long documents")
  assert "alibi/none" in stream and "learned/none" in stream and "rope" not in stream
  assert "rope/none" in long and "alibi" not in long
  learned = next(line for line in stream.splitlines() if line.startswith("| learned"))
  assert row_cells(learned)[2:] == ["skipped", "-"]
  assert "- learned/none at 128: skipped: max_len=64 < 128" in text


def test_bits_per_byte_only_where_present():
  results = [lengths_result("a"), lengths_result("b", bpb=False)]
  text = report.length_tables(results, "bits_per_byte")
  assert "a/none" in text and "b/none" not in text
  assert "| a/none      | 2.885 [2.857, 2.914] |" in text  # 2.0 / ln 2
  assert report.length_tables([lengths_result(bpb=False)], "bits_per_byte") == ""


def test_variant_tables_per_run_with_several_variants():
  results = [
    lengths_result("rope", "none"),
    lengths_result("rope", "yarn@4"),
    lengths_result("alibi", "none"),
  ]
  text = report.variant_tables(results)
  assert text.startswith("### rope\n")
  assert "alibi" not in text  # one variant: nothing to compare
  header = next(line for line in text.splitlines() if line.startswith("| variant"))
  assert row_cells(header)[0] == "variant"


def test_paired_tables_are_the_bootstrap_of_the_per_document_losses():
  a = with_documents(lengths_result("alibi"), shift=0.3, seed=1)
  b = with_documents(lengths_result("rope"), seed=2)
  text = report.format_tables([a, b])
  weights = bootstrap.resample_weights(20, 1000, 0)

  def cell(x, y):
    diff, (lo, hi) = bootstrap.paired_difference(
      *(np.asarray(e["per_document"][k], float) for e in (x, y) for k in ("loss", "tokens")),
      weights,
    )
    return f"{diff:+.3f} [{lo:+.3f}, {hi:+.3f}]"

  def rows(heading):
    body = text.split(f"## {heading}\n")[1].split("\n## ")[0]
    return {x.split("|")[1].strip(): x for x in body.splitlines() if x.startswith("|")}

  la = a["lengths"]
  assert rows("Paired: each length against 1x")["alibi/none"].endswith(
    f"| {cell(la['128'], la['64'])} | {cell(la['256'], la['64'])} |"
  )
  assert "minus alibi/none" in text
  assert rows("Paired: each result against a baseline")["rope/none"].endswith(
    " | ".join(cell(b["lengths"][n], la[n]) for n in ("64", "128", "256")) + " |"
  )

  def interval(x, y):
    return [float(v) for v in cell(x, y).split("[")[1].rstrip("]").split(", ")]

  lo, hi = interval(la["128"], la["64"])  # the built-in 0.1 per doubling, noise 0.02 / doc
  assert lo < 0.1 < hi and hi - lo < 0.05
  lo, hi = interval(b["lengths"]["64"], la["64"])
  assert lo < -0.3 < hi and hi - lo < 0.05  # 0.5 spread across documents cancels
  # Another baseline by name; results on other tokens (counts differ) get no paired cell.
  b["lengths"]["128"]["per_document"]["tokens"][0] += 1
  text = report.format_tables([a, b], baseline="rope/none")
  row = rows("Paired: each result against a baseline")["alibi/none"]
  cells = [c.strip() for c in row.split("|")[2:-1]]
  assert "minus rope/none" in text and cells[1] == "-" and cells[0].startswith("+0.")


def test_the_csv_holds_the_paired_numbers():
  a = with_documents(lengths_result("alibi"), shift=0.3, seed=1)
  b = with_documents(lengths_result("rope"), seed=2)
  rows = list(csv.DictReader(report.format_csv([a, b]).splitlines()))
  weights = bootstrap.resample_weights(20, 1000, 0)

  def expected(x, y):
    return bootstrap.paired_difference(
      *(np.asarray(e["per_document"][k], float) for e in (x, y) for k in ("loss", "tokens")),
      weights,
    )

  one = [r for r in rows if r["metric"] == "loss_minus_1x"]
  assert [(r["run"], r["length"]) for r in one] == [
    ("alibi", "128"),
    ("alibi", "256"),
    ("rope", "128"),
    ("rope", "256"),
  ]
  diff, (lo, hi) = expected(a["lengths"]["256"], a["lengths"]["64"])
  assert [float(one[1][k]) for k in ("value", "ci_lo", "ci_hi")] == pytest.approx([diff, lo, hi])
  versus = [r for r in rows if r["metric"] == "loss_minus_baseline"]
  assert [(r["run"], r["length"], r["note"]) for r in versus] == [
    ("rope", n, "minus alibi/none") for n in ("64", "128", "256")
  ]
  diff, (lo, hi) = expected(b["lengths"]["64"], a["lengths"]["64"])
  assert [float(versus[0][k]) for k in ("value", "ci_lo", "ci_hi")] == pytest.approx([diff, lo, hi])


def test_results_without_per_document_losses_print_no_paired_table():
  old = [lengths_result("alibi"), lengths_result("rope")]
  assert "Paired" not in report.format_tables(old) and report.baselines(old) == []
  assert "loss_minus" not in report.format_csv(old)


def _drifting(run, drift, docs=30, seed=0):
  """A lengths result at 1x..8x (L = 64) whose documents' loss rises by `drift[i]` at the i-th
  length (noise 0.03 per document); each length's loss is its token-weighted mean."""
  result = lengths_result(run, losses={1: 2.0, 2: 2.0, 4: 2.0, 8: 2.0})
  rng = np.random.default_rng(seed)
  hard = rng.normal(2.0, 0.5, docs)
  tokens = rng.integers(50, 300, docs).astype(float)
  for entry, rise in zip(result["lengths"].values(), drift):
    loss = hard + rise + rng.normal(0, 0.03, docs)
    entry["loss"] = float((loss * tokens).sum() / tokens.sum())
    entry["per_document"] = {
      "ids": list(range(docs)),
      "loss": list(loss),
      "tokens": list(tokens),
    }
  return result


def _effective_directly(result, tolerance, weights_D):
  """The statistic by hand on one set of document weights: walk up from L, stop at the first
  length whose weighted mean loss exceeds L's by more than `tolerance`."""
  entries = sorted(result["lengths"].items(), key=lambda kv: int(kv[0]))

  def mean(entry):
    d = entry["per_document"]
    w = weights_D * np.asarray(d["tokens"])
    return float((w * np.asarray(d["loss"])).sum() / w.sum())

  base, best = mean(entries[0][1]), int(entries[0][0])
  for n, entry in entries[1:]:
    if mean(entry) - base > tolerance:
      break
    best = int(n)
  return best


def test_effective_length_is_the_longest_length_within_tolerance_with_its_bootstrap_interval():
  result = _drifting("rope", [0.0, 0.03, 0.07, 0.4])
  weights_RxD = bootstrap.resample_weights(30, 1000, 0)
  for tolerance, expected in ((0.05, 128), (0.1, 256), (0.5, 512), (0.01, 64)):
    n, (lo, hi) = report.effective_length(result, tolerance)
    assert n == expected == _effective_directly(result, tolerance, np.ones(30))
    by_resample = sorted(_effective_directly(result, tolerance, w) for w in weights_RxD)
    assert [lo, hi] == [by_resample[24], by_resample[975]]  # 2.5% and 97.5%, lower/higher
  # Within again past a length that was not: the effective length stops at the first excess.
  bumpy = _drifting("alibi", [0.0, 0.3, 0.0, 0.0])
  assert report.effective_length(bumpy, 0.1)[0] == 64
  # Without per-document losses: the point from the lengths' losses, no interval.
  plain = lengths_result("nope", losses={1: 2.0, 2: 2.04, 4: 2.2})
  assert report.effective_length(plain, 0.05) == (128, None)
  del plain["lengths"]["64"]
  assert report.effective_length(plain, 0.05) is None


def test_the_effective_length_table_shows_only_with_a_tolerance():
  results = [_drifting("rope", [0.0, 0.03, 0.07, 0.4]), lengths_result("nope")]
  assert "Effective context length" not in report.format_tables(results)
  text = report.format_tables(results, tolerance=0.05)
  body = text.split("## Effective context length\n")[1].split("\n## ")[0]
  assert "within 0.05 nats/token" in body
  n, (lo, hi) = report.effective_length(results[0], 0.05)
  rows = {
    x.split("|")[1].strip(): [c.strip() for c in x.split("|")[2:-1]]
    for x in body.splitlines()
    if x.startswith("|")
  }
  assert rows["rope/none"] == [f"{n} (2x)", f"[{lo}, {hi}]"]
  assert rows["nope/none"] == ["64 (1x)", "-"]  # 2.1 - 2.0 > 0.05 already at 2x


def test_longppl_table_shows_the_recorded_values_only_where_computed():
  plain = lengths_result("nope")
  assert "LongPPL" not in report.format_tables([plain])
  withppl = lengths_result("rope")
  for n, entry in withppl["lengths"].items():
    key = 0 if n == "64" else 7
    entry["longppl"] = {
      "longppl": None if key == 0 else 3.5,
      "longppl_ci": None if key == 0 else [3.0, 4.25],
      "key_tokens": key,
      "short": 64,
      "alpha": 2.0,
      "beta": -2.0,
    }
  text = report.format_tables([plain, withppl])
  body = text.split("## LongPPL by evaluation length\n")[1].split("\n## ")[0]
  rows = {
    x.split("|")[1].strip(): [c.strip() for c in x.split("|")[2:-1]]
    for x in body.splitlines()
    if x.startswith("|")
  }
  assert "nope/none" not in rows and "at most 64 tokens of context" in body
  assert rows["rope/none"] == ["-", "3.50 [3.00, 4.25] (7)", "3.50 [3.00, 4.25] (7)"]


def test_a_seeded_baseline_pairs_each_seed_with_its_own_and_summarizes_across_seeds():
  """--baseline=rope/none over runs rope-s0, rope-s1, alibi-s0, alibi-s1: alibi-s0 against
  rope-s0 and alibi-s1 against rope-s1 (never across seeds), then the mean [min, max] of the two
  differences and how many seeds' intervals exclude zero on the mean's side."""
  runs = [
    with_documents(lengths_result("rope-s0"), seed=10),
    with_documents(lengths_result("rope-s1"), shift=0.05, seed=11),
    with_documents(lengths_result("alibi-s0"), shift=0.3, seed=12),
    with_documents(lengths_result("alibi-s1"), shift=0.01, seed=13),
  ]
  assert "rope/none" in report.baselines(runs) and "rope-s1/none" in report.baselines(runs)
  text = report.format_tables(runs, baseline="rope/none")
  assert "Each result minus rope-s0/none" in text and "Each result minus rope-s1/none" in text
  per_seed = [
    report.paired(runs[a]["lengths"]["128"], runs[b]["lengths"]["128"], runs[b]["protocol"])
    for a, b in ((2, 0), (3, 1))
  ]
  summary = text.split("## Paired across seeds: each result against its seed's baseline\n")[1]
  row = next(line for line in summary.splitlines() if line.startswith("| alibi/none"))
  cells = [c.strip() for c in row.split("|")[1:-1]]
  values = [d for d, _ in per_seed]
  mean = sum(values) / 2
  apart = sum(1 for _, (lo, hi) in per_seed if (lo > 0 if mean > 0 else hi < 0))
  assert cells[:2] == ["alibi/none", "0,1"]
  assert cells[3] == f"{mean:+.3f} [{min(values):+.3f}, {max(values):+.3f}] {apart}/2"
  # Within a seed: +0.3 and 0.01 - 0.05 (across seeds it would be 0.3 - 0.05 and +0.01);
  # only seed 0's interval lies on the mean's (positive) side.
  assert values == pytest.approx([0.3, -0.04], abs=0.02) and apart == 1
  # The CSV holds each seed's difference against its own seed's baseline.
  versus = [
    (r["run"], r["note"])
    for r in csv.DictReader(report.format_csv(runs, "rope/none").splitlines())
    if r["metric"] == "loss_minus_baseline" and r["length"] == "64"
  ]
  assert versus == [("alibi-s0", "minus rope-s0/none"), ("alibi-s1", "minus rope-s1/none")]
  # A baseline that names one result: no summary across seeds.
  one = report.format_tables(runs, baseline="rope-s0/none")
  assert "Paired across seeds: each result against its seed's baseline" not in one


def test_each_length_against_1x_is_summarized_over_the_seeds_of_a_run_stem():
  """Two seeds of one stem: per length the mean of each seed's own loss minus its loss at 1x
  [min, max] k/n; a stem with one seed, or a run without a seed suffix, has no row."""
  runs = [
    with_documents(lengths_result("rope-s0"), seed=20),
    with_documents(lengths_result("rope-s1"), seed=21),
    with_documents(lengths_result("alibi-s0"), seed=22),
    with_documents(lengths_result("nope"), seed=23),
  ]
  text = report.length_seed_pair_tables(runs)
  rows = {row_cells(x)[0]: row_cells(x) for x in text.splitlines() if x.startswith("| ")}
  assert set(rows) == {"runs/variant", "rope/none"}
  per_seed = [
    report.paired(r["lengths"]["256"], r["lengths"]["64"], r["protocol"]) for r in runs[:2]
  ]
  values = [d for d, _ in per_seed]
  apart = sum(1 for _, (lo, _hi) in per_seed if lo > 0)
  assert rows["rope/none"][1] == "0,1"
  assert (
    rows["rope/none"][3]
    == f"{sum(values) / 2:+.3f} [{min(values):+.3f}, {max(values):+.3f}] {apart}/2"
  )
  assert values == pytest.approx([0.2, 0.2], abs=0.02) and apart == 2  # 0.1 a doubling, 4x


def test_ranking_by_length_ranks_the_means_over_seeds_and_orders_rows_by_the_longest():
  """Means of the seeds' perplexities (alibi at 4x: (e^2.2 + e^2.4) / 2 = 10.02): alibi wins at
  4x though rope wins at 1x; nope ties alibi at 1x as printed; a stem with one seed is left out."""
  losses = {  # stem -> (1x, 4x) loss per seed
    "rope": [(2.0, 3.0), (2.2, 3.2)],  # means 2.1, 3.1
    "alibi": [(2.3, 2.2), (2.3, 2.4)],  # means 2.3, 2.3
    "nope": [(2.29, 2.6), (2.31, 2.6)],  # means 2.3 (printed as alibi's), 2.6
  }
  results = [
    lengths_result(f"{stem}-s{seed}", losses={1: a, 4: b})
    for stem, seeds in losses.items()
    for seed, (a, b) in enumerate(seeds)
  ] + [lengths_result("t5-s0", losses={1: 1.0, 4: 1.0})]
  text = report.length_rank_tables(results)
  lines = text.splitlines()
  assert "rows in the order of 256 (4x)" in lines[0]
  assert [row_cells(line) for line in lines[4:]] == [
    ["alibi/none", "2 (9.97)", "1 (10.02)"],
    ["nope/none", "2 (9.97)", "2 (13.46)"],
    ["rope/none", "1 (8.21)", "3 (22.31)"],
  ]
  assert report.length_rank_tables(results[:2]) == ""  # one stem: nothing to rank


def test_ranks_share_the_better_rank_when_printed_equal():
  from lcx.tools.report import tables

  assert tables.ranks({"a": 1.0, "b": 1.001, "c": 2.0, "d": 0.5}, tables.f2) == {
    "a": 2,
    "b": 2,
    "c": 4,
    "d": 1,
  }
  assert tables.ranks({"a": 1.0, "b": 1.001, "c": 2.0}, tables.f2, highest_first=True) == {
    "a": 2,
    "b": 2,
    "c": 1,
  }
