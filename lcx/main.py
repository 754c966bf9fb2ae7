"""Entry point: python -m lcx.main --config=configs/base.py[:args] --workdir=DIR --mode=MODE.

The same command runs on every host of a TPU pod slice or SLURM allocation: JAX's cluster
detection joins the processes (see lcx.sharding.initialize_distributed). Restarting the same
command in the same workdir resumes from the last complete checkpoint.
"""

from absl import app, flags
from ml_collections import config_flags

from lcx import config as config_lib, evaluate, metrics, sharding, train

MODES = ("train", "eval", "train_and_eval")

config_flags.DEFINE_config_file("config", None, "Experiment config file.", lock_config=True)
flags.DEFINE_string("workdir", None, "Run directory: config, metrics, checkpoints, eval.")
flags.DEFINE_enum("mode", "train", MODES, "What to run.")
flags.DEFINE_integer("eval_step", None, "Checkpoint step to evaluate (default: latest).")
flags.DEFINE_string("coordinator_address", "", "host:port of process 0 (explicit multi-host).")
flags.DEFINE_integer("num_processes", 0, "Number of processes (explicit multi-host).")
flags.DEFINE_integer("process_id", -1, "This process's index (explicit multi-host).")
flags.mark_flags_as_required(["config", "workdir"])

FLAGS = flags.FLAGS


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  metrics.quiet_libraries()
  sharding.initialize_distributed(FLAGS.coordinator_address, FLAGS.num_processes,
                                  FLAGS.process_id)
  config = FLAGS.config
  if FLAGS.mode in ("eval", "train_and_eval"):
    config_lib.validate_eval(config)  # fail before training, not after
  if FLAGS.mode in ("train", "train_and_eval"):
    train.train(config, FLAGS.workdir)
  if FLAGS.mode in ("eval", "train_and_eval"):
    evaluate.evaluate(config, FLAGS.workdir, FLAGS.eval_step)


if __name__ == "__main__":
  app.run(main)
