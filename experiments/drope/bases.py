"""What the matched rotary base changes, run by run: `python experiments/drope/bases.py`.

`drope:matched_base` re-runs every row that carries RoPE at the Llama-2-matched base under the
same names as the base-10^4 set in results/, so the report, which pairs results by name within
one set, cannot put the two side by side. This pairs each matched result with the base-10^4
result of the same run, variant and seed, example by example (the same evaluation examples:
their digests must agree), in each size bucket: exact match at 10^4 -> at the matched base,
and the difference with the report's 95% paired bootstrap interval (`report.tasks.paired`).
"""

import pathlib
import sys

from lcx.tools import report
from lcx.tools.report import tables, tasks

HERE = pathlib.Path(__file__).parent
SEEDS = (0, 1, 2)


def by_name(results_dir: pathlib.Path) -> dict:
  """(run stem, variant, seed) -> task result."""
  found = {}
  for r in report.load([str(results_dir)]):
    match = tables.SEEDED_RUN.match(r["run"])
    if r["kind"] == "tasks" and match:
      found[match["stem"], r["variant"], int(match["seed"])] = r
  return found


def cell(matched: dict | None, base: dict | None, bucket: str) -> str:
  """`10^4 -> matched diff [lo, hi]` in one bucket, `not run` where the matched run is missing."""
  if matched is None or base is None:
    return "not run"
  resamples, seed = tasks.bootstrap_of(base)
  pair = tasks.paired(matched, base, bucket, resamples, seed)
  if pair is None:
    return "examples differ"
  diff, (lo, hi) = pair
  before, after = base["buckets"][bucket]["accuracy"], matched["buckets"][bucket]["accuracy"]
  return f"{before:.3f} -> {after:.3f} {diff:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def lines(matched: dict, base: dict) -> list[str]:
  out = [
    "run/variant bucket: exact match at base 10^4 -> matched, paired difference (seed 0 / 1 / 2)"
  ]
  for stem, variant in sorted({(stem, variant) for stem, variant, _ in matched}):
    buckets = next(r for k, r in matched.items() if k[:2] == (stem, variant))["buckets"]
    for bucket in sorted(buckets, key=tasks.bucket_order):
      cells = [
        cell(matched.get((stem, variant, s)), base.get((stem, variant, s)), bucket) for s in SEEDS
      ]
      out.append(f"{stem}/{variant} {bucket}: " + " / ".join(cells))
  return out


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    print(f"error: bases.py takes no arguments; got {argv[1:]}")
    sys.exit(2)
  matched = by_name(HERE / "matched_base" / "results")
  print("\n".join(lines(matched, by_name(HERE / "results"))))


if __name__ == "__main__":
  main(sys.argv)
