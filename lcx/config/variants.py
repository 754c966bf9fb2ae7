"""Evaluation variants: extension methods applied to a trained run, and which fields may change.

A variant is a name, optionally `@ARG`, that stands for a dict of dotted eval-time overrides on
the run's config. `eval.variants` lists several; they are evaluated in one process on
parameters restored once. A scaling variant replaces the whole `model.position.scaling` (and a
remap variant the whole `model.remap`), so nothing of the run's own setting leaks into it;
`none` is the run exactly as trained (a fine-tuned run keeps its own scaling).

Eval-time fields are the ones that change no parameter: position scaling, the learned table's
max_len_policy, remaps, sparse patterns, the attention kernel's chunk, the eval-time logit
temperature beta_c, compute dtype, and eval.*. Everything else under model.*, and
data.seq_len, is trained and must match the checkpoint: `check_trained` names the first that
differs (a field the checkpoint's config lacks, added to lcx since, counts as its default).
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Callable

import ml_collections

from lcx import errors
from lcx.config import defaults
from lcx.field import Unset
from lcx.model.positions.registry import plain
from lcx.model.positions.scaling import SCALING_DEFAULTS

# Prefixes of the fields that may differ from training (the rest of TRAINED must match).
EVAL_TIME = (
  "model.position.scaling",
  "model.position.max_len_policy",
  "model.remap",
  "model.attention.pattern",
  "model.attention.chunk_size",
  "model.attention.impl",
  "model.attention.block_size",
  "model.attention.beta_c",
  "model.dtype",
  "model.remat",
)
TRAINED = ("model", "data.seq_len")
# What a variant may set besides EVAL_TIME: evaluation settings, and the task a task model is
# tested on (experiments/drope: one model trained on a mix, tested per NIAH variant).
VARIANT_FIELDS = EVAL_TIME + ("eval", "data.task")

SCALING = "model.position.scaling"
PATTERN = "model.attention.pattern"
REMAP = "model.remap"
# Sections a variant replaces whole: name -> the section's defaults, which the variant updates.
SECTIONS = defaults.SECTIONS


def flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
  """Nested dicts -> {"model.position.name": value}: dotted field names, as flags spell them."""
  out = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      out.update(flatten(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out


def _is(field: str, prefixes) -> bool:
  return any(field == p or field.startswith(p + ".") for p in prefixes)


def differences(config: dict, trained: dict) -> list[tuple[str, Any, Any]]:
  """(field, value in `config`, value in `trained`) of every field where the two resolved
  configs (as dicts) differ, by dotted name, model.position.name first (a scheme switch explains
  every other difference).

  A field `trained` lacks (a run saved before lcx had it) counts as its default: a new field's
  default is the behaviour lcx had before it (model.nope_every=0, ...); its value there is None.
  """
  given = flatten(json.loads(json.dumps(config, default=list)))
  saved = flatten(json.loads(json.dumps(trained, default=list)))
  default = flatten(json.loads(json.dumps(defaults.get_config().to_dict(), default=list)))
  first = "model.position.name"
  out = []
  for field in sorted(set(given) | set(saved), key=lambda f: (f != first, f)):
    value = saved[field] if field in saved else default.get(field)
    if given.get(field) != value:
      out.append((field, given.get(field), saved.get(field)))
  return out


def trained_difference(
  config: dict, trained: dict, may_change: tuple[str, ...] = EVAL_TIME
) -> tuple[str, Any, Any] | None:
  """(field, value in `config`, value in `trained`) of the first trained field outside
  `may_change` where the two resolved configs (as dicts) differ (`differences`); None if none
  does."""
  for field, given, saved in differences(config, trained):
    if _is(field, TRAINED) and not _is(field, may_change):
      return field, given, saved
  return None


def check_trained(config: dict, trained: dict) -> None:
  """Raises ValueError naming the first trained field where `config` differs from `trained`
  (both resolved configs as dicts)."""
  differs = trained_difference(config, trained)
  if differs:
    field, given, saved = differs
    raise ValueError(
      f"{field}={given!r} differs from the checkpoint's {saved!r}: it is "
      f"a trained field. Evaluate from the run's own config (omit --config) and change only "
      f"eval-time fields: {', '.join(EVAL_TIME)}, eval.*"
    )


def _number(spec: str, arg: str) -> float:
  """A variant's numeric argument: finite (float() also reads 'nan' and 'inf')."""
  try:
    value = float(arg)
  except ValueError:
    raise ValueError(f"eval.variants: {spec!r} needs a number after '@'") from None
  if not math.isfinite(value):
    raise ValueError(f"eval.variants: {spec!r} needs a finite number after '@'")
  return value


def _scaling(rope_type: str) -> Callable[[str, str], dict]:
  def overrides(spec, arg):
    return {SCALING: {"rope_type": rope_type, "factor": _number(spec, arg)}}

  return overrides


def _read_json(spec: str, path: str) -> dict:
  try:
    return errors.load_json(path)
  except (OSError, ValueError) as error:
    raise ValueError(f"eval.variants: {spec!r}: cannot read {path}: {error}") from None


def _longrope(spec, path):
  """An HF `longrope` dict (e.g. what `./launch.sh longrope` writes)."""
  scaling = _read_json(spec, path)
  if isinstance(scaling, dict):
    scaling = scaling.get("rope_scaling", scaling)
  if not isinstance(scaling, dict) or scaling.get("rope_type", scaling.get("type")) != "longrope":
    raise ValueError(f"eval.variants: {spec!r}: {path} holds no rope_type 'longrope' dict")
  return {SCALING: scaling}


def _hf(spec, path):
  """A Hugging Face config.json (rope_scaling or rope_parameters) or a bare scaling dict."""
  from lcx.model.positions import scaling as scaling_lib

  if not os.path.exists(path):
    raise ValueError(f"eval.variants: {spec!r}: no file {path}")
  try:
    return {SCALING: scaling_lib.read_hf_scaling(path)}
  except ValueError as error:
    raise ValueError(f"eval.variants: {spec!r}: {error}") from None


def _ints(spec: str, arg: str, count: int) -> list[int]:
  parts = arg.split("/")
  if len(parts) != count or not all(p.isdigit() for p in parts):
    shape = "/".join(["N"] * count)
    raise ValueError(f"eval.variants: {spec!r} needs @{shape} (integers)")
  return [int(p) for p in parts]


def _self_extend(spec, arg):
  window, group = _ints(spec, arg, 2)
  return {REMAP: {"name": "self_extend", "window": window, "group": group}}


def _rerope(spec, arg):
  (window,) = _ints(spec, arg, 1)
  return {REMAP: {"name": "rerope", "window": window}}


def _streaming(spec, arg):
  """StreamingLLM: the first S tokens and the last W keys (the pattern), numbered by their
  cache slots (the remap)."""
  sink, window = _ints(spec, arg, 2)
  fields = {"name": "streaming", "sink": sink, "window": window}
  return {PATTERN: fields, REMAP: dict(fields)}


def _beta(spec, arg):
  """DroPE's temperature: logits times 1 + C ln(T/L) past the training length; `beta@fit`:
  C fitted on held-out data at evaluation (lcx/tools/evaluate/beta_fit.py)."""
  if arg == "fit":
    return {"eval.beta_fit.fitted": True}
  c = _number(spec, arg)
  if c < 0:
    raise ValueError(f"eval.variants: {spec!r} needs C >= 0")
  return {"model.attention.beta_c": c}


# name -> overrides(spec, arg); None: takes no argument.
VARIANTS: dict[str, Callable[[str, str], dict] | None] = {
  "none": None,
  "linear": _scaling("linear"),
  "ntk": _scaling("ntk"),
  "dynamic": _scaling("dynamic"),
  "yarn": _scaling("yarn"),
  "llama3": _scaling("llama3"),
  "longrope": _longrope,
  "hf": _hf,
  "self_extend": _self_extend,
  "rerope": _rerope,
  "beta": _beta,
  "sink": _streaming,
}


def names(spec_list: str) -> list[str]:
  """`eval.variants` as a list, in order, duplicates dropped."""
  out = []
  for spec in (s.strip() for s in spec_list.split(",")):
    if spec and spec not in out:
      out.append(spec)
  return out


def _dotted(tree: dict, prefix: str = "") -> dict:
  """A named variant's fields as dotted paths: nested dicts (a config file's form, since a
  ConfigDict key holds no dot) are walked down to a value or to a whole scaling, remap or
  pattern dict; dotted keys pass as they are."""
  out = {}
  for key, value in tree.items():
    field = prefix + key
    if isinstance(value, dict) and field not in (SCALING, *SECTIONS):
      out.update(_dotted(value, field + "."))
    else:
      out[field] = value
  return out


def overrides(spec: str, named: dict) -> dict:
  """The dotted overrides of one variant: built-in `name@arg`, or a named one from the config."""
  if spec in named:
    return _dotted(plain(named[spec]))
  name, _, arg = spec.partition("@")
  if name not in VARIANTS:
    raise errors.not_allowed(
      "eval.variants",
      spec,
      f"{', '.join(sorted(VARIANTS))} (as name@ARG), or a name in "
      f"eval.named_variants ({', '.join(sorted(named)) or 'none'})",
    )
  if VARIANTS[name] is None:
    if arg:
      raise ValueError(f"eval.variants: {spec!r}: {name!r} takes no '@' argument")
    return {}
  if not arg:
    raise ValueError(f"eval.variants: {spec!r} needs an argument after '@'")
  return VARIANTS[name](spec, arg)


def apply(config: ml_collections.ConfigDict, changes: dict) -> ml_collections.ConfigDict:
  """A copy of `config` with the overrides; a whole scaling, remap or pattern dict replaces the
  old one.

  Raises ValueError naming a field that does not exist or is trained.
  """
  config = ml_collections.ConfigDict(config.to_dict())
  for field, value in changes.items():
    if not _is(field, VARIANT_FIELDS):
      raise ValueError(
        f"variant override {field}: only eval-time fields may change at "
        f"evaluation: {', '.join(EVAL_TIME)}, eval.*, data.task"
      )
    if field == SCALING:
      if "scaling" not in config.model.position:
        raise ValueError(
          f"{SCALING}: model.position.name={config.model.position.name!r} has "
          "no RoPE scaling; scaling variants need a rotary scheme"
        )
      new = dict(SCALING_DEFAULTS, **{k: v for k, v in dict(value).items()})
      config.model.position.scaling = ml_collections.ConfigDict(
        {k: (None if isinstance(v, Unset) else v) for k, v in new.items()}
      )
      continue
    if field in SECTIONS:
      new = SECTIONS[field](value["name"]).to_dict()
      new.update(value)
      value = ml_collections.ConfigDict(new)
    *parents, leaf = field.split(".")
    node = config
    for key in parents:
      if key not in node:
        raise errors.unknown_field(f"variant override {field}: {key}", node.keys())
      node = node[key]
    if leaf not in node:
      raise errors.unknown_field(f"variant override {field}", node.keys())
    node[leaf] = value
  return config


def result_variant(spec: str, changes: dict, config: ml_collections.ConfigDict) -> str:
  """The variant as its results name it: `spec`, plus `+REMAP` (`+rerope@window=64`: the remap's
  fields off their defaults) when `config`, the one evaluated, holds a remap the variant does
  not set (`--config.model.remap.name=rerope`): `none` is the run without one, and each remap
  gets its own result file."""
  remap = config.model.remap.to_dict()
  if remap["name"] == "none" or any(_is(field, (REMAP,)) for field in changes):
    return spec
  default = SECTIONS[REMAP](remap["name"]).to_dict()
  moved = [f"{k}={v}" for k, v in remap.items() if k != "name" and v != default.get(k)]
  return f"{spec}+{remap['name']}" + (f"@{'/'.join(moved)}" if moved else "")


def file_name(spec: str) -> str:
  """The result file of a variant: `yarn@4.json`, `none+rerope.json`,
  `longrope@runs_x_factors.json.json`."""
  return re.sub(r"[^A-Za-z0-9@._=+-]", "_", spec) + ".json"
