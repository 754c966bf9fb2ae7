"""`python -m lcx.tools.bench [--quick] [--sections=peak,train,...] [--out=bench.json] ...`: runs
the sections, prints their tables and writes the JSON (flags: lcx/tools/bench/options.py). With
--device_check: the accelerator check instead (lcx/tools/bench/device_check.py)."""

from __future__ import annotations

import json

from absl import app, flags

from lcx import cli, errors
from lcx.tools import bench
from lcx.tools.bench import device_check, long_eval, options


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments {' '.join(argv[1:])}; the bench takes flags only")
  try:
    opts = options.from_flags(flags.FLAGS)
  except ValueError as error:
    cli.fail(str(error))
  if opts.device_point:
    print("DEVICE_POINT " + json.dumps(device_check.run_point(json.loads(opts.device_point))))
    return
  if opts.device_check and opts.plan:
    print(device_check.plan_text(device_check.plan_name(opts.quick, opts.device_plan)))
    return
  if opts.device_check:
    try:
      results = device_check.run(opts.out, opts.quick, opts.deadline_s, opts.device_plan)
    except errors.RunFault as error:  # a full disk while writing its files
      cli.fail(str(error))
    print(device_check.table(results), flush=True)
    print(f"\nwrote {opts.out} and its .md", flush=True)
    return
  if opts.eval_point:
    scheme, size, train_len, kernel, length = opts.eval_point.split(":")
    point = long_eval.eval_point(
      scheme, size, int(train_len), kernel, int(length), opts.eval_repeats
    )
    print("EVAL_POINT " + json.dumps(point), flush=True)
    return
  results = bench.run(opts)
  print(bench.format_report(results), flush=True)
  try:
    bench.write(results, opts.out)
  except errors.RunFault as error:  # a full disk: the earlier file as it was
    cli.fail(str(error))
  print(f"\nwrote {opts.out}", flush=True)


if __name__ == "__main__":
  options.define_flags()
  flags.adopt_module_key_flags(options)  # --help lists them
  app.run(main, flags_parser=cli.parse_flags)
