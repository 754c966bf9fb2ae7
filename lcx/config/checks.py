"""Config checks that run before any compilation, each naming the field and what is allowed.

ml_collections already rejects unknown fields and wrong types on the command line (lcx.cli
words its errors with `field_path_error`); this module checks each field against its record
(lcx/config/fields.py's CONFIG: what it allows, one wording for all), the rules across fields,
and delegates each sub-dict to the package that owns it. The checks that need
other code live with it: the model's (a scheme's hooks and dimensions, remaps, kernels) in
`lcx.model.decoder.check_config`, the mesh's in `lcx.run.sharding.check_mesh`, the evaluation's in
`lcx.tools.evaluate.checks`, the LongRoPE search's in `lcx.tools.longrope.validate`.

Importing it loads no jax: the records are declared without it (the model's in
lcx/model/options.py, whose modules read their allowed values there; the schemes' in
lcx/model/positions/fields.py), so that `check_declared` refuses a bad value before the entry
points import jax. `check_fields` then imports the model's checks when it runs (and
`lcx.run.sharding.validate` adds the mesh's).
"""

from __future__ import annotations

import importlib.util
import math
import os

import ml_collections

from lcx import data, errors, files
from lcx.config import fields, protocols
from lcx.model import patterns
from lcx.model.positions import fields as position_fields


def _non_finite(tree, prefix: str = ""):
  """(field, value) of the first float in `tree` (a config as dicts, tuples inside) that is NaN
  or infinite, else None: every range check passes inf (`lr > 0`), and a NaN makes any
  result NaN, so no float field may hold either."""
  items = tree.items() if isinstance(tree, dict) else enumerate(tree)
  for key, value in items:
    field = f"{prefix}.{key}" if isinstance(tree, dict) else f"{prefix}[{key}]"
    if isinstance(value, (dict, list, tuple)):
      found = _non_finite(value, field.lstrip("."))
      if found:
        return found
    elif isinstance(value, float) and not math.isfinite(value):
      return field.lstrip("."), value
  return None


def check_trackers(text: str) -> None:
  """Raises ValueError naming train.trackers for a tracker whose package is not installed (and
  how to install it), before anything is built; its record refuses unknown names."""
  for name in fields.items(text):
    package = fields.TRACKERS[name]
    if package and importlib.util.find_spec(package) is None:
      raise ValueError(
        f"train.trackers={text!r}: {name} needs the {package} package, which is not "
        f"installed: pip install 'lcx[{package}]' (launch.sh: LCX_EXTRAS={package})"
        f", or leave {name} out of train.trackers"
      )


def eval_combos(eval_cfg) -> list[tuple[str, str]]:
  """(protocol, documents) pairs that eval.protocol x eval.documents ask for, in order; each
  protocol only with the documents it runs on (last_k, the end of long documents: 'long')."""
  return [
    (p, d)
    for d in fields.items(eval_cfg.documents)
    for p in fields.items(eval_cfg.protocol)
    if d in protocols.PROTOCOLS[p].documents
  ]


def check_fields(config: ml_collections.ConfigDict) -> None:
  """Every check but the mesh's: ranges, cross-field rules and each section's own (no I/O,
  no model trace). Those that need no model code come first, so a bad value is refused before
  jax is imported. A command runs the two parts apart (check_declared before importing jax,
  check_code after jax.distributed is up), each once."""
  check_declared(config)
  check_code(config)


def check_code(config: ml_collections.ConfigDict) -> None:
  """The checks that need the data's and the model's code, once `check_declared` passed."""
  data.validate(config.data)  # the global batch split across jax.process_count() processes
  from lcx.model import decoder as model  # jax: imported once the declared fields passed

  model.check_config(config, train_length(config))


def check_declared(config: ml_collections.ConfigDict) -> None:
  """The checks that read only the declarations (every field's record, each scheme's and remap's,
  the data and pattern sections) and the rules across fields: no jax is imported."""
  found = _non_finite(config.to_dict())
  if found:
    raise errors.not_allowed(*found, "a finite number")
  fields.CONFIG.check(config, "")
  check_trackers(config.train.trackers)  # each one's package installed
  m = config.model
  _check_position_fields(m)
  position_fields.check(m.position, position_fields.SCHEMES, position_fields.SCHEME_PREFIX)
  if m.attention.kind == "stick_breaking" and m.attention.sink != "none":
    raise ValueError(
      f"model.attention.sink={m.attention.sink!r} is not allowed with "
      "model.attention.kind='stick_breaking', whose weights already sum to <= 1 (the rest "
      "goes to no key, as a sink's would); allowed: 'none'"
    )
  if m.num_heads % m.num_kv_heads:
    raise ValueError(
      f"model.num_kv_heads={m.num_kv_heads} must divide model.num_heads={m.num_heads}"
    )
  if config.train.min_lr > config.train.lr:
    raise ValueError(f"train.min_lr={config.train.min_lr} must be <= train.lr={config.train.lr}")
  if config.train.random_positions and config.train.random_positions < config.data.seq_len:
    raise ValueError(
      f"train.random_positions={config.train.random_positions} must be 0 (off) "
      f"or >= data.seq_len={config.data.seq_len}"
    )
  _check_sampled_positions(config)
  if config.train.eval_every and config.data.name == "task":
    raise ValueError(
      f"train.eval_every={config.train.eval_every} scores validation text; a "
      "data.name='task' run is scored by exact match after training "
      "(--mode=train_and_eval): set train.eval_every=0"
    )
  data.validate(config.data, process_count=1)  # the processes' share: _check_model's
  if m.attention.temperature == "llama4" and not (m.nope_every or m.position.name == "nope"):
    raise ValueError(
      "model.attention.temperature='llama4' tempers the NoPE blocks only, and there are none; "
      "allowed with model.nope_every >= 1 or model.position.name='nope'"
    )
  position_fields.check(m.remap, position_fields.REMAPS, position_fields.REMAP_PREFIX)
  patterns.validate(m.attention.pattern)


def _check_position_fields(model_cfg) -> None:
  """Two mistakes the scheme's own checks would report by a field the user never set."""
  p = model_cfg.position
  held = sorted(set(p.keys()) - {"name"})
  schemes = position_fields.SCHEMES
  if p.name in schemes and held != sorted(schemes[p.name].defaults):
    raise ValueError(
      f"model.position.name={p.name!r}, but model.position holds another scheme's "
      f"fields {held}: a scheme's fields come with its "
      f"config, so pick it with --config=configs/base.py:pos={p.name} instead"
    )
  if "rotary_dim" in p and p.rotary_dim is None and model_cfg.head_dim % 2:
    raise ValueError(
      f"model.head_dim={model_cfg.head_dim} must be even for the rotary scheme "
      f"{p.name!r} (it rotates pairs of features); set an even model.head_dim, "
      f"or model.position.rotary_dim to an even number below {model_cfg.head_dim}"
    )


def _check_sampled_positions(config) -> None:
  """PoSE and randomized positions: each 0 (off) or enough positions for a row; not both."""
  t, seq_len = config.train, config.data.seq_len
  if not (t.pose_target == 0 or t.pose_target >= seq_len):
    raise errors.not_allowed(
      "train.pose_target", t.pose_target, f"0 (off) or >= data.seq_len={seq_len}"
    )
  if t.pose_target and t.random_positions:
    raise ValueError(
      f"train.pose_target={t.pose_target!r} is not allowed with "
      f"train.random_positions={t.random_positions!r}; allowed: one of the two, "
      "the other 0"
    )
  if config.eval.random_positions < -1:
    raise errors.not_allowed(
      "eval.random_positions",
      config.eval.random_positions,
      "-1 (as trained: train.random_positions), 0 (off) or >= the longest eval length",
    )


def eval_lengths(config) -> list[int]:
  """Explicit eval.lengths, else eval.multipliers times the training length (model.max_len),
  ascending."""
  if config.eval.lengths:
    return sorted({int(n) for n in config.eval.lengths})
  return sorted({max(1, int(round(f * config.model.max_len))) for f in config.eval.multipliers})


def resolve(config: ml_collections.ConfigDict, vocab_size: int) -> ml_collections.ConfigDict:
  """A copy with derived values filled in: the vocabulary size (the tokenizer's), and for a
  synthetic task the training length model.max_len = the longest position trained (the longest
  document's inputs, often far below data.seq_len), which extension methods take as their
  original length and a learned table as its size; eval.random_positions=-1 (as trained)
  becomes train.random_positions."""
  config = ml_collections.ConfigDict(config.to_dict())
  if config.model.vocab_size == 0:
    config.model.vocab_size = vocab_size
  elif config.model.vocab_size < vocab_size:
    raise ValueError(
      f"model.vocab_size={config.model.vocab_size} is smaller than the "
      f"tokenizer's {vocab_size}; use 0 to take the tokenizer's"
    )
  if config.data.name == "task":
    config.model.max_len = train_length(config)
  if config.eval.random_positions == -1:  # as trained: a randomized run is scored as trained
    config.eval.random_positions = config.train.random_positions
  return config


def train_length(config) -> int:
  """The longest position count training shows the model: data.seq_len, or for a synthetic
  task the inputs of its longest document (a row holds whole documents, positions from 0)."""
  d = config.data
  if d.name != "task":
    return d.seq_len
  return min(d.seq_len, data.tasks.document_tokens(d.task, d.task_max_len) - 1)


def save(config, workdir: str) -> str:
  """Writes the resolved config to workdir/config.json (and .py-readable repr)."""
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, "config.json")
  files.write_json(path, config.to_dict(), indent=2, sort_keys=True, default=list)
  return path
