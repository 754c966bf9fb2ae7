"""Entry point: python -m lcx.main --config=configs/base.py[:args] --workdir=DIR --mode=MODE.

`--mode=eval --workdir=DIR` needs no --config: the run's own DIR/config.json is the config
(`lcx/config/run_config.py:DIR`), and `--config.eval.*=...` overrides apply to it.

The same command runs on every host of a TPU pod slice or SLURM allocation: `--distributed=auto`
joins the processes when the environment shows a cluster (see lcx.run.sharding). Restarting the same
command in the same workdir resumes from the last complete checkpoint. A bad flag or config is
one `error: ...` line on stderr and exit status 2, before anything is written.
"""

import signal
import sys

from absl import app, flags
from ml_collections import config_flags

from lcx import cli, errors
from lcx.cli import fail
from lcx.config import checks as config_lib
from lcx.run import metrics  # none of them imports jax
from lcx.run.metrics import say

# mode -> (trains, evaluates); eval modes plan (and check) every evaluation before training.
MODES = {"train": (True, False), "eval": (False, True), "train_and_eval": (True, True)}

config_flags.DEFINE_config_file("config", None, "Experiment config file.", lock_config=True)
flags.DEFINE_string("workdir", None, "Run directory: config, metrics, checkpoints, eval.")
flags.DEFINE_enum("mode", "train", list(MODES), "What to run.")
flags.DEFINE_integer("eval_step", None, "Checkpoint step to evaluate (default: latest).")
flags.DEFINE_bool(
  "force",
  False,
  "Evaluate again even where a result for the same checkpoint step and settings exists.",
)
flags.DEFINE_enum(
  "distributed",
  "auto",
  list(cli.DISTRIBUTED_MODES),
  "jax.distributed.initialize(): auto (when SLURM or TPU pod variables or JAX's "
  "Cloud TPU VM detection show a cluster), on (always), off (never).",
)
flags.DEFINE_string("coordinator_address", "", "host:port of process 0 (explicit multi-host).")
flags.DEFINE_integer("num_processes", 0, "Number of processes (explicit multi-host).")
flags.DEFINE_integer("process_id", -1, "This process's index (explicit multi-host).")
flags.mark_flags_as_required(["workdir"])

FLAGS = flags.FLAGS


def parse_flags(argv):
  """absl's flag parsing, with each error (config file, override, type) as one line."""
  return cli.parse_config_flags(
    argv,
    lambda: (
      f"--config is required: --mode={FLAGS.mode} with --workdir={FLAGS.workdir}, which holds "
      "no run (config.json) to start from"
    ),
  )


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  metrics.quiet_libraries()
  cluster = dict(
    mode=FLAGS.distributed,
    coordinator_address=FLAGS.coordinator_address,
    num_processes=FLAGS.num_processes,
    process_id=FLAGS.process_id,
  )
  run(FLAGS.config, FLAGS.workdir, FLAGS.mode, FLAGS.eval_step, force=FLAGS.force, cluster=cluster)


def run(
  config,
  workdir: str,
  mode: str,
  eval_step: int | None = None,
  *,
  force: bool = False,
  cluster: dict | None = None,
) -> None:
  """The command: the config checked once (its declared fields before jax is imported, the
  rest before the modules below are), the cluster joined (`cluster`: initialize_distributed's
  arguments, from the flags; None: one process), then the mode's work, from one `prepare` (the
  model traced once) and one plan of the evaluations, both before anything is written; a bad
  value exits via `fail`."""
  trains, evaluates = MODES[mode]
  try:  # a bad value is refused before jax is imported (lcx.config.checks imports none)
    config_lib.check_declared(config)
  except ValueError as error:
    fail(str(error))
  from lcx.run import sharding  # jax

  try:
    sharding.initialize_distributed(**(cluster or {"mode": "off"}))
    config_lib.check_code(config)  # after the join: the batch splits across its processes
  except ValueError as error:
    fail(str(error))
  from lcx.run import prepare, train  # orbax, grain, TFDS: seconds
  from lcx.tools import evaluate
  from lcx.tools.evaluate import during_train

  try:
    prepared = prepare.prepare(config, workdir if trains else None, checked=True)  # + init_from
    todo = evaluate.plan(prepared) if evaluates else None  # every variant checked
  except (ValueError, errors.RunFault) as error:
    fail(str(error))
  interrupted = (
    "interrupted (SIGINT): run the same command to resume from the checkpoint just saved"
  )
  try:
    outcome = None
    if trains:
      outcome = train.train(
        config, workdir, prepared, evaluate_during_train=during_train.DuringTrain
      )
  except errors.RunFault as error:  # a held workdir, a diverged loss, an unreadable checkpoint
    fail(str(error))
  except KeyboardInterrupt:  # a second Ctrl-C just after train's handler was put back: saved
    say(interrupted)
    sys.exit(128 + signal.SIGINT)
  if outcome and outcome.signal == "SIGINT":  # Ctrl-C: saved; exit as interrupted, no traceback
    say(interrupted)
    sys.exit(128 + signal.SIGINT)
  if outcome and outcome.interrupted and evaluates:
    say(
      "training stopped early (SIGTERM or preemption): skipping evaluation; run the same "
      "command again to resume and evaluate"
    )
    return
  if evaluates:
    try:
      with cli.sigint_exits(
        f"[lcx] interrupted (SIGINT): evaluation stopped; finished results are in {workdir}/eval"
      ):
        trained = outcome.trained if outcome else None
        evaluate.evaluate(
          config, workdir, eval_step, force=force, prepared=prepared, todo=todo, trained=trained
        )
    except (ValueError, FileNotFoundError, errors.RunFault) as error:  # a trained field
      # changed, no checkpoint, an unreadable one
      fail(str(error))


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
