"""lcx.run.prepare, where every entry point starts: the resolved config, the abstract (unallocated)
sharded parameters, a variant's re-trace, a run's checkpoints and config read back, and the
errors that come before anything is written. Fine-tuning's init_from checks: test_finetune.py;
resume checks: faults/test_runs.py."""

import json
import os
import shutil

import jax
import numpy as np
import pytest

from lcx.config import changes, defaults, run_config, variants
from lcx.run import prepare
from tests.helpers import set_fields, tiny_config


@pytest.fixture(scope="module")
def prepared():
  return prepare.prepare(tiny_config("rope"))


def test_the_config_is_resolved_and_the_parameters_are_abstract_and_sharded(prepared):
  config = prepared.config
  assert config.model.vocab_size == prepared.tokenizer.vocab_size == 259  # the byte tokenizer's
  assert config.model.max_len == config.data.seq_len == 32
  leaves = jax.tree.leaves(prepared.abstract_params)
  assert leaves and all(isinstance(x, jax.ShapeDtypeStruct) for x in leaves)  # nothing allocated
  assert all(x.sharding.mesh == prepared.mesh for x in leaves)
  assert prepared.abstract_params["embed"].get_value().shape == (259, 64)
  assert prepared.init_from is None


def test_a_variant_re_traces_only_when_the_model_changes(prepared):
  same = prepare.for_variant(prepared, prepared.config)
  assert same.graphdef is prepared.graphdef
  yarn = variants.apply(prepared.config, variants.overrides("yarn@4", {}))
  varied = prepare.for_variant(prepared, yarn)
  assert varied.config.model.position.scaling.rope_type == "yarn"
  assert varied.graphdef is not prepared.graphdef
  assert varied.abstract_params is prepared.abstract_params  # the parameters are the trained ones
  assert prepared.config.model.position.scaling.rope_type == "default"  # not changed in place


def test_a_bad_field_is_refused_before_the_corpus_is_built(tmp_path):
  config = tiny_config("rope")
  config.data.data_dir = str(tmp_path / "data")
  config.model.num_heads = 0
  with pytest.raises(ValueError, match=r"^model\.num_heads"):
    prepare.prepare(config)
  assert not (tmp_path / "data").exists()


def test_a_missing_corpus_is_refused_naming_the_field(tmp_path):
  config = tiny_config("rope")
  config.data.update(name="text_files", text_files=str(tmp_path / "none"))
  config.data.data_dir = str(tmp_path / "data")
  with pytest.raises(ValueError, match=r"data\.text_files"):
    prepare.prepare(config)


def test_zero_training_steps_are_refused_without_writing_the_run(tmp_path):
  with pytest.raises(ValueError, match=r"^train\.steps=0 is not allowed; allowed: >= 1 to train"):
    prepare.prepare(tiny_config("rope", steps=0), str(tmp_path / "run"))
  assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
  "value,parsed",
  [("runs/a", ("runs/a", None)), ("runs/a@20", ("runs/a", 20)), ("x@y@3", ("x@y", 3))],
)
def test_init_from_is_a_dir_and_an_optional_step(value, parsed):
  assert prepare.parse_init_from(value) == parsed


def test_init_from_with_a_step_that_is_not_an_integer_is_refused():
  with pytest.raises(ValueError, match=r"^train\.init_from='runs/a@last': the step after '@'"):
    prepare.parse_init_from("runs/a@last")


def test_checkpoints_and_their_metadata_read_back(tiny_run):
  assert prepare.checkpoint_steps(tiny_run) == [1, 2]  # the first step is saved too
  step, meta = prepare.checkpoint_meta(tiny_run)
  assert step == 2 and meta["config"]["train"]["steps"] == 2
  assert meta["tokenizer"] == {"kind": "byte", "vocab_size": 259}
  assert not prepare.resumed_from(tiny_run, 2, 1)  # trained from scratch
  with pytest.raises(ValueError, match=r"^--eval_step=5: no checkpoint at step 5 in .*\[1, 2\]$"):
    prepare.checkpoint_meta(tiny_run, 5)


def test_a_run_without_checkpoints_is_said_and_left_as_it_is(tmp_path):
  with pytest.raises(FileNotFoundError, match="no checkpoint in .*checkpoints; train first"):
    prepare.checkpoint_meta(str(tmp_path))
  assert os.listdir(tmp_path) == []


def test_the_restored_parameters_have_the_abstract_shapes(tiny_run):
  prepared = prepare.prepare(run_config.run_config(tiny_run))
  params = prepare.restore_params(prepared, tiny_run, 2)
  shapes = jax.tree.map(np.shape, jax.tree.leaves(params))
  assert shapes == [x.shape for x in jax.tree.leaves(prepared.abstract_params)]


def test_a_runs_config_reads_back_over_todays_defaults(tiny_run, tmp_path):
  config = run_config.run_config(tiny_run)
  with open(os.path.join(tiny_run, "config.json")) as f:
    saved = json.load(f)
  assert config.model.max_len == saved["model"]["max_len"] == 32
  assert config.data.seq_len == 32 and config.train.steps == 2
  assert isinstance(config.eval.multipliers, tuple)  # a JSON list back to the field's tuple
  saved["train"]["field_of_an_older_lcx"] = 1  # kept as saved: old runs stay readable
  del saved["eval"]["num_tokens"]  # a field added since: today's default
  run = tmp_path / "run"
  shutil.copytree(tiny_run, run)
  (run / "config.json").write_text(json.dumps(saved))
  config = run_config.run_config(str(run))
  assert config.train.field_of_an_older_lcx == 1
  assert config.eval.num_tokens == defaults.get_config("pos=rope").eval.num_tokens


def test_a_directory_without_config_json_is_not_a_run(tmp_path):
  with pytest.raises(ValueError, match=r"^--workdir=.*: no config\.json there"):
    run_config.run_config(str(tmp_path))


def _resumed(pos="rope", **fields):
  """tiny_run's own config (`pos`: another scheme) with dotted `fields` changed."""
  config = tiny_config(pos, steps=2, warmup_steps=1, checkpoint_every=2)
  set_fields(config, fields)
  return config


@pytest.mark.parametrize(
  "pos, fields, named",
  [
    ("rope", {"seed": 7}, "seed: 0 -> 7"),
    ("rope", {"data.batch_size": 4}, "data.batch_size: 8 -> 4"),
    ("rope", {"data.validation_fraction": 0.1}, "data.validation_fraction: 0.05 -> 0.1"),
    ("rope", {"data.seed": 1}, "data.seed: 0 -> 1"),
    ("rope", {"data.seq_len": 64}, "data.seq_len: 32 -> 64, model.max_len: 32 -> 64"),
    ("rope", {"model.num_layers": 3}, "model.num_layers: 2 -> 3"),
    ("rope", {"model.position.base": 500000.0}, "model.position.base: 10000.0 -> 500000.0"),
    ("alibi", {}, "model.position.name: 'rope' -> 'alibi'"),  # not each of its fields
    ("rope", {"model.dtype": "bfloat16"}, "model.dtype: 'float32' -> 'bfloat16'"),
    ("rope", {"train.weight_decay": 0.0}, "train.weight_decay: 0.1 -> 0.0"),
    ("rope", {"train.random_positions": 64}, "train.random_positions: 0 -> 64"),
    ("rope", {"train.init_from_any_scheme": True}, "train.init_from_any_scheme: False -> True"),
  ],
)
def test_a_resume_refuses_a_change_to_what_the_weights_and_data_mean(tiny_run, pos, fields, named):
  with pytest.raises(ValueError) as error:
    prepare.prepare(_resumed(pos, **fields), tiny_run)
  assert str(error.value) == (
    f"--workdir={tiny_run} holds a checkpoint (step 2) trained with other settings: {named} "
    "cannot change (they set what the weights and the data mean): resume with the run's own "
    "values, or train in another --workdir"
  )


def test_a_resume_changes_the_schedule_only_when_asked_and_the_rest_silently(tiny_run):
  before = sorted(os.listdir(tiny_run))
  free = {
    "train.log_every": 7,
    "train.checkpoint_every": 3,
    "train.keep_checkpoints": 1,
    "train.trackers": "",
    "train.eval_every": 2,
    "eval.num_tokens": 256,
    "model.attention.impl": "xla",
    "model.attention.chunk_size": 64,
    "model.remat": "block",
    "mesh.data": 1,
  }
  assert prepare.prepare(_resumed(**free), tiny_run).changed is None
  schedule = {"train.steps": 6, "train.lr": 3e-3, "train.warmup_steps": 2, "train.decay": "linear"}
  with pytest.raises(ValueError) as error:
    prepare.prepare(_resumed(**schedule, **{"train.allow_changes": "train.lr"}), tiny_run)
  assert str(error.value).endswith(
    "trained with other settings: train.decay: 'cosine' -> 'linear', train.steps: 2 -> 6, "
    "train.warmup_steps: 1 -> 2 change the schedule: to apply them from step 2, resume with "
    "--config.train.allow_changes=train.lr,train.decay,train.steps,train.warmup_steps"
  )
  allowed = "train.lr,train.decay,train.steps,train.warmup_steps"
  prepared = prepare.prepare(_resumed(**schedule, **{"train.allow_changes": allowed}), tiny_run)
  _, meta = prepare.checkpoint_meta(tiny_run, 2)
  assert prepared.changed == {
    "step": 2,
    "changes": {
      "train.decay": {"from": "cosine", "to": "linear"},
      "train.lr": {"from": 0.001, "to": 0.003},
      "train.steps": {"from": 2, "to": 6},
      "train.warmup_steps": {"from": 1, "to": 2},
    },
    "before": meta["config"],
  }
  assert sorted(os.listdir(tiny_run)) == before  # prepare writes nothing


def test_every_config_section_has_a_resume_kind():
  """A section added to the config is classified in lcx.config.changes.KINDS (else it counts as
  fixed): a resume then knows whether it may change."""
  sections = {field.split(".")[0] for field in variants.flatten(defaults.get_config().to_dict())}
  assert sections <= set(changes.KINDS)
  assert changes.kind("model.position.scaling.factor") == changes.FIXED
  assert changes.kind("model.attention.impl") == changes.FREE
  assert changes.kind("train.lr") == changes.SCHEDULE
  assert changes.kind("eval.passkey.seed") == changes.FREE
