"""Train-step time and page faults with and without launch.sh's malloc tunables, alternating.

GLIBC_TUNABLES is read when a process starts, so each measurement is a fresh process (one per
scheme and setting), and the two settings alternate `--repeats` times so drift of the shared
machine hits both alike. Run from the repository root:

  .venv/bin/python experiments/bench/page_faults.py \
      --out=experiments/bench/cpu_2026-11-25d/page_faults.json
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys

from absl import app, flags

from lcx.tools.report import markdown_table

flags.DEFINE_list("schemes", ["nope", "rope", "cope"], "Schemes of the default model to time.")
flags.DEFINE_integer("repeats", 3, "Alternations of the two settings.")
flags.DEFINE_integer("steps", 8, "Timed train steps per process (after 3 warm-up steps).")
flags.DEFINE_string("out", "", "JSON output path (empty: none).")
FLAGS = flags.FLAGS

# One process: the bench's own train step (lcx.tools.bench.workload), timed after warm-up, with the
# process's minor page faults and kernel CPU time over the timed steps.
CHILD = """
import json, resource, sys, time
from lcx.tools.bench.workload import bench_config, lcx_program
program = lcx_program(bench_config(sys.argv[1], "default", 16, 256))
for _ in range(3):
  program.step()
r0 = resource.getrusage(resource.RUSAGE_SELF)
times = []
for _ in range(int(sys.argv[2])):
  start = time.perf_counter(); program.step(); times.append(time.perf_counter() - start)
r1, n = resource.getrusage(resource.RUSAGE_SELF), len(times)
print("RESULT " + json.dumps({
  "step_s": sorted(times)[n // 2],
  "faults_per_step": (r1.ru_minflt - r0.ru_minflt) / n,
  "sys_s_per_step": (r1.ru_stime - r0.ru_stime) / n,
  "user_s_per_step": (r1.ru_utime - r0.ru_utime) / n,
  "max_rss_mb": r1.ru_maxrss / 1024,
}))
"""


def launcher_tunables() -> str:
  text = open("launch.sh").read()
  return re.search(r"^LCX_GLIBC_TUNABLES=(\S+)$", text, re.M)[1]


def measure(scheme: str, tunables: str | None) -> dict:
  env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
  if tunables:
    env["GLIBC_TUNABLES"] = tunables
  out = subprocess.run(
    [sys.executable, "-c", CHILD, scheme, str(FLAGS.steps)],
    env=env,
    capture_output=True,
    text=True,
    check=True,
  ).stdout
  return json.loads(out.split("RESULT ", 1)[1])


def main(argv):
  del argv
  settings = {"unset": None, "launch.sh": launcher_tunables()}
  runs = {s: {k: [] for k in settings} for s in FLAGS.schemes}
  for r in range(FLAGS.repeats):
    for scheme in FLAGS.schemes:
      order = list(settings) if r % 2 == 0 else list(settings)[::-1]
      for name in order:
        runs[scheme][name].append(measure(scheme, settings[name]))
        print(f"  {scheme} {name}: {runs[scheme][name][-1]}", flush=True)

  def med(scheme, name, key):
    return statistics.median(x[key] for x in runs[scheme][name])

  rows = []
  for scheme in FLAGS.schemes:
    for name in settings:
      rows.append(
        [
          scheme,
          name,
          f"{med(scheme, name, 'step_s') * 1000:.0f}",
          f"{med(scheme, name, 'faults_per_step'):.0f}",
          f"{med(scheme, name, 'sys_s_per_step') * 1000:.0f}",
          f"{med(scheme, name, 'max_rss_mb'):.0f}",
          f"{med(scheme, name, 'step_s') / med(scheme, 'unset', 'step_s'):.3f}",
        ]
      )
  header = [
    "scheme",
    "GLIBC_TUNABLES",
    "ms/step",
    "faults/step",
    "sys ms/step",
    "max RSS MB",
    "x unset",
  ]
  print(f"\nlaunch.sh's GLIBC_TUNABLES = {settings['launch.sh']}; medians of {FLAGS.repeats}")
  print(markdown_table(header, rows))
  if FLAGS.out:
    with open(FLAGS.out, "w") as f:
      json.dump({"command": " ".join(sys.argv), "settings": settings, "runs": runs}, f, indent=1)
    print(f"wrote {FLAGS.out}")


if __name__ == "__main__":
  app.run(main)
