"""Prints the run list experiments/gpu_runs.sh takes: "EXPERIMENT RUN COMMAND" a line, for the
runs of each experiment given that are not done (with results in
experiments/EXPERIMENT[/ARG]/results/RUN/) nor in --skip, each row's seeds next to each other.

  python experiments/gpu_list.py scale_invariant:full schemes --runs_dir=/tmp/gpuruns [--skip=a,b]
"""

import argparse
import os
import shlex

from lcx.tools import sweep


def lines(target: str, runs_dir: str, skip: set[str]) -> list[str]:
  s = sweep.load(f"experiments/{target}", runs_dir=runs_dir)
  name = os.path.relpath(s.out_dir, "experiments")  # NAME, or NAME/ARG (its own results/)
  results = os.path.join(s.out_dir, "results")
  have = set(os.listdir(results)) if os.path.isdir(results) else set()
  todo = [r for r in sweep.dependency_order(s.runs) if r not in have | skip]
  todo.sort(key=lambda r: r.rsplit("-s", 1)[0])  # stable: a row's seeds in seed order, together
  return [f"{name} {r} python3 {shlex.join(s.command(r))}" for r in todo]


if __name__ == "__main__":
  parser = argparse.ArgumentParser()
  parser.add_argument("targets", nargs="+")
  parser.add_argument("--runs_dir", default="/tmp/gpuruns")
  parser.add_argument("--skip", default="")
  args = parser.parse_args()
  for target in args.targets:
    for line in lines(target, args.runs_dir, set(filter(None, args.skip.split(",")))):
      print(line)
