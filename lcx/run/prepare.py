"""What every entry point builds once from a config, before any step: `prepare(config)`.

Train, evaluate, the LongRoPE search and generation all start here, so the config is checked,
the tokenizer loaded (a corpus built, a SentencePiece model trained on first use), the
vocabulary and training length resolved, the mesh made and the model traced abstractly exactly
once per process. An evaluation variant changes eval-time fields only (scaling, remap, pattern),
so `for_variant` re-traces the model for its config and keeps everything else, parameters
included.

Training also resolves `train.init_from` here (`prepare(config, workdir)`), so a fine-tune
whose source is missing or does not fit fails before anything is written.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

import jax
import ml_collections
from flax import nnx

from lcx import data, errors
from lcx.config import checks as config_lib, fields, variants
from lcx.data import tokenizers
from lcx.model import decoder as model_lib
from lcx.model.decoder import is_variable
from lcx.model.positions import scaling as scaling_lib
from lcx.run import checkpoint, resume, sharding
from lcx.run.metrics import say


@dataclasses.dataclass(frozen=True)
class Source:
  """The checkpoint a fine-tune starts from (`train.init_from`): absolute run dir and step."""

  workdir: str
  step: int


@dataclasses.dataclass(frozen=True)
class Prepared:
  """A resolved config and what is built from it.

  `config`: validated and resolved (model.vocab_size from the tokenizer, model.max_len the
  longest position trained); `graphdef` and `abstract_params` (shape, dtype and sharding of
  every parameter, nothing allocated) describe the model for `nnx.merge`.
  """

  config: ml_collections.ConfigDict
  tokenizer: Any
  mesh: jax.sharding.Mesh
  rules: dict
  graphdef: Any
  abstract_params: Any
  init_from: Source | None = None  # training starts from these parameters (a fresh run only)
  # A resume's accepted schedule changes (train.allow_changes): the entry `train` adds to
  # WORKDIR/config_history.jsonl (`lcx.run.resume.record`); None when nothing changed.
  changed: dict | None = None


def abstract_sharded(tree, mesh, rules):
  """Shape, dtype and sharding of every leaf: Variables by their logical axes, else replicated."""

  def one(x):
    if isinstance(x, nnx.Variable):
      spec = sharding.logical_to_spec(x.get_metadata().get("logical_axes"), rules)
      value = x.get_value()
      return x.replace(
        jax.ShapeDtypeStruct(
          value.shape, value.dtype, sharding=jax.sharding.NamedSharding(mesh, spec)
        )
      )
    return jax.ShapeDtypeStruct(
      x.shape, x.dtype, sharding=jax.sharding.NamedSharding(mesh, jax.P())
    )

  return jax.tree.map(one, tree, is_leaf=is_variable)


def prepare(
  config: ml_collections.ConfigDict, workdir: str | None = None, *, checked: bool = False
) -> Prepared:
  """Validates `config` (ValueError naming the field), then builds tokenizer, mesh and model.

  `workdir`: the run to train; with it a `train.init_from` is resolved (`_init_from`) and
  checked against its source, and `init_from` of the result says where parameters come from.
  `checked`: the command's entry already ran config_lib.check_fields' two parts on `config`
  (check_declared before importing jax, check_code before importing this module), so that
  each runs once a command; prepare then checks only the mesh (and a train.scaling_file's
  config).
  """
  scaled = with_scaling_file(config)
  # sharding.validate's checks, before any data is read, sharing the one model trace; a
  # scaling file's factors are values no entry has checked yet
  if not checked or scaled is not config:
    config_lib.check_fields(scaled)
  config = scaled
  config = config_lib.resolve(config, data.vocab_size(config.data))  # the tokenizer's, unloaded
  # A resume's changed fields, refused before a corpus is built or a model traced.
  resumed = _resumed(config, workdir) if workdir is not None else None
  graphdef, params = model_lib.abstract(config.model)
  sharding.check_mesh(config, jax.device_count(), params)
  data.open_source(config.data)  # a missing corpus fails here, before anything is written
  tokenizer = data.get_tokenizer(config.data)
  source = source_cfg = None
  if workdir is not None and config.train.init_from:
    source, source_cfg = _init_from(config, workdir, tokenizer)
  mesh = sharding.make_mesh(config.mesh)
  rules = sharding.rules_from_config(config.sharding)
  abstract_params = abstract_sharded(params, mesh, rules)
  if source is not None:
    _check_source(config, abstract_params, source, source_cfg)
  changed = None
  if resumed is not None:
    step, changed = resumed
    _check_shapes(abstract_params, workdir, step, f"{_holds(workdir, step)}: ", "the checkpoint")
  return Prepared(config, tokenizer, mesh, rules, graphdef, abstract_params, source, changed)


def with_scaling_file(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """`config` with model.position.scaling read from train.scaling_file (a copy; unchanged
  without one), so a fine-tune trains with e.g. searched LongRoPE factors and its config.json
  records both the file and the factors."""
  path = config.train.get("scaling_file", "")
  if not path:
    return config
  if "scaling" not in config.model.position:
    raise ValueError(
      f"train.scaling_file={path!r} is not allowed with model.position.name="
      f"{config.model.position.name!r}; allowed: a rotary scheme (it has a "
      "scaling)"
    )
  try:
    scaling = scaling_lib.read_hf_scaling(path)
  except ValueError as error:
    raise ValueError(f"train.scaling_file={path!r}: {error}") from None
  return variants.apply(config, {variants.SCALING: scaling})


def for_variant(prepared: Prepared, config: ml_collections.ConfigDict) -> Prepared:
  """`prepared` with an evaluation variant's config (eval-time fields changed only): the model
  is traced again only when a model field changed (scaling, remap, pattern)."""
  if config.model.to_dict() != prepared.config.model.to_dict():
    graphdef, _ = model_lib.abstract(config.model)
    prepared = dataclasses.replace(prepared, graphdef=graphdef)
  return dataclasses.replace(prepared, config=config)


def resumed_from(workdir: str, latest: int, step: int) -> bool:
  """Whether checkpoint `latest` was saved by a run resumed from `step` (train.resume_step): its
  later steps are then its own, and the same command goes on from `latest`."""
  try:
    _, meta = checkpoint_meta(workdir, latest)
  except errors.RunFault:  # unreadable: the reason to resume from an earlier step
    return False
  return meta["config"]["train"].get("resume_step") == step


def checkpoint_steps(workdir: str) -> list[int]:
  """The complete checkpoint steps in `workdir`, ascending."""
  with checkpoint.Reader(workdir) as reader:
    return reader.steps


def checkpoint_meta(workdir: str, step: int | None = None) -> tuple[int, dict]:
  """(step, metadata saved with it: tokenizer, resolved config) of the latest or given step.
  A workdir without checkpoints/ is left as it is."""
  with checkpoint.Reader(workdir) as reader:
    step = reader.step(step, f"--eval_step={step}")
    return step, reader.meta(step)


def check_tokenizer(meta: dict, tokenizer, what: str = "the checkpoint") -> None:
  """ValueError unless `tokenizer` is the one the checkpoint (`meta`) was trained with."""
  trained, given = (
    tokenizers.identity(meta["tokenizer"]),
    tokenizers.identity(tokenizer.metadata()),
  )
  if trained != given:
    raise ValueError(
      f"{what} was trained with tokenizer {trained}, data.* gives "
      f"{given}: set data.tokenizer, data.vocab_size, data.seed and the "
      "corpus (data.name and its fields) as in training"
    )


# --- Fine-tuning: train.init_from=DIR[@STEP]. ---


def parse_init_from(value: str) -> tuple[str, int | None]:
  """`DIR[@STEP]` -> (DIR, STEP or None); the text after the last '@' must be an integer."""
  workdir, at, step = value.rpartition("@")
  if not at:
    return value, None
  if not step.isdigit():
    raise ValueError(
      f"train.init_from={value!r}: the step after '@' must be an integer (DIR or DIR@STEP)"
    )
  return workdir, int(step)


def _source(value: str) -> tuple[Source, dict]:
  """The checkpoint `train.init_from` names and its metadata; ValueError naming the field.
  Reads only: a directory without checkpoints is not created."""
  path, step = parse_init_from(value)
  where = os.path.abspath(path)
  if not os.path.isdir(where):
    raise ValueError(f"train.init_from={value!r}: no such directory {where}")
  with checkpoint.Reader(where) as reader:
    if not reader.steps:
      raise ValueError(
        f"train.init_from={value!r}: no checkpoint in {reader.directory}; train the source run "
        "first"
      )
    step = reader.step(step, f"train.init_from={value!r}")
    return Source(where, step), reader.meta(step)


def _set_original_length(config, length: int | None) -> None:
  """PI / YaRN scale from the length the weights were trained at: an unset scaling
  original_max_position_embeddings becomes `length` where the rope type reads it."""
  position = config.model.position
  if length is None or "scaling" not in position:
    return
  sc = position.scaling
  kind = scaling_lib.ROPE_TYPES.get(sc.get("rope_type") or "default")
  if kind is not None and scaling_lib.LENGTH in kind.fields and sc[scaling_lib.LENGTH] is None:
    sc[scaling_lib.LENGTH] = int(length)


def _adopt_init_from(config, recorded: dict) -> None:
  """A resumed fine-tune's train.init_from and scaling length: the run's own (`recorded`)."""
  config.train.init_from = recorded["train"].get("init_from", "")
  scaling = recorded["model"]["position"].get("scaling") or {}
  _set_original_length(config, scaling.get(scaling_lib.LENGTH))


def _init_from(config, workdir: str, tokenizer) -> tuple[Source | None, dict | None]:
  """Resolves train.init_from in `config` (in place) for a run in `workdir`.

  A workdir with its own checkpoint resumes from it: the source is not read (it may be gone),
  and train.init_from and the scaling's original length are what that checkpoint recorded,
  so the resumed run is the one that started. Otherwise the source's checkpoint is found,
  its tokenizer and scheme checked, the scaling's original length set to the source's
  training length and train.init_from recorded as "ABS_DIR@STEP".
  """
  own = checkpoint.latest_step(workdir)
  if own is not None:
    _, meta = checkpoint_meta(workdir, own)
    recorded = meta["config"]
    say(
      f"train.init_from={config.train.init_from!r} not used: {workdir} holds its own "
      f"checkpoint (step {own}), training resumes from it"
    )
    _adopt_init_from(config, recorded)
    return None, None
  source, meta = _source(config.train.init_from)
  check_tokenizer(meta, tokenizer, f"train.init_from={config.train.init_from!r}: the source")
  source_cfg = meta["config"]
  name, source_name = config.model.position.name, source_cfg["model"]["position"]["name"]
  if name != source_name and not config.train.init_from_any_scheme:
    raise ValueError(
      f"model.position.name={name!r} differs from the source's {source_name!r} "
      f"(train.init_from={config.train.init_from!r}); set "
      "train.init_from_any_scheme=True to fine-tune into another scheme"
    )
  _set_original_length(config, source_cfg["model"]["max_len"])
  config.train.init_from = f"{source.workdir}@{source.step}"
  return source, source_cfg


# What train.init_from_any_scheme lets a fine-tune change besides the scheme (DroPE drops RoPE,
# recalibrates with a temperature and, as its reference code does, with QK-norm added), and the
# parameters it may add, which start from their initial values (QK-norm's scales, from 1).
ANY_SCHEME_FIELDS = (
  "model.position",
  "model.attention.temperature",
  "model.qk_norm",
  "model.qk_norm_over",
)
ADDABLE = re.compile(r"(^|\.)(q_norm|k_norm)\.scale$")


def _check_source(config, abstract_params, source: Source, source_cfg: dict) -> None:
  """Every parameter's shape equals the source's, and every trained field matches but those
  fine-tuning may change: data.seq_len, model.max_len, eval-time fields, and with
  train.init_from_any_scheme the position scheme, the attention temperature and QK-norm
  (ANY_SCHEME_FIELDS; QK-norm's scales may then be new; ssmax's own parameters fail the shape
  check first)."""
  where = f"train.init_from={config.train.init_from!r}"
  any_scheme = config.train.init_from_any_scheme
  _check_shapes(
    abstract_params,
    source.workdir,
    source.step,
    f"{where}: ",
    "the source",
    may_add=lambda name: any_scheme and ADDABLE.search(name) is not None,
  )
  may_change = variants.EVAL_TIME + ("data.seq_len", "model.max_len")
  if any_scheme:
    may_change += ANY_SCHEME_FIELDS
  differs = variants.trained_difference(config.to_dict(), source_cfg, may_change)
  if differs:
    field, given, saved = differs
    raise ValueError(
      f"{field}={given!r} differs from the source's {saved!r} ({where}): "
      "fine-tuning may change only data.seq_len (model.max_len follows), "
      f"eval-time fields ({', '.join(variants.EVAL_TIME)}) and, with "
      "train.init_from_any_scheme=True, model.position, model.attention.temperature and "
      "QK-norm (model.qk_norm, model.qk_norm_over)"
    )


def _check_shapes(
  abstract_params, workdir: str, step: int, where: str, theirs_name: str, may_add=None
) -> None:
  """ValueError unless every parameter's shape is the one checkpoint `step` of `workdir`
  holds (its metadata only is read); a parameter it lacks passes where `may_add(name)`."""
  with checkpoint.Reader(workdir) as reader:
    theirs = reader.param_shapes(step)
  ours = {
    checkpoint.dotted(path): tuple(var.get_value().shape)
    for path, var in jax.tree.leaves_with_path(abstract_params, is_leaf=is_variable)
  }
  for name in sorted(set(ours) | set(theirs)):
    if name not in theirs and may_add is not None and may_add(name):
      continue
    if ours.get(name) != theirs.get(name):
      theirs_shape, ours_shape = (
        "missing" if s is None else str(s) for s in (theirs.get(name), ours.get(name))
      )
      raise ValueError(
        f"{where}parameter {name} has shape {theirs_shape} in "
        f"{theirs_name} and {ours_shape} in this config; the model's shape "
        "fields (model.d_model, num_layers, num_heads, num_kv_heads, head_dim, "
        f"mlp, mlp_dim, tie_embeddings, vocabulary, a learned table's length) "
        f"must be those of {theirs_name}"
      )


def _resumed(config, workdir: str) -> tuple[int, dict | None] | None:
  """(the step a training in `workdir` resumes from, the history entry of its accepted changes
  or None), or None for a fresh run: `config` is compared with the config that checkpoint was
  saved with, field by field (`lcx.run.resume.check`, ValueError naming each refused change),
  before anything is written (a failed resume used to leave the new config.json over the old
  weights). A train.init_from given again is the one the run recorded (`_init_from`)."""
  step, wanted = checkpoint.latest_step(workdir), config.train.resume_step
  if step is None:
    return None
  if wanted and not resumed_from(workdir, step, wanted):
    steps = checkpoint_steps(workdir)
    if wanted not in steps:
      raise errors.not_allowed("train.resume_step", wanted, [0, *steps])
    step = wanted
  _, meta = checkpoint_meta(workdir, step)
  trained = meta["config"]
  given = ml_collections.ConfigDict(config.to_dict())
  if given.train.init_from:
    _adopt_init_from(given, trained)
  entry = resume.check(
    variants.differences(given.to_dict(), trained),
    fields.items(config.train.allow_changes),
    _holds(workdir, step),
    step,
  )
  return step, entry and {**entry, "before": trained}


def _holds(workdir: str, step: int) -> str:
  return f"--workdir={workdir} holds a checkpoint (step {step})"


def restore(prepared, workdir: str, step: int | None = None, trained=None):
  """(step, parameters, metadata) of the latest or given checkpoint, after checking that
  `prepared`'s config keeps every trained field and the tokenizer of that checkpoint (ValueError
  naming the field; FileNotFoundError without a checkpoint). No optimizer state is read.
  `trained` (`train.Outcome.trained`, the run just trained with this very config): its
  parameters are used as they are, unless another step is asked for. Here, not in
  lcx.tools.evaluate, so that lcx.tools.generate restores as evaluation does without importing
  lcx.tools.evaluate, which imports lcx.tools.generate (its passkey probe generates)."""
  if trained is not None and step in (None, trained.step):
    return trained.step, trained.params, trained.meta
  with checkpoint.Reader(workdir) as reader:
    step = reader.step(step, f"--eval_step={step}")
    meta = reader.meta(step)
    check_tokenizer(meta, prepared.tokenizer)
    variants.check_trained(prepared.config.to_dict(), meta["config"])
    return step, reader.restore_params(step, prepared.abstract_params), meta


def restore_params(prepared: Prepared, workdir: str, step: int):
  """The parameters of `step` on the mesh; no optimizer state is read."""
  with checkpoint.Reader(workdir) as reader:
    return reader.restore_params(step, prepared.abstract_params)


def restore_source_params(prepared: Prepared) -> tuple[nnx.State, list[str]]:
  """(a fine-tune's starting parameters, the names of those its source lacks): the source's
  (`prepared.init_from`), and for a parameter `_check_source` let it add (QK-norm's scales)
  this config's initial value from config.seed."""
  source = prepared.init_from
  flat = list(nnx.to_flat_state(prepared.abstract_params))
  with checkpoint.Reader(source.workdir) as reader:
    theirs = reader.param_shapes(source.step)
    present = [(path, var) for path, var in flat if checkpoint.dotted(path) in theirs]
    target = nnx.from_flat_state(present)
    restored = reader.restore_params(source.step, target)
  added = [(path, var) for path, var in flat if checkpoint.dotted(path) not in theirs]
  if not added:
    return restored, []
  cfg = prepared.config
  fresh = jax.jit(
    lambda: nnx.state(model_lib.Decoder(cfg.model, rngs=nnx.Rngs(cfg.seed)), nnx.Param)
  )
  initial = dict(nnx.to_flat_state(fresh()))
  new = [
    (path, var.replace(jax.device_put(initial[path].get_value(), var.get_value().sharding)))
    for path, var in added
  ]
  names = [checkpoint.dotted(path) for path, _ in added]
  return nnx.merge_state(restored, nnx.from_flat_state(new)), names
