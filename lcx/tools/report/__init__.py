"""Tables, a CSV and plots from evaluation results (schema "lcx.eval/1"), nothing else.

    python -m lcx.tools.report PATH... --out=DIR [--title=TEXT] [--baseline=RUN/VARIANT]
      [--effective_tolerance=NATS] [--claims=experiments/NAME]

PATH: a result JSON, a directory (every lcx result JSON below it, e.g. runs/x/eval/ or
experiments/NAME/results/) or a glob. Prints the markdown tables and writes DIR/report.md,
DIR/results.csv and the PNG plots that have data. Reads JSON only: no jax, no model, so it runs
anywhere the results were copied to. Every table goes through one renderer (`markdown_table`);
report.md and results.csv are byte-identical for the same inputs, so README tables reproduce.

The package, by concern: `load` reads results; `kinds` holds one record per result kind (its
checks, sections, CSV rows, plots), built from `lengths`, `tasks` and `passkey`; `tables` is
the renderer, cell formats and long-form rows they share, and the pivot, seed and rank tables
built from those rows; `plots` draws; `claims` judges an experiment's pre-declared claims
(the verdict engine); `write` puts report.md and results.csv together; `cli` is the command.
The names below are what other modules, notebooks and tests use.
"""

from lcx.tools.report.claims import (
  Claim,
  claims_table,
  holm,
  judge,
  read_claims,
  t_cdf,
  t_interval,
  t_quantile,
)
from lcx.tools.report.kinds import KINDS, baselines
from lcx.tools.report.lengths import (
  baseline_pairs,
  effective_length,
  effective_length_tables,
  length_pair_tables,
  length_pairs,
  length_rank_tables,
  length_seed_pair_tables,
  length_table,
  length_tables,
  longppl_tables,
  pair_tables,
  paired,
  paired_cell,
  position_tables,
  seed_pair_tables,
  seed_tables,
  variant_tables,
)
from lcx.tools.report.load import (
  COMMON_KEYS,
  HISTORY,
  SCHEMA,
  check,
  checkpoint_warning,
  corpus_warning,
  load,
  superseded,
)
from lcx.tools.report.passkey import passkey_tables
from lcx.tools.report.plots import (
  plot_length_sweep,
  plot_loss_by_position,
  plot_passkey,
  plot_perplexity,
  plot_task_errors,
  plot_tasks,
  plot_variants,
)
from lcx.tools.report.tables import (
  CSV_COLUMNS,
  SEEDED_RUN,
  as_seeds,
  describe_protocol,
  label,
  markdown_table,
)
from lcx.tools.report.tasks import (
  TASK_METRICS,
  extrapolation_accuracy,
  rank_seed_tables,
  rank_tables,
  system,
  task_error_tables,
  task_seed_tables,
  task_tables,
)
from lcx.tools.report.write import (
  CLAIMS_HEADING,
  csv_rows,
  format_csv,
  format_report,
  format_tables,
  sections,
  write,
)

__all__ = [
  "CLAIMS_HEADING",
  "Claim",
  "CSV_COLUMNS",
  "COMMON_KEYS",
  "HISTORY",
  "KINDS",
  "SCHEMA",
  "SEEDED_RUN",
  "TASK_METRICS",
  "as_seeds",
  "baseline_pairs",
  "baselines",
  "check",
  "claims_table",
  "checkpoint_warning",
  "corpus_warning",
  "csv_rows",
  "describe_protocol",
  "effective_length",
  "effective_length_tables",
  "extrapolation_accuracy",
  "format_csv",
  "format_report",
  "format_tables",
  "holm",
  "judge",
  "label",
  "length_pair_tables",
  "length_seed_pair_tables",
  "length_pairs",
  "length_rank_tables",
  "length_table",
  "length_tables",
  "load",
  "longppl_tables",
  "markdown_table",
  "pair_tables",
  "paired",
  "paired_cell",
  "passkey_tables",
  "plot_length_sweep",
  "plot_loss_by_position",
  "plot_passkey",
  "plot_perplexity",
  "plot_task_errors",
  "plot_tasks",
  "plot_variants",
  "position_tables",
  "rank_seed_tables",
  "rank_tables",
  "read_claims",
  "sections",
  "seed_pair_tables",
  "seed_tables",
  "superseded",
  "system",
  "t_cdf",
  "t_interval",
  "t_quantile",
  "task_error_tables",
  "task_seed_tables",
  "task_tables",
  "variant_tables",
  "write",
]
