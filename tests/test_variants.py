"""Variants: names to overrides, a whole scaling or remap replaced, trained fields refused."""

import json

import ml_collections
import pytest

from lcx.config import defaults, variants
from lcx.model import patterns


def test_names_to_overrides():
  assert variants.names(" none, yarn@4,none ,self_extend@64/4") == [
    "none",
    "yarn@4",
    "self_extend@64/4",
  ]
  assert variants.overrides("none", {}) == {}
  assert variants.overrides("yarn@4", {}) == {
    "model.position.scaling": {"rope_type": "yarn", "factor": 4.0}
  }
  assert variants.overrides("self_extend@64/4", {}) == {
    "model.remap": {"name": "self_extend", "window": 64, "group": 4}
  }
  assert variants.overrides("rerope@32", {}) == {"model.remap": {"name": "rerope", "window": 32}}
  named = {"cool": {"model.position.scaling.rope_type": "linear"}}
  assert variants.overrides("cool", named) == {"model.position.scaling.rope_type": "linear"}


@pytest.mark.parametrize(
  "spec, message",
  [
    ("yarn", r"'yarn' needs an argument after '@'"),
    ("yarn@x", r"'yarn@x' needs a number after '@'"),
    ("none@3", r"'none' takes no '@' argument"),
    ("self_extend@64", r"'self_extend@64' needs @N/N \(integers\)"),
    ("foo@1", r"eval.variants='foo@1' is not allowed; allowed: beta, dynamic, hf, linear, "),
    ("longrope@/nonexistent.json", r"cannot read /nonexistent.json"),
  ],
)
def test_bad_variants_name_the_problem(spec, message):
  with pytest.raises(ValueError, match=message):
    variants.overrides(spec, {})


def test_sink_variant_is_the_streaming_pattern_and_remap_replacing_the_runs():
  fields = {"name": "streaming", "sink": 4, "window": 64}
  assert variants.overrides("sink@4/64", {}) == {
    "model.attention.pattern": fields,
    "model.remap": fields,
  }
  config = defaults.get_config("pos=rope")
  config.model.attention.pattern = patterns.default_config("strided")
  streaming = variants.apply(config, variants.overrides("sink@4/64", {}))
  assert streaming.model.attention.pattern.to_dict() == fields
  assert streaming.model.remap.to_dict() == fields
  with pytest.raises(ValueError, match=r"'sink@4' needs @N/N \(integers\)"):
    variants.overrides("sink@4", {})


def test_longrope_variant_reads_an_hf_dict(tmp_path):
  path = tmp_path / "factors.json"
  path.write_text(
    json.dumps(
      {"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4, "factor": 4.0}
    )
  )
  (scaling,) = variants.overrides(f"longrope@{path}", {}).values()
  assert scaling["long_factor"] == [2.0] * 4
  path.write_text(json.dumps({"rope_type": "yarn", "factor": 4.0}))
  with pytest.raises(ValueError, match="holds no rope_type 'longrope' dict"):
    variants.overrides(f"longrope@{path}", {})


def test_apply_replaces_the_whole_scaling_and_remap():
  config = defaults.get_config("pos=rope,size=tiny")
  config.model.position.scaling.update(rope_type="yarn", factor=8.0, beta_fast=16.0)
  linear = variants.apply(config, variants.overrides("linear@2", {}))
  assert linear.model.position.scaling.rope_type == "linear"
  assert linear.model.position.scaling.beta_fast == 32.0  # yarn's setting did not leak
  assert config.model.position.scaling.rope_type == "yarn"  # the run's config is untouched
  extended = variants.apply(config, variants.overrides("self_extend@16/2", {}))
  assert extended.model.remap.to_dict() == {"name": "self_extend", "window": 16, "group": 2}


def test_apply_refuses_trained_fields_and_scaling_without_rotary():
  with pytest.raises(ValueError, match=r"variant override model.d_model: only eval-time fields"):
    variants.apply(defaults.get_config("pos=rope"), {"model.d_model": 8})
  with pytest.raises(ValueError, match=r"model.position.name='alibi' has no RoPE scaling"):
    variants.apply(defaults.get_config("pos=alibi"), variants.overrides("yarn@2", {}))


def test_a_named_variant_may_test_another_task_but_not_retrain_one():
  config = defaults.get_config("pos=rope")
  config.data.update(name="task", task="niah")
  named = ml_collections.ConfigDict(  # as a config file holds it: nested, no dotted keys
    {
      "mk": {"data": {"task": "niah_multikey"}},
      "mk_yarn": {
        "data": {"task": "niah_multikey"},
        "model": {"position": {"scaling": {"rope_type": "yarn", "factor": 4.0}}},
      },
    }
  )
  assert variants.overrides("mk_yarn", named) == {
    "data.task": "niah_multikey",
    "model.position.scaling": {"rope_type": "yarn", "factor": 4.0},  # whole, not per field
  }
  changed = variants.apply(config, variants.overrides("mk", named))
  assert (changed.data.task, config.data.task) == ("niah_multikey", "niah")
  with pytest.raises(ValueError, match=r"variant override data.seq_len: only eval-time fields"):
    variants.apply(config, {"data.seq_len": 8})


def test_check_trained_names_the_field_scheme_first():
  trained = defaults.get_config("pos=rope").to_dict()
  variants.check_trained(json.loads(json.dumps(trained, default=list)), trained)
  given = defaults.get_config("pos=alibi").to_dict()
  with pytest.raises(
    ValueError,
    match=r"model.position.name='alibi' differs from the "
    r"checkpoint's 'rope': it is a trained field",
  ):
    variants.check_trained(given, trained)
  eval_time = defaults.get_config("pos=rope")
  eval_time.model.position.scaling.rope_type = "yarn"
  eval_time.model.remap.name = "rerope"
  eval_time.eval.protocol = "sliding"
  eval_time.train.lr = 1.0  # not a model field: ignored
  variants.check_trained(eval_time.to_dict(), trained)
  eval_time.data.seq_len = 999
  with pytest.raises(ValueError, match=r"data.seq_len=999 differs from the checkpoint's 256"):
    variants.check_trained(eval_time.to_dict(), trained)


def test_file_names_are_safe_and_distinct():
  assert variants.file_name("yarn@4") == "yarn@4.json"
  assert variants.file_name("self_extend@64/4") == "self_extend@64_4.json"
  assert variants.file_name("longrope@runs/x/factors.json") == "longrope@runs_x_factors.json.json"


def test_hf_variant_takes_a_hugging_face_config_verbatim(tmp_path):
  path = tmp_path / "config.json"
  path.write_text(
    json.dumps(
      {
        "rope_theta": 10000.0,
        "max_position_embeddings": 4096,
        "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
      }
    )
  )
  (scaling,) = variants.overrides(f"hf@{path}", {}).values()
  assert (scaling["rope_type"], scaling["factor"]) == ("yarn", 4.0)
  config = variants.apply(
    defaults.get_config("pos=rope,size=tiny"), variants.overrides(f"hf@{path}", {})
  )
  assert config.model.position.scaling.original_max_position_embeddings == 32
  with pytest.raises(ValueError, match=r"'hf@/nonexistent.json': no file /nonexistent.json"):
    variants.overrides("hf@/nonexistent.json", {})


def test_a_field_an_old_run_lacks_counts_as_its_default():
  """A run saved before model.nope_every existed trained without it: 0 matches, 2 does not."""
  trained = defaults.get_config("pos=rope").to_dict()
  del trained["model"]["nope_every"]
  variants.check_trained(defaults.get_config("pos=rope").to_dict(), trained)
  given = defaults.get_config("pos=rope")
  given.model.nope_every = 2
  with pytest.raises(ValueError, match=r"model.nope_every=2 differs from the checkpoint's None"):
    variants.check_trained(given.to_dict(), trained)
