"""The report: tables, CSV and plots from result JSON that follows the lcx.eval/1 schema exactly,
built here by hand (no model, no jax)."""

import csv
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from lcx import bootstrap, report
from tests.helpers import ROOT

PNG = b"\x89PNG\r\n\x1a\n"


def _common(kind, run, variant, train_len, step=600):
  return {
    "schema": "lcx.eval/1",
    "kind": kind,
    "run": run,
    "workdir": f"/runs/{run}",
    "variant": variant,
    "overrides": {} if variant == "none" else {"x.y": 1},
    "step": step,
    "scheme": "rope",
    "remap": "none",
    "train_len": train_len,
    "init_from": None,
    "config": {"data": {"seq_len": train_len}},
    "versions": {"lcx": "0.1.0", "jax": "0.10.2", "flax": "0.12.8", "python": "3.11"},
    "device": "cpu x1",
    "wall_seconds": 1.5,
    "created": "2025-01-01T00:00:00Z",
  }


def lengths_result(
  run="rope", variant="none", train_len=64, losses=None, bpb=True, skipped=None, documents="stream"
):
  """A "lengths" result at 1x, 2x, 4x: loss, perplexity (and bits per byte) with CIs, and
  loss by position buckets [0, L), [L, 2L), [2L, 4L) clipped to each length."""
  losses = losses or {1: 2.0, 2: 2.1, 4: 2.3}
  lengths = {}
  for mult, loss in losses.items():
    n = mult * train_len
    edges = [0, train_len] + [train_len * 2**i for i in range(1, 3) if train_len * 2**i <= n]
    buckets = [
      {
        "start": a,
        "end": b,
        "loss": loss + 0.01 * i,
        "loss_ci": [loss - 0.05, loss + 0.05],
        "tokens": 100 * (b - a),
      }
      for i, (a, b) in enumerate(zip(edges, edges[1:]))
    ]
    lengths[str(n)] = {
      "loss": loss,
      "loss_ci": [loss - 0.02, loss + 0.02],
      "perplexity": math.exp(loss),
      "perplexity_ci": [math.exp(loss - 0.02), math.exp(loss + 0.02)],
      "bits_per_byte": loss / math.log(2) if bpb else None,
      "bits_per_byte_ci": [(loss - 0.02) / math.log(2), (loss + 0.02) / math.log(2)]
      if bpb
      else None,
      "tokens": 4096,
      "documents": 12,
      "windows": 4096 // n,
      "kernel": "dense",
      "loss_by_position": buckets,
    }
  return {
    **_common("lengths", run, variant, train_len),
    "protocol": {
      "protocol": "windows",
      "documents": documents,
      "stride": 0,
      "last_k": 0,
      "num_tokens": 4096,
      "seed": 0,
      "bootstrap": 1000,
      "confidence": 0.95,
    },
    "lengths": lengths,
    "skipped": skipped or {},
  }


def tasks_result(run="copy", variant="none"):
  """A "tasks" result: 1-16 trained, 17-32 and 33-64 beyond, the last one skipped."""
  buckets = {
    "1-16": {
      "accuracy": 0.953,
      "accuracy_ci": [0.931, 0.972],
      "token_accuracy": 0.99,
      "examples": 100,
    },
    "17-32": {
      "accuracy": 0.41,
      "accuracy_ci": [0.31, 0.51],
      "token_accuracy": 0.8,
      "examples": 100,
    },
    "33-64": {
      "accuracy": None,
      "accuracy_ci": None,
      "token_accuracy": None,
      "examples": 100,
      "skipped": "model.max_len=32 < 64",
    },
  }
  return {
    **_common("tasks", run, variant, 16),
    "task": "copy",
    "train_sizes": [1, 16],
    "buckets": buckets,
    "depths": {},
  }


def passkey_result(run="rope", variant="none"):
  cells = [
    {"length": n, "depth": d, "accuracy": 1.0 if n == 64 else 0.25, "examples": 8}
    for n in (64, 128)
    for d in (0.0, 0.5, 1.0)
  ]
  return {
    **_common("passkey", run, variant, 64),
    "lengths": [64, 128],
    "depths": [0.0, 0.5, 1.0],
    "cells": cells,
  }


def _save(path, result):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(result))
  return path


def test_length_table_header_and_ci_cells():
  text = report.length_tables([lengths_result(losses={1: 2.0, 2: 2.1, 4: 2.3})])
  lines = text.splitlines()
  assert lines[0].startswith(
    "windows protocol on stream documents, 4096 tokens per length, "
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
  cells = [c.strip() for c in lines[5].strip("|").split("|")]
  # exp(2.0) = 7.389, exp(1.98) = 7.243, exp(2.02) = 7.538
  assert cells[:2] == ["rope/none", "7.39 [7.24, 7.54]"]


def test_markdown_table_pads_and_aligns():
  assert report.markdown_table(["a", "bb"], [["x", "1"], ["yyy", "22"]]) == (
    "| a   | bb |\n|:----|---:|\n| x   |  1 |\n| yyy | 22 |"
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
  assert [c.strip() for c in learned.strip("|").split("|")][2:] == ["skipped", "-"]
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
  assert [c.strip() for c in header.strip("|").split("|")][0] == "variant"


def test_task_table_cells_and_skipped_bucket():
  text = report.task_tables([tasks_result()])
  lines = text.splitlines()
  assert lines[0].startswith(
    "Task copy: exact match by task size, 95% CI; trained on sizes "
    "1-16. Examples per bucket: 1-16: 100; 17-32: 100; 33-64: 100."
  )
  assert [c.strip() for c in lines[2].strip("|").split("|")] == [
    "run/variant",
    "1-16",
    "17-32",
    "33-64",
  ]
  assert [c.strip() for c in lines[4].strip("|").split("|")] == [
    "copy/none",
    "0.953 [0.93, 0.97]",
    "0.410 [0.31, 0.51]",
    "skipped",
  ]
  assert lines[-1] == "- copy/none sizes 33-64: skipped: model.max_len=32 < 64"


def test_task_depth_table():
  result = tasks_result()
  result["depths"] = {"0": result["buckets"], "0.5": result["buckets"]}
  text = report.task_tables([result])
  assert "copy/none: copy exact match by needle depth and size" in text
  assert "| depth 0.5 | 0.953 [0.93, 0.97] |" in text


def test_passkey_table_is_length_by_depth():
  text = report.passkey_tables([passkey_result()])
  lines = text.splitlines()
  assert lines[0] == (
    "rope/none: passkey retrieval accuracy by length and needle depth; train "
    "length 64; 8 examples per cell."
  )
  assert [c.strip() for c in lines[2].strip("|").split("|")] == [
    "length",
    "depth 0",
    "depth 0.5",
    "depth 1",
  ]
  assert [c.strip() for c in lines[5].strip("|").split("|")] == [
    "128 (2x)",
    "0.250",
    "0.250",
    "0.250",
  ]


def _all_results():
  return [
    lengths_result("rope", "none"),
    lengths_result("rope", "yarn@4", losses={1: 2.0, 2: 2.05, 4: 2.1}),
    lengths_result("nope", "none", losses={1: 2.1, 2: 3.0, 4: 5.0}),
    tasks_result(),
    passkey_result(),
  ]


def test_write_outputs_and_determinism(tmp_path):
  for i, r in enumerate(_all_results()):
    _save(tmp_path / "in" / r["run"] / f"{i}.json", r)
  (tmp_path / "in" / "rope" / "config.json").write_text("{}")  # a run's other JSON: skipped
  results = report.load(tmp_path / "in")
  assert [(r["run"], r["variant"], r["kind"]) for r in results] == [
    ("copy", "none", "tasks"),
    ("nope", "none", "lengths"),
    ("rope", "none", "lengths"),
    ("rope", "none", "passkey"),
    ("rope", "yarn@4", "lengths"),
  ]
  written = report.write(results, str(tmp_path / "out"), title="Toy")
  assert set(written) == {
    "report",
    "csv",
    "perplexity",
    "loss_by_position",
    "variants",
    "tasks",
    "passkey",
  }
  for key in set(written) - {"report", "csv"}:  # task_errors: its test has error rates
    assert open(written[key], "rb").read(8) == PNG, key
  md = open(written["report"]).read()
  assert md.startswith("# Toy\n")
  for heading in (
    "## Perplexity by evaluation length",
    "## Bits per byte by evaluation length",
    "## Variants by evaluation length, per run",
    "## Loss by position",
    "## Task exact match by size",
    "## Passkey retrieval",
    "## Results",
  ):
    assert heading in md
  assert "![perplexity](perplexity.png)" in md and "![passkey](passkey.png)" in md
  assert (
    "| rope | yarn@4  | lengths |  600 | rope   | none  |           64 | windows/stream |" in md
  )
  with open(written["csv"]) as f:
    rows = list(csv.DictReader(f))
  # per lengths result: 3 lengths x (loss, ppl, bpb) + position buckets 1 + 2 + 3 = 15;
  # tasks: 2 buckets x (accuracy, token_accuracy) + 1 skipped = 5; passkey: 6 cells.
  assert len(rows) == 3 * 15 + 5 + 6
  yarn_ppl = [r for r in rows if r["variant"] == "yarn@4" and r["metric"] == "perplexity"]
  assert [r["length"] for r in yarn_ppl] == ["64", "128", "256"]
  assert float(yarn_ppl[0]["ci_lo"]) == pytest.approx(math.exp(1.98))
  assert yarn_ppl[0]["protocol"] == "windows" and yarn_ppl[0]["documents"] == "stream"
  assert yarn_ppl[0]["tokens"] == "4096" and yarn_ppl[0]["num_documents"] == "12"
  first = (open(written["report"], "rb").read(), open(written["csv"], "rb").read())
  again = report.write(report.load(tmp_path / "in"), str(tmp_path / "out"), title="Toy")
  assert (open(again["report"], "rb").read(), open(again["csv"], "rb").read()) == first


def test_only_plots_with_data_are_written(tmp_path):
  written = report.write([tasks_result()], str(tmp_path))
  assert set(written) == {"report", "csv", "tasks"}
  assert not (tmp_path / "perplexity.png").exists()
  assert "![tasks](tasks.png)" in open(written["report"]).read()


def test_error_rates_at_the_trained_sizes_get_their_plot(tmp_path):
  results = []
  for seed in (0, 1):
    r = tasks_result(run=f"flip-rope-s{seed}")
    r["buckets"]["1-16"].update(error_rate=0.1 * seed, error_rate_ci=[0.0, 0.2])
    results.append(r)
  written = report.write(results, str(tmp_path))
  assert set(written) == {"report", "csv", "tasks", "task_errors"}
  assert (tmp_path / "task_errors.png").read_bytes().startswith(b"\x89PNG")
  assert "![task errors](task_errors.png)" in open(written["report"]).read()
  beyond = tasks_result(run="flip-rope-s0")  # error rates past the trained sizes only: no plot
  beyond["buckets"]["17-32"].update(error_rate=0.5, error_rate_ci=[0.4, 0.6])
  assert report.plot_task_errors([beyond], str(tmp_path / "none.png")) is None


def test_no_results_still_make_a_report(tmp_path):
  written = report.write([], str(tmp_path), title="Empty")
  assert set(written) == {"report", "csv"}
  assert open(written["report"]).read() == (
    "# Empty\n\n0 results (schema `lcx.eval/1`), "
    "rendered by `python -m lcx.report`. Cells: value "
    "[95% CI].\n\nNo results yet.\n"
  )
  assert open(written["csv"]).read() == ",".join(report.CSV_COLUMNS) + "\n"


def test_load_errors_name_the_path(tmp_path):
  with pytest.raises(ValueError, match=r"nope\.json: no such file or directory"):
    report.load([tmp_path / "nope.json"])
  with pytest.raises(ValueError, match=r"\*\.json: the pattern matches no file"):
    report.load([str(tmp_path / "*.json")])
  other = _save(tmp_path / "other.json", {"loss": 1.0})
  with pytest.raises(
    ValueError,
    match=rf"{other}: not an lcx result: schema=None; expected "
    "'lcx.eval/1'",
  ):
    report.load([other])
  with pytest.raises(ValueError, match=r"no lcx result JSON \(schema 'lcx.eval/1'\) below it"):
    report.load([tmp_path])  # other.json is not one
  bad = _save(tmp_path / "d" / "bad.json", {**lengths_result(), "kind": "speed"})
  with pytest.raises(
    ValueError,
    match=rf"^{bad}: kind='speed' is not allowed; allowed: "
    r"lengths, tasks, passkey$",
  ):
    report.load([tmp_path / "d"])
  (tmp_path / "empty").mkdir()
  assert report.load([tmp_path / "empty"], allow_empty=True) == []


def test_load_glob_and_duplicates(tmp_path):
  path = _save(tmp_path / "a" / "eval" / "none.json", lengths_result("a"))
  _save(tmp_path / "b" / "eval" / "none.json", lengths_result("b"))
  results = report.load([str(tmp_path / "*" / "eval"), path])  # a's file named twice
  assert [r["run"] for r in results] == ["a", "b"]


def test_plot_length_sweep_takes_older_results(tmp_path):
  results = {
    "rope": {"train_len": 64, "lengths": {"64": {"perplexity": 8.0}, "128": {"perplexity": 9.0}}}
  }
  path = report.plot_length_sweep(results, str(tmp_path / "sweep.png"))
  assert open(path, "rb").read(8) == PNG


def _cli(*args):
  return subprocess.run(
    [sys.executable, "-m", "lcx.report", *map(str, args)],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )


def test_cli_prints_tables_and_never_imports_jax(tmp_path):
  _save(tmp_path / "in" / "rope.json", lengths_result())
  _save(tmp_path / "in" / "copy.json", tasks_result())
  proc = _cli(tmp_path / "in", f"--out={tmp_path / 'out'}", "--title=CLI")
  assert proc.returncode == 0, proc.stderr
  assert "## Perplexity by evaluation length" in proc.stdout
  assert "| rope/none   | 7.39 [7.24, 7.54] |" in proc.stdout
  assert f"  {tmp_path / 'out' / 'report.md'}" in proc.stdout
  assert open(tmp_path / "out" / "report.md").read().startswith("# CLI\n")
  code = (
    "import runpy, sys; sys.argv = ['lcx.report', sys.argv[1], '--out=' + sys.argv[2]]\n"
    "try:\n  runpy.run_module('lcx.report', run_name='__main__')\n"
    "except SystemExit as e:\n  assert not e.code, e.code\n"
    "bad = [m for m in ('jax', 'flax', 'lcx.model') if m in sys.modules]\n"
    "assert not bad, bad\nprint('clean')"
  )
  proc = subprocess.run(
    [sys.executable, "-c", code, str(tmp_path / "in"), str(tmp_path / "o2")],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == 0 and proc.stdout.endswith("clean\n"), proc.stderr


@pytest.mark.parametrize(
  "make_args, message",
  [
    (
      lambda d: [d / "missing.json", f"--out={d / 'out'}"],
      "missing.json: no such file or directory",
    ),
    (
      lambda d: [_save(d / "x.json", {"schema": "other"}), f"--out={d / 'out'}"],
      "x.json: not an lcx result: schema='other'",
    ),
    (lambda d: [f"--out={d / 'out'}"], "give at least one PATH"),
    (
      lambda d: [_save(d / "r.json", lengths_result())],
      "flag --out=None: Flag --out must have a value other than None.",
    ),
  ],
)
def test_cli_bad_input_is_one_line_and_writes_nothing(tmp_path, make_args, message):
  proc = _cli(*make_args(tmp_path))
  assert proc.returncode == 2, proc.stderr
  assert proc.stderr.strip().splitlines()[-1].startswith("error: "), proc.stderr
  assert message in proc.stderr and "Traceback" not in proc.stderr
  assert not (tmp_path / "out").exists()


def test_mean_reciprocal_rank_across_tasks():
  def result(task, system, seed, beyond):
    r = tasks_result(f"{task}-{system}-s{seed}")
    r["task"] = task
    r["buckets"]["17-32"]["accuracy"] = beyond
    return r

  # copy: nope 0.9 > alibi 0.5 > rope 0.1; sort: alibi 0.8 > nope = rope 0.2 (tie: rank 2)
  results = [
    result("copy", "nope", 0, 0.8),
    result("copy", "nope", 1, 1.0),
    result("copy", "alibi", 0, 0.5),
    result("copy", "rope", 0, 0.1),
    result("sort", "alibi", 0, 0.8),
    result("sort", "nope", 0, 0.2),
    result("sort", "rope", 0, 0.2),
  ]
  table = report.rank_tables(results)
  rows = [line for line in table.splitlines() if line.startswith("| ") and "MRR" not in line]
  assert [row.split("|")[1].strip() for row in rows] == ["alibi", "nope", "rope"]
  mrr = {row.split("|")[1].strip(): float(row.split("|")[2]) for row in rows}
  assert mrr == pytest.approx(
    {"alibi": (1 / 2 + 1) / 2, "nope": (1 + 1 / 2) / 2, "rope": (1 / 3 + 1 / 2) / 2}, abs=1e-3
  )
  assert "0.900" in table  # nope on copy: the mean over its two seeds
  assert report.rank_tables(results[:4]) == ""  # one task: no ranking


def test_a_variant_that_picks_the_task_ranks_as_its_run_or_its_method():
  def result(run, variant, task, overrides):
    r = tasks_result(run)
    r.update(task=task, variant=variant, overrides=overrides)
    return r

  picks = {"data.task": "niah_multikey"}
  assert report.system(result("rope-s0", "multikey", "niah_multikey", picks)) == "rope"
  yarn = dict(picks, **{"model.position.scaling": {"rope_type": "yarn"}})
  assert report.system(result("rope-s1", "multikey_yarn", "niah_multikey", yarn)) == "rope/yarn"
  # A variant that does not pick the task keeps its whole name.
  assert report.system(result("copy-rope-s0", "yarn@4", "copy", {})) == "rope/yarn@4"


def test_task_seed_table_is_mean_and_range_over_seeds():
  results = []
  for seed, accuracy in ((0, 0.2), (1, 0.5)):
    r = tasks_result(run=f"copy-rope-s{seed}")
    r["buckets"]["17-32"]["accuracy"] = accuracy
    results.append(r)
  results.append(tasks_result(run="copy-alibi-s0"))
  text = report.task_seed_tables(results)
  row = next(line for line in text.splitlines() if line.startswith("| copy-rope/none"))
  assert [c.strip() for c in row.strip("|").split("|")] == [
    "copy-rope/none",
    "0,1",
    "0.953 [0.953, 0.953]",
    "0.350 [0.200, 0.500]",
    "-",  # skipped in every seed
  ]
  assert "copy-alibi" not in text  # one seed: no spread to show
  assert report.task_seed_tables([tasks_result(run="copy")]) == ""
  assert "## Task exact match across seeds" in report.format_tables(results)


def test_task_error_rate_seed_table_is_mean_and_range_over_seeds():
  results = []
  for seed, error in ((0, 0.1), (1, 0.4), (2, 0.25)):
    r = tasks_result(run=f"flip-rope-s{seed}")
    r["buckets"]["1-16"].update(error_rate=error, error_rate_ci=[0.0, 1.0])
    results.append(r)
  results += [tasks_result(run=f"copy-rope-s{seed}") for seed in (0, 1)]  # no error rates
  text = report.task_seed_tables(results, "error_rate")
  assert text.startswith("Task copy: error rate on the scored answer tokens by task size")
  row = next(line for line in text.splitlines() if line.startswith("| flip-rope/none"))
  cells = [c.strip() for c in row.strip("|").split("|")]
  assert cells[:3] == ["flip-rope/none", "0,1,2", "0.250 [0.100, 0.400]"]
  assert "copy-rope" not in text  # recorded before error rates: left out, not shown as "-"
  assert "## Task error rate across seeds" in report.format_tables(results)
  assert "## Task error rate across seeds" not in report.format_tables(results[3:])


def test_seed_table_is_mean_and_range_over_seeds():
  results = [
    lengths_result(run=f"books-rope-s{seed}", losses={1: 2.0 + 0.1 * seed, 2: 2.5})
    for seed in (0, 1, 2)
  ] + [lengths_result(run="books-alibi-s0")]
  text = report.seed_tables(results)
  row = next(line for line in text.splitlines() if line.startswith("| books-rope/none"))
  cells = [c.strip() for c in row.strip("|").split("|")]
  ppl = [math.exp(2.0 + 0.1 * seed) for seed in (0, 1, 2)]
  assert cells[1] == "0,1,2"
  assert cells[2] == f"{sum(ppl) / 3:.2f} [{ppl[0]:.2f}, {ppl[2]:.2f}]"
  assert cells[3] == f"{math.exp(2.5):.2f} [{math.exp(2.5):.2f}, {math.exp(2.5):.2f}]"
  assert "books-alibi" not in text  # one seed: no spread to show
  assert report.seed_tables([lengths_result(run="rope")]) == ""


def _with_documents(result, shift=0.0, seed=0, docs=20):
  """`result` with per-document losses at each length: document d's mean loss is its
  difficulty + 0.1 per doubling of the length + `shift`, noise seeded by `seed`."""
  rng = np.random.default_rng(seed)
  hard = np.random.default_rng(99).normal(2.0, 0.5, docs)
  tokens = [int(t) for t in np.random.default_rng(98).integers(50, 300, docs)]
  for i, entry in enumerate(result["lengths"].values()):
    loss = hard + 0.1 * i + shift + rng.normal(0, 0.02, docs)
    entry["per_document"] = {
      "ids": list(range(3, 3 + docs)),
      "loss": list(loss),
      "tokens": list(tokens),
    }
  return result


def test_paired_tables_are_the_bootstrap_of_the_per_document_losses():
  a = _with_documents(lengths_result("alibi"), shift=0.3, seed=1)
  b = _with_documents(lengths_result("rope"), seed=2)
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
  a = _with_documents(lengths_result("alibi"), shift=0.3, seed=1)
  b = _with_documents(lengths_result("rope"), seed=2)
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


def test_cli_refuses_an_unknown_baseline_naming_the_allowed(tmp_path):
  _save(tmp_path / "in" / "rope.json", _with_documents(lengths_result()))
  proc = _cli(tmp_path / "in", f"--out={tmp_path / 'out'}", "--baseline=nope/none")
  assert proc.returncode == 2 and "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == (
    "error: --baseline='nope/none' is not allowed; allowed: rope/none"
  )
  assert not (tmp_path / "out").exists()


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


def test_cli_refuses_a_negative_effective_tolerance(tmp_path):
  _save(tmp_path / "in" / "rope.json", lengths_result())
  proc = _cli(tmp_path / "in", f"--out={tmp_path / 'out'}", "--effective_tolerance=-0.1")
  assert proc.returncode == 2 and "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == (
    "error: --effective_tolerance=-0.1 is not allowed; allowed: >= 0 (nats/token)"
  )
  assert not (tmp_path / "out").exists()


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


def test_task_error_rates_show_only_for_results_that_record_them():
  old = tasks_result()
  assert "error rate" not in report.format_tables([old])
  new = tasks_result(run="flip")
  new["buckets"]["1-16"].update(error_rate=0.125, error_rate_ci=[0.0625, 0.25])
  body = report.format_tables([old, new]).split("## Task error rate on scored tokens\n")[1]
  rows = {
    x.split("|")[1].strip(): [c.strip() for c in x.split("|")[2:-1]]
    for x in body.split("\n## ")[0].splitlines()
    if x.startswith("|")
  }
  assert "copy/none" not in rows and rows["flip/none"][0] == "0.125 [0.062, 0.250]"


def test_cli_warns_when_the_results_come_from_different_corpora(tmp_path):
  a, b, old = lengths_result("rope"), lengths_result("alibi"), lengths_result("nope")
  a["corpus"], b["corpus"] = "stdlib_py3.11.7_val0.1", "stdlib_py3.12.3_val0.1"
  for name, result in (("a", a), ("b", b), ("old", old)):  # old: written before `corpus`
    _save(tmp_path / "in" / f"{name}.json", result)
  proc = _cli(tmp_path / "in", f"--out={tmp_path / 'out'}")
  assert proc.returncode == 0, proc.stderr
  assert proc.stderr == (
    "warning: the results compared come from different corpora, so their numbers do not "
    "compare: stdlib_py3.11.7_val0.1 (rope); stdlib_py3.12.3_val0.1 (alibi)\n"
  )
  b["corpus"] = a["corpus"]
  assert report.corpus_warning([a, b, old]) is None


def test_variants_plot_with_many_variants_keeps_one_band_and_the_legend_outside(monkeypatch):
  figures = []
  monkeypatch.setattr(report.plots, "_save", lambda fig, path: figures.append(fig) or path)
  names = ["none", "linear@4", "ntk@4", "yarn@4", "dynamic@4", "rerope@64"]
  report.plot_variants([lengths_result(variant=v) for v in names], "variants.png")
  (ax,) = [a for a in figures[0].axes if a.get_visible()]
  assert len(ax.collections) == 1  # the band of "none" only: five more would be one blob
  legend = ax.get_legend().get_window_extent()
  assert legend.x0 >= ax.get_window_extent().x1  # right of the axes, not over the lines
  figures.clear()
  report.plot_variants([lengths_result(variant=v) for v in names[:3]], "variants.png")
  (ax,) = [a for a in figures[0].axes if a.get_visible()]
  assert len(ax.collections) == 3  # few variants: each its band
