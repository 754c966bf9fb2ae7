"""`./launch.sh export --workdir=DIR [--step=N] [--out=DIR/export]`: a run's parameters as one
safetensors file plus a JSON config, for use outside lcx and Orbax (PyTorch, HF tooling, plain
numpy). `load(OUT)` reads them back as {dotted name: array} and the config.

    OUT/model.safetensors  every parameter, named as in the checkpoint (blocks.0.attn.wq, ...)
    OUT/config.json        the run's config.json, plus the step and the tokenizer

Nothing is half-written: both files go to a temporary directory renamed to OUT at the end.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
from absl import app, flags
from safetensors import numpy as safetensors_numpy

from lcx import cli
from lcx.run import metrics  # no jax: lcx.run.checkpoint (jax, Orbax) loads once the flags passed

WEIGHTS, CONFIG = "model.safetensors", "config.json"


def flatten(tree, prefix: str = "") -> dict[str, np.ndarray]:
  """Nested dicts (and lists) of arrays -> {"blocks.0.attn.wq": array}."""
  items = tree.items() if isinstance(tree, dict) else enumerate(tree)
  out = {}
  for key, value in items:
    name = f"{prefix}{key}"
    if isinstance(value, (dict, list, tuple)):
      out.update(flatten(value, name + "."))
    else:
      out[name] = np.asarray(value)
  return out


def export(workdir: str, out: str | None = None, step: int | None = None) -> str:
  """Writes OUT (default WORKDIR/export) from checkpoint `step` (default latest); returns OUT."""
  from lcx.run import checkpoint

  out = out or os.path.join(workdir, "export")
  with open(os.path.join(workdir, "config.json")) as f:
    config = json.load(f)
  params, meta = checkpoint.restore_params(workdir, step)
  tensors = flatten(params)
  tmp = out.rstrip(os.sep) + ".tmp"
  shutil.rmtree(tmp, ignore_errors=True)
  os.makedirs(tmp)
  safetensors_numpy.save_file(
    tensors, os.path.join(tmp, WEIGHTS), metadata={"step": str(meta["step"])}
  )
  record = {"config": config, "step": meta["step"], "tokenizer": meta.get("tokenizer")}
  with open(os.path.join(tmp, CONFIG), "w") as f:
    json.dump(record, f, indent=2)
  shutil.rmtree(out, ignore_errors=True)
  os.replace(tmp, out)
  return out


def load(directory: str) -> tuple[dict[str, np.ndarray], dict]:
  """({dotted name: array}, {"config", "step", "tokenizer"}) from an export."""
  tensors = safetensors_numpy.load_file(os.path.join(directory, WEIGHTS))
  with open(os.path.join(directory, CONFIG)) as f:
    return tensors, json.load(f)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  metrics.quiet_libraries()
  workdir = flags.FLAGS.workdir
  if not os.path.isfile(os.path.join(workdir, "config.json")):
    cli.fail(f"--workdir={workdir}: no config.json there (not an lcx run directory)")
  from lcx.run import checkpoint

  if checkpoint.latest_step(workdir) is None:
    cli.fail(f"--workdir={workdir}: no complete checkpoint to export; train it first")
  step = flags.FLAGS.step
  steps = sorted(int(s) for s in os.listdir(os.path.join(workdir, "checkpoints")) if s.isdigit())
  if step is not None and step not in steps:
    cli.fail(f"--step={step} has no checkpoint in {workdir}; allowed: {', '.join(map(str, steps))}")
  out = export(workdir, flags.FLAGS.out, step)
  tensors, record = load(out)
  count = sum(t.size for t in tensors.values())
  print(f"exported step {record['step']}: {len(tensors)} tensors, {count:,} parameters -> {out}")


if __name__ == "__main__":
  flags.DEFINE_string("workdir", None, "A trained run's directory.")
  flags.DEFINE_string("out", None, "Where the export goes (default WORKDIR/export).")
  flags.DEFINE_integer("step", None, "Checkpoint step (default: the latest).")
  flags.mark_flags_as_required(["workdir"])
  app.run(main, flags_parser=cli.parse_flags)
