"""lcx.model.model_config: the typed records the model classes read hold exactly the fields
lcx/config/defaults.py declares under `model`, with their types; a ConfigDict is read once, and a
field missing, unknown or mistyped is one error naming it."""

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from lcx.config import defaults
from lcx.model import positions
from lcx.model.decoder import Decoder
from lcx.model.model_config import AttentionConfig, ModelConfig
from tests.helpers import tiny_config


def _names(cls):
  return {f.name for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("scheme", list(positions.SCHEMES))
def test_the_records_hold_every_declared_model_field_of_every_scheme(scheme):
  model = defaults.get_config(f"pos={scheme}").model
  record = ModelConfig.of(model)
  assert _names(ModelConfig) == set(model.keys())
  assert _names(AttentionConfig) == set(model.attention.keys())
  for name in _names(ModelConfig) - {"attention", "position", "remap"}:
    assert getattr(record, name) == model[name], name
  assert record.position.to_dict() == model.position.to_dict()
  assert record.attention.pattern.to_dict() == model.attention.pattern.to_dict()
  assert ModelConfig.of(record) is record


def test_a_record_is_frozen_and_keeps_its_sections_when_the_source_changes():
  model = defaults.get_config("pos=rope").model
  record = ModelConfig.of(model)
  model.position.base = 500_000.0
  model.attention.pattern.name = "changed"
  assert record.position.base == 10_000.0 and record.attention.pattern.name == "dense"
  with pytest.raises(dataclasses.FrozenInstanceError):
    record.d_model = 1


def test_missing_unknown_and_mistyped_fields_are_one_error_naming_the_field():
  model = defaults.get_config("pos=rope").model
  with model.unlocked():
    model.attention.no_such = 1
  with pytest.raises(ValueError, match=r"^model\.attention\.no_such is not a known field; "):
    ModelConfig.of(model)
  model = defaults.get_config("pos=rope").model
  del model["qk_norm"]
  with pytest.raises(ValueError, match=r"^model\.qk_norm is missing \(a bool field of ModelConfig"):
    ModelConfig.of(model)
  model = defaults.get_config("pos=rope").model
  with model.unlocked():
    del model["num_heads"]
    model.num_heads = True  # a bool where an int belongs
  with pytest.raises(ValueError, match=r"^model\.num_heads=True: expected int$"):
    ModelConfig.of(model)


def test_a_decoder_from_the_record_equals_one_from_the_config_dict():
  model = tiny_config("alibi").model
  model.vocab_size = 17
  from_dict = nnx.state(Decoder(model, rngs=nnx.Rngs(0)), nnx.Param)
  from_record = nnx.state(Decoder(ModelConfig.of(model), rngs=nnx.Rngs(0)), nnx.Param)
  for a, b in zip(jax.tree.leaves(from_dict), jax.tree.leaves(from_record), strict=True):
    np.testing.assert_array_equal(a, b)
