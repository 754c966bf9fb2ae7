"""`./launch.sh export --workdir=DIR [--step=N] [--out=DIR/export]`: a run's parameters as one
safetensors file plus a JSON config, for use outside lcx and Orbax (PyTorch, HF tooling, plain
numpy). `load(OUT)` reads them back as {dotted name: array} and the config.

    OUT/model.safetensors  every parameter, named as in the checkpoint (blocks.0.attn.wq, ...)
    OUT/config.json        the run's config.json, plus the step and the tokenizer
    OUT/lcx_export.json    where it came from: the run directory, the step, the checkpoint's
                           fingerprint; what lets a later export of the same run replace it

Nothing is lost: OUT must be new, empty or an earlier export of the same run holding nothing
else, and never the run directory, a folder holding it, or one inside its checkpoints. Nothing
is half-written: the files go to a fresh folder beside OUT that takes OUT's place in one rename
(an earlier export swapped out in the same step, then removed); any failure removes that folder.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import uuid

import numpy as np
from absl import app, flags
from safetensors import numpy as safetensors_numpy

from lcx import cli, errors
from lcx.run import metrics  # no jax: lcx.run.checkpoint (jax, Orbax) loads once the flags passed

WEIGHTS, CONFIG, SOURCE = "model.safetensors", "config.json", "lcx_export.json"
ALLOWED = "a new or empty directory, or an earlier export of the same run"


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


def check_out(workdir: str, out: str) -> None:
  """A ValueError naming --out unless writing the export there deletes nothing export did not
  write: the run's own files, the user's notes, another run's export."""
  run, target = os.path.realpath(workdir), os.path.realpath(out)
  reason = _clobbers_run(run, target) or _holds_others(run, target)
  if reason:
    raise ValueError(f"--out={out} {reason}; allowed: {ALLOWED}")


def _inside(path: str, folder: str) -> bool:
  return os.path.commonpath([path, folder]) == folder


def _clobbers_run(run: str, target: str) -> str | None:
  """Why OUT would replace or write into the run's checkpoint data, or None."""
  from lcx.run import checkpoint

  if target == run:
    return "is the run directory itself"
  if _inside(run, target):
    return f"contains the run directory {run}"
  for name in ("checkpoints", checkpoint.SET_ASIDE):
    if _inside(target, os.path.join(run, name)):
      return f"is inside the run's {name}/"
  return None


def _holds_others(run: str, target: str) -> str | None:
  """Why replacing OUT would delete what an earlier export of this run did not write, or None."""
  if not os.path.exists(target):
    parent = os.path.dirname(target)
    while not os.path.exists(parent):
      parent = os.path.dirname(parent)
    return None if os.path.isdir(parent) else f"is inside {parent}, a file"
  if not os.path.isdir(target):
    return "is a file, not a directory"
  names = sorted(os.listdir(target))
  if not names:
    return None
  source = _source(target)
  if source is None and set(names) <= {WEIGHTS, CONFIG}:
    return f"holds an export without {SOURCE} (an older lcx's): remove it or pick another --out"
  if source is None:
    return f"holds files export did not write ({_listed(names)})"
  if source.get("workdir") != run:
    return f"is an export of another run ({source.get('workdir')}, step {source.get('step')})"
  others = [n for n in names if n not in (WEIGHTS, CONFIG, SOURCE)]
  return f"holds files besides an earlier export ({_listed(others)})" if others else None


def _listed(names: list[str], most: int = 5) -> str:
  return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def _source(directory: str) -> dict | None:
  """The SOURCE record of the export in `directory`; None if it is not one (no readable
  record)."""
  try:
    record = errors.load_json(os.path.join(directory, SOURCE))
  except (OSError, ValueError):
    return None
  return record if isinstance(record, dict) else None


def export(workdir: str, out: str | None = None, step: int | None = None) -> str:
  """Writes OUT (default WORKDIR/export) from checkpoint `step` (default latest); returns OUT.
  Raises ValueError for an OUT it may not replace (`check_out`), before reading anything, and
  RunFault for an unreadable checkpoint or a full disk."""
  from lcx.run import checkpoint

  out = out or os.path.join(workdir, "export")
  check_out(workdir, out)
  with open(os.path.join(workdir, "config.json")) as f:
    config = json.load(f)
  params, meta = checkpoint.restore_params(workdir, step, retry="export it with --step={step}")
  record = {"config": config, "step": meta["step"], "tokenizer": meta.get("tokenizer")}
  source = {
    "workdir": os.path.realpath(workdir),
    "step": meta["step"],
    "fingerprint": checkpoint.fingerprint(workdir, meta["step"], meta),
  }

  def fill(directory: str) -> None:
    safetensors_numpy.save_file(
      flatten(params), os.path.join(directory, WEIGHTS), metadata={"step": str(meta["step"])}
    )
    for name, value in ((CONFIG, record), (SOURCE, source)):
      with open(os.path.join(directory, name), "w") as f:
        json.dump(value, f, indent=2)

  try:
    _publish(out, fill)
  except Exception as error:
    if not checkpoint._no_space(error):
      raise
    raise errors.RunFault(
      f"no space left on the device of {os.path.dirname(os.path.realpath(out))} while "
      f"exporting step {meta['step']}; removed the partial export, {out} is as it was. Free "
      "space, then run the same command"
    ) from None
  return out


def _publish(out: str, fill) -> None:
  """`fill(folder)` on a fresh folder beside OUT, which then takes OUT's place in one rename;
  the folder is removed whatever happens (holding by then the earlier export, if any)."""
  target = os.path.realpath(out)
  os.makedirs(os.path.dirname(target), exist_ok=True)
  folder = os.path.join(
    os.path.dirname(target), f".{os.path.basename(target)}.{uuid.uuid4().hex[:8]}.tmp"
  )
  os.mkdir(folder)  # not mkdtemp: the export's folder gets the umask's mode, as any other
  try:
    fill(folder)
    if os.path.isdir(target) and os.listdir(target):
      _exchange(folder, target)
    else:
      os.replace(folder, target)  # rename(2) replaces an empty directory in one step
  finally:
    shutil.rmtree(folder, ignore_errors=True)


def _exchange(new: str, old: str) -> None:
  """Swaps two folders in one step (Linux's renameat2 RENAME_EXCHANGE), so that a reader of
  `old` sees the earlier export or the new one, never neither. Where the system cannot, two
  renames: a crash between them leaves the earlier export at `new` + ".old", not lost."""
  renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
  at_cwd, rename_exchange = -100, 2
  if renameat2 is not None:
    if renameat2(at_cwd, os.fsencode(old), at_cwd, os.fsencode(new), rename_exchange) == 0:
      return
    code = ctypes.get_errno()
    if code not in (errno.EINVAL, errno.ENOSYS):  # not "unsupported here": a real failure
      raise OSError(code, os.strerror(code), old)
  os.replace(old, new + ".old")
  os.replace(new, old)
  os.replace(new + ".old", new)


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
  try:
    out = export(workdir, flags.FLAGS.out, step)
  except (ValueError, errors.RunFault) as error:  # --out refused, a damaged checkpoint, full disk
    cli.fail(str(error))
  tensors, record = load(out)
  count = sum(t.size for t in tensors.values())
  print(f"exported step {record['step']}: {len(tensors)} tensors, {count:,} parameters -> {out}")


if __name__ == "__main__":
  flags.DEFINE_string("workdir", None, "A trained run's directory.")
  flags.DEFINE_string(
    "out",
    None,
    "Where the export goes (default WORKDIR/export): a new or empty directory, or an earlier "
    "export of the same run, which it replaces.",
  )
  flags.DEFINE_integer("step", None, "Checkpoint step (default: the latest).")
  flags.mark_flags_as_required(["workdir"])
  app.run(main, flags_parser=cli.parse_flags)
