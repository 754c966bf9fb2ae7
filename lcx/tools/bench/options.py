"""The bench's flags and what they resolve to: `define_flags`, then `from_flags` -> `Options`.

The list and count flags default to a plan: the full run's values, or with --quick a 1-2 minute
run's; a value given on the command line wins over either.
"""

from __future__ import annotations

import dataclasses
import os

from absl import flags

from lcx import errors
from lcx.config import defaults
from lcx.model import positions
from lcx.tools.bench.workload import MODEL_OPTIONS

SECTION_NAMES = ("peak", "train", "positions", "eval", "peers")  # the order they run in
DEVICE_PLANS = ("core", "extra", "tiny")  # lcx/tools/bench/device_check.py PLANS
# flag -> (type of an item or the value, full run's default, --quick's default). Every
# registered scheme by default, so a new scheme is benchmarked without editing this.
PLANS = {
  "sizes": (str, ["default", "large"], ["default"]),
  "schemes": (str, list(positions.SCHEMES), ["nope", "rope", "alibi"]),
  "options": (
    str,
    list(MODEL_OPTIONS),
    ["stick_breaking", "scale_invariant", "llama4", "gate_elementwise", "resonance"],
  ),
  "rounds": (int, 5, 2),
  "steps": (int, 2, 1),
  "train_steps": (int, 10, 3),
  "peak_sizes": (int, [1024, 2048, 4096], [2048]),
  "eval_lengths": (int, [1024, 4096, 16384, 32768, 65536], [1024, 4096]),
  "eval_repeats": (int, 2, 1),
}
PLAN_HELP = {
  "sizes": "Model sizes of the train section (comma list).",
  "schemes": "Position schemes of the positions and peers sections (comma list).",
  "options": "Model options the positions section times, as rows SCHEME+OPTION beside their "
  "scheme (lcx/tools/bench/workload.py MODEL_OPTIONS; comma list; empty: none).",
  "rounds": "Interleaved rounds of every comparison.",
  "steps": "Steps of each program per round.",
  "train_steps": "Timed steps per model size in the train section.",
  "peak_sizes": "Square matmul sizes of the peak section (comma list).",
  "eval_lengths": "Lengths of the eval section (comma list).",
  "eval_repeats": "Forward passes timed per eval point after the first (compiling) one.",
}


@dataclasses.dataclass(frozen=True)
class Options:
  """Every flag's value, plans resolved."""

  sections: list[str]
  quick: bool
  out: str
  sizes: list[str]
  schemes: list[str]
  options: list[str]
  rounds: int
  steps: int
  train_steps: int
  peak_sizes: list[int]
  eval_lengths: list[int]
  eval_repeats: int
  model_size: str
  batch_size: int
  seq_len: int
  train_scheme: str
  eval_scheme: str
  max_dense_gb: float
  eval_point: str | None
  device_check: bool
  device_plan: str | None
  plan: bool
  device_point: str | None
  deadline_s: float | None


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  fv = {"flag_values": flag_values}
  flags.DEFINE_list(
    "sections",
    list(SECTION_NAMES),
    f"Sections to run (comma list of {','.join(SECTION_NAMES)}); train and peers run peak too.",
    **fv,
  )
  flags.DEFINE_bool("quick", False, "A 1-2 minute run: fewer steps, schemes and lengths.", **fv)
  flags.DEFINE_string("out", "bench.json", "Where the JSON results go.", **fv)
  for name, (kind, full, quick) in PLANS.items():
    define = flags.DEFINE_list if isinstance(full, list) else flags.DEFINE_integer
    define(name, None, f"{PLAN_HELP[name]} Default {full}; --quick: {quick}.", **fv)
  flags.DEFINE_string(
    "model_size", "default", "Model of the positions, peers and eval sections.", **fv
  )
  flags.DEFINE_integer("batch_size", 16, "Training rows per step.", **fv)
  flags.DEFINE_integer("seq_len", 256, "Training length.", **fv)
  flags.DEFINE_string("train_scheme", "rope", "Position scheme of the train section.", **fv)
  flags.DEFINE_string("eval_scheme", "rope", "Position scheme of the eval section.", **fv)
  flags.DEFINE_float(
    "max_dense_gb",
    16.0,
    "Skip dense eval points estimated to need more (long_eval.dense_eval_bytes).",
    **fv,
  )
  flags.DEFINE_string(
    "eval_point",
    None,
    "Internal: SCHEME:SIZE:TRAIN_LEN:KERNEL:LENGTH, one "
    "eval point in this process (the eval section starts one per point).",
    **fv,
  )
  flags.DEFINE_bool(
    "device_check",
    False,
    "Run the accelerator check (lcx/tools/bench/device_check.py) instead of the sections: JSON to "
    "--out, a markdown table beside it; a tiny plan on CPU or with --quick.",
    **fv,
  )
  flags.DEFINE_string(
    "device_plan",
    None,
    f"--device_check's plan, one of {', '.join(DEVICE_PLANS)}; default: tiny on a CPU or with "
    "--quick, else core (estimated to fit 8 minutes; extra: the rest, for a second call).",
    **fv,
  )
  flags.DEFINE_bool(
    "plan",
    False,
    "With --device_check: print the plan's points with their estimated seconds and the total, "
    "and exit without running any.",
    **fv,
  )
  flags.DEFINE_string(
    "device_point", None, "Internal: one device-check measurement (JSON) in this process.", **fv
  )
  flags.DEFINE_float(
    "deadline_s",
    None,
    "--device_check: start no point after this many seconds (each is then a row saying so) and "
    "stop a running one 60 s after; for a lent machine's limited minutes.",
    **fv,
  )


def from_flags(flag_values: flags.FlagValues = flags.FLAGS) -> Options:
  """The parsed flags as Options; ValueError naming the flag on a bad value."""
  values = {
    name: flag_values[name].value
    for name in flag_values
    if name in {f.name for f in dataclasses.fields(Options)}
  }
  for name, (kind, full, quick) in PLANS.items():
    value = values[name]
    if value is None:
      values[name] = quick if values["quick"] else full
    elif isinstance(full, list):
      try:
        values[name] = [kind(v) for v in value if v]
      except ValueError:
        raise errors.not_allowed(f"--{name}", ",".join(value), "comma lists of integers") from None
  for name, allowed in (
    ("sections", SECTION_NAMES),
    ("schemes", positions.SCHEMES),
    ("options", MODEL_OPTIONS),
  ):
    if not set(values[name]) <= set(allowed):
      raise errors.not_allowed(
        f"--{name}", ",".join(values[name]), f"comma lists of {', '.join(allowed)}"
      )
  for name, allowed in (
    ("train_scheme", positions.SCHEMES),
    ("eval_scheme", positions.SCHEMES),
    ("model_size", defaults.SIZES),
  ):
    if values[name] not in allowed:
      raise errors.not_allowed(f"--{name}", values[name], allowed)
  out_dir = os.path.dirname(os.path.abspath(values["out"]))
  try:  # made now: a missing folder would otherwise fail only after every section has run
    os.makedirs(out_dir, exist_ok=True)
  except OSError as error:
    raise errors.not_allowed(
      "--out", values["out"], f"a path whose folder exists or can be made ({error.strerror})"
    ) from None
  if values["device_plan"] not in (None, *DEVICE_PLANS):
    raise errors.not_allowed("--device_plan", values["device_plan"], DEVICE_PLANS)
  for name in ("device_plan", "plan"):
    if values[name] and not values["device_check"]:
      raise errors.not_allowed(f"--{name}", values[name], "only with --device_check")
  if values["deadline_s"] is not None and values["deadline_s"] <= 0:
    raise errors.not_allowed("--deadline_s", values["deadline_s"], "a number of seconds > 0")
  point = values["eval_point"]
  if point is not None and (
    len(point.split(":")) != 5 or not all(v.isdigit() for v in point.split(":")[2::2])
  ):
    raise errors.not_allowed("--eval_point", point, "SCHEME:SIZE:TRAIN_LEN:KERNEL:LENGTH")
  return Options(**values)
