"""Position overhead over NoPE across fresh processes: is a scheme's ratio below a bound?

One bench process reads a ratio with an error of its own: on this 2-core VM the same positions
run read CoPE at 1.413 and 1.516 x NoPE minutes apart, and identical programs in one process
differ by up to 3%. So this runs the bench's positions section (`./launch.sh bench
--sections=positions`, NoPE plus the schemes and options asked for) in `--processes` fresh
processes one after another, takes each process's ratio (the median of its per-round ratios,
as the bench does), and reports the median over processes with its distribution-free interval
(lcx.tools.bench.measure.median_ci): the process is the unit that repeats. Run from the repository
root:

  .venv/bin/python experiments/bench/overhead_processes.py \\
      --out=experiments/bench/cpu_2026-11-25e/overhead_processes.json
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

from absl import app, flags

from lcx.tools.bench.measure import median_ci, round_ratios
from lcx.tools.bench.overhead import ci_cell
from lcx.tools.report import markdown_table

flags.DEFINE_list("schemes", ["cope"], "Schemes timed against NoPE (comma list).")
flags.DEFINE_list("options", ["stick_breaking"], "Model options, as the bench's --options.")
flags.DEFINE_integer("processes", 12, "Fresh bench processes, run one after another.")
flags.DEFINE_integer("rounds", 6, "Interleaved rounds per process (the bench's --rounds).")
flags.DEFINE_integer("steps", 2, "Timed steps per program per round (the bench's --steps).")
flags.DEFINE_float("bound", 1.5, "The bound a row is read against.")
flags.DEFINE_string("out", "", "JSON output path (empty: none).")
FLAGS = flags.FLAGS
LEVEL = 0.95  # of the intervals; a row gets a verdict only from an interval this sure


def one_process(index: int) -> dict:
  """The positions section of one fresh `./launch.sh bench` process: its JSON's rows."""
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "positions.json")
    command = [
      "./launch.sh",
      "bench",
      "--sections=positions",
      f"--schemes=nope,{','.join(FLAGS.schemes)}",
      f"--options={','.join(FLAGS.options)}",
      f"--rounds={FLAGS.rounds}",
      f"--steps={FLAGS.steps}",
      f"--out={out}",
    ]
    subprocess.run(command, check=True, capture_output=True, text=True)
    with open(out) as f:
      result = json.load(f)
  rows = result["sections"]["positions"]["schemes"]
  line = ", ".join(f"{s} {v['ratio_to_nope']:.3f}" for s, v in rows.items() if s != "nope")
  print(f"process {index + 1}/{FLAGS.processes}: {line}", flush=True)
  return {"load_average": result["load_average"], "schemes": rows}


def summary(processes: list[dict], bound: float) -> dict:
  """Per row: each process's ratio, their median and its interval, and every round pooled."""
  out = {}
  for name in processes[0]["schemes"]:
    if name == "nope":
      continue
    per_process = [p["schemes"][name]["ratio_to_nope"] for p in processes]
    pooled = [
      r
      for p in processes
      for r in round_ratios(p["schemes"][name]["rounds_s"], p["schemes"]["nope"]["rounds_s"])
    ]
    low, high, coverage = median_ci(per_process, LEVEL)
    out[name] = {
      "ratio_to_nope": statistics.median(per_process),
      "ci": [low, high, coverage],
      "per_process": per_process,
      "pooled_rounds_median": statistics.median(pooled),
      # None: too few processes for an interval at LEVEL, no verdict
      "below_bound": high < bound if coverage >= LEVEL else None,
    }
  return out


def main(argv):
  del argv
  processes = [one_process(i) for i in range(FLAGS.processes)]
  rows = summary(processes, FLAGS.bound)
  table = [
    [
      name,
      f"{r['ratio_to_nope']:.3f}",
      ci_cell(r["ci"]),
      f"{min(r['per_process']):.3f}-{max(r['per_process']):.3f}",
      f"{r['pooled_rounds_median']:.3f}",
      {True: "yes", False: "no", None: f"- (CI < {LEVEL:.0%})"}[r["below_bound"]],
    ]
    for name, r in rows.items()
  ]
  header = [
    "scheme",
    "x NoPE (median of processes)",
    "CI",
    "process range",
    "all rounds pooled",
    f"CI < {FLAGS.bound}",
  ]
  print(f"\n{FLAGS.processes} processes x {FLAGS.rounds} rounds x {FLAGS.steps} steps")
  print(markdown_table(header, table))
  if FLAGS.out:
    os.makedirs(os.path.dirname(FLAGS.out) or ".", exist_ok=True)
    with open(FLAGS.out, "w") as f:
      record = {"command": " ".join(sys.argv), "summary": rows, "processes": processes}
      json.dump(record, f, indent=1)
    print(f"wrote {FLAGS.out}")


if __name__ == "__main__":
  app.run(main)
