"""`python -m lcx.tools.sweep` (what `./launch.sh sweep` runs): the command, whose usage is the
package's docstring."""

from __future__ import annotations

import os
import shlex
import signal
import sys
import time

from absl import flags

from lcx import cli
from lcx.tools import sweep as package
from lcx.tools.sweep.archive import (
  _pack_finished,
  collect,
  coverage,
  pack_shard,
  unpack,
  write_report,
)
from lcx.tools.sweep.markers import changed_since_done, done, select
from lcx.tools.sweep.plan import load, parse_shard
from lcx.tools.sweep.runner import (
  _Signals,
  again_line,
  run_one,
  run_side_by_side,
  skipped_line,
  start_line,
  stopped_line,
  to_run,
)

__doc__ = package.__doc__  # what --help prints: absl shows the main module's


def _stop(sweep, shard, chosen, interrupted: list[str], signum: int) -> None:
  """A signal stopped the sweep: a line for each run it stopped, the finished runs packed (a
  shard), exit 128 + the signal."""
  for run in interrupted:
    print(stopped_line(sweep, run, signum), file=sys.stderr, flush=True)
  if not interrupted:
    print(
      f"[sweep] {signal.Signals(signum).name}: stopped; run the same command to resume",
      file=sys.stderr,
      flush=True,
    )
  _pack_finished(sweep, shard, chosen)
  sys.exit(128 + signum)


def _run_with_jobs(sweep, chosen, shard, jobs, force_eval, signals) -> None:
  """`--jobs` above 1: run_side_by_side, then what a signal or a failure leaves: the finished
  runs packed (a shard), one line, and the sweep's exit status."""
  failed, interrupted = run_side_by_side(sweep, chosen, jobs, force_eval, signals)
  if signals.received is not None:
    _stop(sweep, shard, chosen, interrupted, signals.received)
  if failed:
    _pack_finished(sweep, shard, chosen)
    finished = sum(done(sweep, r) for r in chosen)
    cli.fail(
      "run "
      + ", ".join(f"{sweep.name}/{run} failed with exit status {code}" for run, code in failed)
      + f"; the sweep stopped once the runs beside it ended (its lines above start with "
      f"[{failed[0][0]}]; {finished} of {len(chosen)} runs done)",
      status=1,
    )


def main(argv):
  FLAGS = flags.FLAGS
  if len(argv) != 2:
    cli.fail(
      "give one experiment: python -m lcx.tools.sweep experiments/NAME[:ARG] [flags]; got "
      f"{len(argv) - 1} arguments"
    )
  try:
    shard = parse_shard(FLAGS.shard)
    if FLAGS.jobs < 1:
      raise ValueError(f"--jobs={FLAGS.jobs}: runs at once, at least 1")
    sweep = load(argv[1], FLAGS.runs_dir)
    if FLAGS.merge_shards:
      if shard != (0, 1) or FLAGS.only or FLAGS.dry_run or FLAGS.force_eval:
        raise ValueError(
          "--merge_shards runs nothing: give it without --shard, --only, --dry_run or --force_eval"
        )
      unpacked = unpack(sweep)
    chosen = select(sweep, FLAGS.only or [], shard)
  except ValueError as error:
    cli.fail(str(error))
  if FLAGS.merge_shards:
    print(
      f"[sweep] unpacked {len(unpacked)} result files from "
      f"{os.path.join(sweep.out_dir, 'shards')} to {os.path.join(sweep.out_dir, 'results')}",
      flush=True,
    )
    print(coverage(sweep), flush=True)
    written = write_report(sweep)
    print("\nwrote:\n" + "\n".join(f"  {p}" for p in written.values()), flush=True)
    return
  total, durations = len(chosen), []
  with _Signals() as signals:
    if FLAGS.jobs > 1 and not FLAGS.dry_run:
      _run_with_jobs(sweep, chosen, shard, FLAGS.jobs, FLAGS.force_eval, signals)
    else:
      for i, run in enumerate(chosen, 1):
        head = f"[sweep {sweep.name}/{run} {i}/{total}]"
        command = to_run(sweep, run, FLAGS.force_eval)
        if command is None:
          print(f"{head} {skipped_line(sweep, run)}", flush=True)
          continue
        if FLAGS.dry_run:
          why = changed_since_done(sweep, run)
          print(head + (f"\n{again_line(sweep, run, why, 'would run')}" if why else ""))
          print(f"$ python {shlex.join(command)}", flush=True)
          continue
        print(start_line(head, i - 1, total, durations), flush=True)
        started = time.perf_counter()
        status = run_one(sweep, run, command, signals)
        durations.append(time.perf_counter() - started)
        if signals.received is not None:
          _stop(sweep, shard, chosen, [run], signals.received)
        if status != 0:
          _pack_finished(sweep, shard, chosen)
          cli.fail(
            f"run {sweep.name}/{run} failed with exit status {status}; the sweep stopped "
            f"(its output is above; {i - 1} of {total} runs done in this call)",
            status=1,
          )
  if FLAGS.dry_run:
    return
  if shard[1] > 1:  # one archive to bring back; the report is written once, by --merge_shards
    try:
      print(pack_shard(sweep, shard, chosen, partial=False), flush=True)
    except ValueError as error:
      cli.fail(str(error), status=1)
    return
  copied = collect(sweep)
  print(
    f"[sweep] copied {len(copied)} result files to {os.path.join(sweep.out_dir, 'results')}",
    flush=True,
  )
  written = write_report(sweep)
  print("\nwrote:\n" + "\n".join(f"  {p}" for p in written.values()), flush=True)


if __name__ == "__main__":
  from absl import app

  flags.DEFINE_bool("dry_run", False, "Print each run's command; run and write nothing.")
  flags.DEFINE_list("only", [], "Run only these runs (comma list); their needs must be done.")
  flags.DEFINE_string(
    "shard",
    "0/1",
    "i/n: this invocation's share of the runs, 0 <= i < n; "
    "runs connected by `needs` stay on one shard.",
  )
  flags.DEFINE_string("runs_dir", "runs", "Runs go to RUNS_DIR/NAME/RUN.")
  flags.DEFINE_integer(
    "jobs",
    1,
    "Up to this many runs at once, each once its needs are done (runs on the same "
    "workdir take turns); their output lines start with [RUN].",
  )
  flags.DEFINE_bool(
    "merge_shards",
    False,
    "Run nothing: unpack every OUT/shards/*.tar.gz into OUT/results/ and write the report.",
  )
  flags.DEFINE_bool(
    "force_eval",
    False,
    "Evaluate again (lcx.main --mode=eval --force) runs "
    "that are done; pass --force to the others' evaluation.",
  )
  app.run(main, flags_parser=cli.parse_flags)
