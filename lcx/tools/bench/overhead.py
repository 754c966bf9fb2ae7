"""Section `positions`: the train-step time of every scheme as a ratio to NoPE, all interleaved
on the default model, and of each model option (`--options`, rows SCHEME+OPTION: QK-norm,
temperatures, sinks, gates, Resonance YaRN, the per-layer schedule on RoPE; scale-invariant
attention on p-RoPE; a shared CoPE table on CoPE; stick-breaking on NoPE) as a ratio to NoPE and
to its own scheme without the option."""

from __future__ import annotations

import statistics

from lcx.tools.bench.measure import interleaved, ratio, ratio_ci
from lcx.tools.bench.workload import buildable, option_rows, registered, skipped_rows
from lcx.tools.report import markdown_table

TITLE = "Position overhead: train-step time / NoPE (interleaved)"


def run(opts, results) -> dict:
  """Train-step time of every scheme (and SCHEME+OPTION) over NoPE on the default model, all
  interleaved; an option row's scheme is timed too, whether asked for or not."""
  del results
  rows = option_rows(opts.options)
  asked = ["nope"] + [s for s in opts.schemes if s != "nope"]
  asked += [r.partition("+")[0] for r in rows if r.partition("+")[0] not in asked]
  schemes, missing = registered(asked)
  programs, failed = buildable(opts, schemes + rows)
  rounds = interleaved(programs, opts.rounds, opts.steps)
  return {
    "schemes": {
      s: {
        "step_s": statistics.median(rounds[s]),
        "ratio_to_nope": ratio(rounds[s], rounds["nope"]) if "nope" in rounds else None,
        # (low, high, coverage): the distribution-free interval of that median over rounds
        "ratio_to_nope_ci": ratio_ci(rounds[s], rounds["nope"]) if "nope" in rounds else None,
        "ratio_to_scheme": (
          ratio(rounds[s], rounds[base]) if (base := s.partition("+")[0]) in rounds else None
        ),
        "compile_s": programs[s].compile_s,
        "rounds_s": rounds[s],
      }
      for s in programs
    },
    "skipped": {**{s: "not registered" for s in missing}, **failed},
  }


def _ratio_cell(x: float | None) -> str:
  return "-" if x is None else f"{x:.3f}"


def ci_cell(ci) -> str:
  """A `median_ci` result as 'low-high (coverage)'; None as '-'."""
  return "-" if ci is None else f"{ci[0]:.3f}-{ci[1]:.3f} ({ci[2]:.0%})"


def table(result: dict) -> str:
  rows = [
    [
      s,
      f"{v['step_s']:.3f}",
      _ratio_cell(v["ratio_to_nope"]),
      ci_cell(None if s == "nope" else v.get("ratio_to_nope_ci")),
      _ratio_cell(v.get("ratio_to_scheme")) if "+" in s else "",
      f"{v['compile_s']:.1f}",
    ]
    for s, v in result["schemes"].items()
  ]
  header = ["scheme", "s/step", "x NoPE", "x NoPE CI", "x scheme", "compile s"]
  return markdown_table(header, rows + skipped_rows(result, len(header)))
