"""Section `positions`: the train-step time of every scheme as a ratio to NoPE, all interleaved
on the default model, and of NoPE with each other attention kind (`--attention_kinds`, rows
nope+KIND: e.g. stick-breaking's cost over softmax, with no position work in either)."""

from __future__ import annotations

import statistics

from lcx.bench.timing import interleaved, ratio
from lcx.bench.workload import buildable, registered, skipped_rows
from lcx.report import markdown_table

TITLE = "Position overhead: train-step time / NoPE (interleaved)"


def run(opts, results) -> dict:
  """Train-step time of every scheme (and nope+KIND) over NoPE on the default model, all
  interleaved."""
  del results
  schemes, missing = registered(["nope"] + [s for s in opts.schemes if s != "nope"])
  programs, failed = buildable(opts, schemes + [f"nope+{k}" for k in opts.attention_kinds])
  rounds = interleaved(programs, opts.rounds, opts.steps)
  return {
    "schemes": {
      s: {
        "step_s": statistics.median(rounds[s]),
        "ratio_to_nope": ratio(rounds[s], rounds["nope"]) if "nope" in rounds else None,
        "compile_s": programs[s].compile_s,
        "rounds_s": rounds[s],
      }
      for s in programs
    },
    "skipped": {**{s: "not registered" for s in missing}, **failed},
  }


def _ratio_cell(x: float | None) -> str:
  return "-" if x is None else f"{x:.3f}"


def table(result: dict) -> str:
  rows = [
    [s, f"{v['step_s']:.3f}", _ratio_cell(v["ratio_to_nope"]), f"{v['compile_s']:.1f}"]
    for s, v in result["schemes"].items()
  ]
  return markdown_table(["scheme", "s/step", "x NoPE", "compile s"], rows + skipped_rows(result, 4))
