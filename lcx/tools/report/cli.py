"""`python -m lcx.tools.report PATH... --out=DIR`: load, check the flags (one `error:` line, exit 2,
nothing written), print the tables, write the report."""

import os
import sys

from absl import flags

from lcx import cli, errors
from lcx.tools.report.claims import judge, read_claims
from lcx.tools.report.kinds import baselines
from lcx.tools.report.load import HISTORY, checkpoint_warning, corpus_warning, load, superseded
from lcx.tools.report.tables import as_seeds
from lcx.tools.report.write import format_tables, write


def define_flags() -> None:
  flags.DEFINE_string("out", None, "Directory for report.md, results.csv and the plots.")
  flags.DEFINE_string("title", "lcx report", "Title of report.md.")
  flags.DEFINE_string(
    "baseline",
    "",
    "run/variant each result is paired against (default: each group's first); STEM/VARIANT of "
    "runs named STEM-s<seed>: each seeded result against the baseline of its own seed, and a "
    "table of those differences across seeds. For task results: a system (the run name without "
    "task and seed, e.g. rope), paired in each task example by example.",
  )
  flags.DEFINE_float(
    "effective_tolerance",
    None,
    "Adds the effective context length table: the longest length whose loss stays within this "
    "many nats/token of the loss at the training length.",
  )
  flags.DEFINE_string(
    "claims",
    "",
    "experiments/NAME[:ARG]: judge the claims its sweep.py declares (CLAIMS) on the results "
    "given and add the Claims (pre-declared) section: per claim and length the mean difference "
    "over seeds, its t interval, the Holm-adjusted p, the seeds whose bootstrap interval agrees, "
    "the MDE and the verdict (lcx/tools/report/claims.py).",
  )
  flags.mark_flag_as_required("out")


def main(argv):
  paths = argv[1:]
  if not paths:
    cli.fail("give at least one PATH: a result JSON, a directory or a glob")
  out = flags.FLAGS.out
  if os.path.exists(out) and not os.path.isdir(out):
    cli.fail(f"--out={out}: exists and is not a directory")
  try:
    results = as_seeds(load(paths))  # the names the tables print, for --baseline
  except ValueError as error:
    cli.fail(str(error))
  baseline = flags.FLAGS.baseline
  if baseline and baseline not in baselines(results):
    cli.fail(str(errors.not_allowed("--baseline", baseline, baselines(results) or ["(none)"])))
  tolerance = flags.FLAGS.effective_tolerance
  if tolerance is not None and not tolerance >= 0:
    cli.fail(str(errors.not_allowed("--effective_tolerance", tolerance, ">= 0 (nats/token)")))
  claims = _claims(flags.FLAGS.claims, results)
  older = superseded(paths)
  if older:
    print(
      f"[report] read the newest result of each name (eval/NAME.json); left out {len(older)} "
      f"replaced ones in {HISTORY}/ folders (name such a file to read it): " + ", ".join(older),
      file=sys.stderr,
      flush=True,
    )
  for warning in filter(None, (corpus_warning(results), checkpoint_warning(results))):
    print(warning, file=sys.stderr, flush=True)
  print(format_tables(results, baseline, tolerance, claims), flush=True)
  try:
    written = write(results, out, flags.FLAGS.title, baseline, tolerance, claims)
  except errors.RunFault as error:  # a full disk: report.md and results.csv as they were
    cli.fail(str(error))
  print("\nwrote:\n" + "\n".join(f"  {p}" for p in written.values()), flush=True)


def _claims(target: str, results) -> list:
  """The claims `--claims` names, each judged once here, so a claim the results cannot judge is
  one `error:` line before anything is printed or written."""
  if not target:
    return []
  try:
    claims = read_claims(target)
    judge(results, claims)
  except ValueError as error:
    cli.fail(str(error))
  return claims
