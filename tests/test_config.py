"""Bad configs fail before anything is compiled, naming the field and what is allowed."""

import os

import pytest

from lcx import config as config_lib
from tests.helpers import TINY_FLAGS, run_lcx, tiny_config


@pytest.mark.parametrize("field, value, message", [
    ("train.lr", -1e-3, r"train.lr=-0.001 is not allowed; must be > 0"),
    ("train.decay", "cosin", r"train.decay='cosin' is not allowed; must be one of \('cosine', "),
    ("model.mlp", "relu", r"model.mlp='relu' is not allowed; must be one of \('gelu', 'swiglu'\)"),
    ("model.dtype", "float16", r"model.dtype='float16' is not allowed; must be one of"),
    ("train.b2", 1.0, r"train.b2=1.0 is not allowed; must be in \[0, 1\)"),
])
def test_out_of_range_values(field, value, message):
  config = tiny_config()
  section, key = field.split(".")
  config[section][key] = value
  with pytest.raises(ValueError, match=message):
    config_lib.validate(config)


def test_eval_length_below_one():
  config = tiny_config()
  config.eval.lengths = (64, 0)
  with pytest.raises(ValueError, match=r"eval.lengths=\(64, 0\) is not allowed; must be lengths >= 1"):
    config_lib.validate(config)


def test_kv_heads_must_divide_heads():
  config = tiny_config()
  config.model.num_kv_heads = 3
  with pytest.raises(ValueError, match=r"model.num_kv_heads=3 must divide model.num_heads=4"):
    config_lib.validate(config)


def test_odd_head_dim_with_rotary_scheme():
  config = tiny_config("rope")
  config.model.head_dim = 15
  with pytest.raises(ValueError, match=r"head_dim.*15.*even|even.*15"):
    config_lib.validate(config)
  config = tiny_config("nope")
  config.model.head_dim = 15
  config_lib.validate(config)  # NoPE has no rotation: odd head dims are fine


def test_unknown_scheme_name():
  from configs import base
  with pytest.raises(ValueError, match=r"model.position.name='ropee' is not a known scheme; allowed: \["):
    base.get_config("pos=ropee")


def test_unknown_config_argument():
  from configs import base
  with pytest.raises(ValueError, match=r"config argument 'scheme' is unknown; allowed: \['pos', 'size'\]"):
    base.get_config("scheme=rope")


@pytest.mark.parametrize("flag, message", [
    ("--config.train.lrr=0.1", "lrr"),
    ("--config.train.steps=ten", "steps"),
    ("--config.train.lr=-1", "train.lr=-1.0 is not allowed; must be > 0"),
    ("--config.model.position.name=spiral", "model.position.name='spiral' is not a known scheme"),
])
def test_command_line_errors_fail_before_compiling(tmp_path, flag, message):
  proc = run_lcx([*TINY_FLAGS, f"--workdir={tmp_path}", flag], check=False, timeout=120)
  assert proc.returncode != 0
  assert message in proc.stderr
  assert not (tmp_path / "checkpoints").exists()
