"""Each claim's paired difference in every seed: `python experiments/rope_extension/seeds.py`.

The report pairs rows within one run group, but these claims pair across runs of one seed (a
fine-tune against the training-free variant, a control against the PI fine-tune) and read the
same comparison in each seed. Seed 0's runs carry no `-s0` suffix (their names predate the
seeds), so the report's seed tables cannot group them; this lines them up instead. Every cell is
`lengths.paired_cell`: A - B in mean loss (nats/token) with the report's paired bootstrap
interval over the same documents, windows protocol.
"""

import pathlib

from lcx.tools import report
from lcx.tools.report import lengths, tables

RESULTS = pathlib.Path(__file__).with_name("results")
SEEDS = (0, 1, 2)
BASE = ("rope", "none")
PI_FT = ("linear_finetuned", "none")
YARN_FT = ("yarn_finetuned", "none")
# (what, A, B, lengths): A and B are (run stem, variant).
COMPARISONS = [
  ("ntk@4 - none", ("rope", "ntk@4"), BASE, ("256", "1024")),
  ("dynamic@4 - none", ("rope", "dynamic@4"), BASE, ("256", "1024")),
  ("yarn@4 - none", ("rope", "yarn@4"), BASE, ("64", "256", "1024")),
  ("llama3@4 - none", ("rope", "llama3@4"), BASE, ("256", "1024")),
  ("longrope - none", ("rope", "longrope"), BASE, ("256", "1024")),
  ("linear@4 - none", ("rope", "linear@4"), BASE, ("64", "1024")),
  ("longrope - yarn@4", ("rope", "longrope"), ("rope", "yarn@4"), ("256", "1024")),
  ("rerope@64 - none", ("rope", "rerope@64"), BASE, ("256", "1024")),
  ("self_extend@32/4 - none", ("rope", "self_extend@32/4"), BASE, ("128", "1024")),
  ("PI fine-tune - linear@4", PI_FT, ("rope", "linear@4"), ("256",)),
  ("PI fine-tune - YaRN fine-tune", PI_FT, YARN_FT, ("256", "1024")),
  ("unscaled fine-tune - YaRN fine-tune", ("direct_finetuned", "none"), YARN_FT, ("256", "1024")),
  ("NTK fine-tune - YaRN fine-tune", ("ntk_finetuned", "none"), YARN_FT, ("256", "1024")),
  ("LongRoPE fine-tune - YaRN fine-tune", ("longrope_finetuned", "none"), YARN_FT, ("256", "1024")),
  ("unscaled fine-tune - PI fine-tune", ("direct_finetuned", "none"), PI_FT, ("256", "1024")),
  ("NTK fine-tune - PI fine-tune", ("ntk_finetuned", "none"), PI_FT, ("256", "1024")),
  ("continued - PI fine-tune", ("continued", "none"), PI_FT, ("256", "1024")),
  ("continued - rope", ("continued", "none"), BASE, ("64", "1024")),
  ("long_trained - PI fine-tune", ("long_trained", "none"), PI_FT, ("256", "1024")),
]


def windows_results(results_dir: pathlib.Path = RESULTS) -> dict:
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


def main() -> None:
  found = windows_results()
  print("A - B at length: seed " + " / seed ".join(map(str, SEEDS)))
  for what, a, b, at in COMPARISONS:
    for length in at:
      cells = " / ".join(difference(found, a, b, length, seed) for seed in SEEDS)
      print(f"{what} at {length}: {cells}")


if __name__ == "__main__":
  main()
