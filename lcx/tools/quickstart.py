"""`./launch.sh quickstart`: train one tiny model per position family on the default data,
evaluate each at 1x, 2x, 4x and 8x the training length, print the table with 95% intervals and
write the report (report.md, results.csv, plots) beside the runs.

Runs live in --workdir/<scheme>; re-running resumes (or skips) finished training and reuses
finished evaluations.
"""

import os
import time

from absl import app, flags

from lcx import cli
from lcx.config import checks as config_lib, defaults
from lcx.run import metrics
from lcx.tools import report  # none imports jax

flags.DEFINE_string("workdir", "runs/quickstart", "Where the runs, table and plots go.")
flags.DEFINE_list(
  "schemes",
  ["sinusoidal", "rope", "alibi", "t5", "nope"],
  "Position schemes to compare (absolute, rotary, bias and no positions).",
)
flags.DEFINE_integer("steps", 300, "Training steps per scheme.")
flags.DEFINE_integer("eval_tokens", 32768, "Validation tokens scored at every length.")
FLAGS = flags.FLAGS


def main(argv):
  del argv
  metrics.quiet_libraries()
  start, results, runs, configs = time.perf_counter(), [], [], []
  try:  # every scheme's declared fields are checked before jax loads
    for scheme in FLAGS.schemes:
      config = defaults.quickstart_config(f"pos={scheme},steps={FLAGS.steps}")
      config.eval.num_tokens = FLAGS.eval_tokens
      config_lib.check_declared(config)
      configs.append((scheme, config))
  except ValueError as error:
    cli.fail(str(error))
  from lcx.run import prepare, train  # jax, orbax, grain: seconds
  from lcx.tools import evaluate
  from lcx.tools.evaluate import during_train

  try:  # and every one prepared (the model traced) before the first one trains
    for scheme, config in configs:
      workdir = os.path.join(FLAGS.workdir, scheme)
      config_lib.check_code(config)  # check_declared ran above, before jax
      runs.append((scheme, config, workdir, prepare.prepare(config, workdir, checked=True)))
  except ValueError as error:
    cli.fail(str(error))
  for i, (scheme, config, workdir, prepared) in enumerate(runs, 1):
    print(
      f"== [{i}/{len(FLAGS.schemes)}] {scheme}: training {config.train.steps} steps at "
      f"length {config.data.seq_len} -> {workdir} ({time.perf_counter() - start:.0f} s "
      "so far)",
      flush=True,
    )
    outcome = train.train(config, workdir, prepared, evaluate_during_train=during_train.DuringTrain)
    if outcome.interrupted:
      print("== stopped early (SIGTERM): run the same command again to resume", flush=True)
      return
    evaluated = evaluate.evaluate(
      config, workdir, prepared=prepared, trained=outcome.trained, print_tables=False
    )
    results.append(evaluated["none"])
  written = report.write(results, FLAGS.workdir, title="quickstart: one tiny model per family")
  print("\n" + report.length_tables(results))
  print(f"\nreport: {written['report']}")
  print("plots: " + ", ".join(v for k, v in written.items() if v.endswith(".png")))
  print(f"quickstart took {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
