"""Each claim's paired difference in every seed: `python experiments/rope_extension/seeds.py`
(the bytes regime, L = 64) or `... seeds.py matched` (`:matched`, L = 256).

The report pairs rows within one run group, but these claims pair across runs of one seed (a
fine-tune against the training-free variant, a control against the PI fine-tune) and read the
same comparison in each seed. Seed 0's runs carry no `-s0` suffix (their names predate the
seeds): read here as seed 0, as `report.as_seeds` shows them in the report. Every cell is
`lengths.paired_cell`: A - B in mean loss (nats/token) with the report's paired bootstrap
interval over the same documents, windows protocol.
"""

import pathlib
import sys

from lcx.tools import report
from lcx.tools.report import lengths, tables

HERE = pathlib.Path(__file__).parent
# sweep argument -> (results directory, L)
REGIMES = {"": (HERE / "results", 64), "matched": (HERE / "matched" / "results", 256)}
SEEDS = (0, 1, 2)
BASE = ("rope", "none")
PI_FT = ("linear_finetuned", "none")
YARN_FT = ("yarn_finetuned", "none")


def comparisons(L: int) -> list:
  """(what, A, B, lengths) of each claim at training length L: A and B are (run stem,
  variant); lengths are L's multiples, as the sweep evaluates them."""
  x1, x2, x4, x16 = (str(m * L) for m in (1, 2, 4, 16))
  rerope, self_extend = f"rerope@{L}", f"self_extend@{L // 2}/4"
  return [
    ("ntk@4 - none", ("rope", "ntk@4"), BASE, (x4, x16)),
    ("dynamic@4 - none", ("rope", "dynamic@4"), BASE, (x4, x16)),
    ("yarn@4 - none", ("rope", "yarn@4"), BASE, (x1, x4, x16)),
    ("llama3@4 - none", ("rope", "llama3@4"), BASE, (x4, x16)),
    ("longrope - none", ("rope", "longrope"), BASE, (x4, x16)),
    ("linear@4 - none", ("rope", "linear@4"), BASE, (x1, x16)),
    ("longrope - yarn@4", ("rope", "longrope"), ("rope", "yarn@4"), (x4, x16)),
    (f"{rerope} - none", ("rope", rerope), BASE, (x4, x16)),
    (f"{self_extend} - none", ("rope", self_extend), BASE, (x2, x16)),
    ("PI fine-tune - linear@4", PI_FT, ("rope", "linear@4"), (x4,)),
    ("PI fine-tune - YaRN fine-tune", PI_FT, YARN_FT, (x4, x16)),
    ("unscaled fine-tune - YaRN fine-tune", ("direct_finetuned", "none"), YARN_FT, (x4, x16)),
    ("NTK fine-tune - YaRN fine-tune", ("ntk_finetuned", "none"), YARN_FT, (x4, x16)),
    ("LongRoPE fine-tune - YaRN fine-tune", ("longrope_finetuned", "none"), YARN_FT, (x4, x16)),
    ("unscaled fine-tune - PI fine-tune", ("direct_finetuned", "none"), PI_FT, (x4, x16)),
    ("NTK fine-tune - PI fine-tune", ("ntk_finetuned", "none"), PI_FT, (x4, x16)),
    ("continued - PI fine-tune", ("continued", "none"), PI_FT, (x4, x16)),
    ("continued - rope", ("continued", "none"), BASE, (x1, x16)),
    ("long_trained - PI fine-tune", ("long_trained", "none"), PI_FT, (x4, x16)),
  ]


def windows_results(results_dir: pathlib.Path) -> dict:
  """(run stem, seed, variant) -> windows result. LongRoPE's variant names its factors file,
  whose path differs by seed: it is `longrope` here."""
  found = {}
  for r in report.load([str(results_dir)]):
    if r.get("kind") != "lengths" or r["protocol"].get("protocol") != "windows":
      continue
    match = tables.SEEDED_RUN.match(r["run"])
    stem, seed = (match["stem"], int(match["seed"])) if match else (r["run"], 0)
    variant = "longrope" if r["variant"].startswith("longrope@") else r["variant"]
    found[stem, seed, variant] = r
  return found


def difference(found: dict, a, b, length: str, seed: int) -> str:
  ra, rb = found.get((a[0], seed, a[1])), found.get((b[0], seed, b[1]))
  if ra is None or rb is None:
    return "not run"
  return lengths.paired_cell(ra["lengths"][length], rb["lengths"][length], rb["protocol"])


def main(argv: list[str]) -> None:
  arg = argv[1] if len(argv) > 1 else ""
  if arg not in REGIMES or len(argv) > 2:
    print(f"error: seeds.py takes one of {', '.join(repr(a) for a in REGIMES)}; got {argv[1:]}")
    sys.exit(2)
  results_dir, L = REGIMES[arg]
  if not results_dir.is_dir():
    sweep = "experiments/rope_extension" + (f":{arg}" if arg else "")
    print(f"error: {results_dir}: no results yet (./launch.sh sweep {sweep})")
    sys.exit(2)
  found = windows_results(results_dir)
  print("A - B at length: seed " + " / seed ".join(map(str, SEEDS)))
  for what, a, b, at in comparisons(L):
    for length in at:
      cells = " / ".join(difference(found, a, b, length, seed) for seed in SEEDS)
      print(f"{what} at {length}: {cells}")


if __name__ == "__main__":
  main(sys.argv)
