"""A named set of runs, trained and evaluated in dependency order, then one report.

    python -m lcx.tools.sweep experiments/NAME[:ARG] [--dry_run] [--only=RUN,...] [--shard=i/n]
                        [--runs_dir=runs] [--force_eval] [--merge_shards] [--jobs=N]

experiments/NAME/sweep.py defines `get_runs(arg) -> {name: Run}` (arg "" for the CPU-sized
sweep, e.g. "full" for the GPU-sized one). Each run is `python -m lcx.main` in a subprocess with
workdir RUNS_DIR/NAME/RUN (RUNS_DIR/NAME_ARG/RUN with an ARG, so the two sizes never share a
checkpoint), in dependency order. A run that exits 0 gets RUN/sweep_done.json holding its
command, a digest of its resolved config (the ConfigDict its command gives lcx, the fields too)
and, for a run `on` another or a fine-tune (train.init_from), the step and fingerprint of the
checkpoint it read; later invocations skip it while all three are unchanged, run it again
saying what changed otherwise, and re-run an interrupted one (lcx.main resumes from its
checkpoint). A training run whose command, resolved config or starting checkpoint changed
while its workdir holds checkpoints is refused, naming the difference (RUN/sweep_started.json
records each launch): those weights belong to the old settings.
Afterwards every RUNS_DIR/.../RUN/eval/*.json is copied to experiments/NAME/results/RUN/
(experiments/NAME/ARG/results/RUN/ with an ARG; never checkpoints; a result there that scored
other weights and that the run no longer writes moves to results/RUN/history/) and
lcx.tools.report writes report.md, results.csv and the plots next to results/. A shard of
n > 1 (`--shard=i/n`, e.g. one lent GPU's share) instead packs its runs' results into one archive,
OUT/shards/shard-i-of-n.tar.gz (at most 16 MiB, to bring back and commit), and leaves results/
and report.md alone; `--merge_shards` unpacks every archive there and writes the report once.
A shard stopped early (a signal, say a lent machine's deadline, or a failed run) still packs the
runs it finished, into shard-i-of-n-partial.tar.gz, so what a lent window trained comes back.
`--jobs=N` runs up to N at once, each as soon as its needs are done: a seed's fine-tunes beside
each other once its base has trained (a small model leaves most of a GPU, or a second core, idle).
"""

# The package, by concern: `plan` loads a sweep (Run, Sweep, get_runs checked, dependency order,
# shards, each run's command); `markers` holds what a run recorded and what changed since (its
# launch and done markers, resolved config, checkpoint read) and `select`s the runs to handle;
# `runner` runs them (one at a time or `--jobs` side by side, signals, the lines said of them);
# `archive` collects results, packs and merges shard archives and writes the report;
# `__main__` is the command. The names below are what experiments' sweep.py files (`Run`),
# other modules and tests use.

from lcx.tools.sweep.archive import (
  ARCHIVE_NAME,
  RESULT_MEMBER,
  archive_path,
  collect,
  coverage,
  pack,
  pack_shard,
  unpack,
  write_report,
)
from lcx.tools.sweep.markers import (
  MARKER,
  STARTED,
  changed_since_done,
  changes,
  check_unchanged,
  checkpoint_id,
  config_change,
  config_difference,
  done,
  record,
  resolved_config,
  select,
  source,
  source_change,
)
from lcx.tools.sweep.plan import (
  MODES,
  NAME,
  TRAINS,
  Run,
  Sweep,
  dependency_order,
  load,
  parse_shard,
  shards,
)
from lcx.tools.sweep.runner import (
  PIPED,
  SIDE_BY_SIDE_ENV,
  _dies_with,
  _prefixed,
  _Signals,
  again_line,
  finish,
  launch,
  ready,
  run_one,
  run_side_by_side,
  skipped_line,
  start_line,
  stopped_line,
  to_run,
)
