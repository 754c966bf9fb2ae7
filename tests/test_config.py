"""Bad configs fail before anything is compiled, naming the field and what is allowed."""

import subprocess
import sys

import pytest
from absl import flags
from ml_collections import config_flags

from lcx import cli
from lcx.config import checks as config_lib, defaults
from lcx.field import Unset
from lcx.model import patterns
from lcx.model.positions import remaps
from lcx.run import sharding
from lcx.tools.evaluate import checks as eval_checks
from tests.helpers import ROOT, TINY_FLAGS, run_lcx, set_fields, tiny_config


@pytest.mark.parametrize(
  "field, value, message",
  [
    ("train.lr", -1e-3, r"^train.lr=-0.001 is not allowed; allowed: > 0$"),
    (
      "train.decay",
      "cosin",
      r"^train.decay='cosin' is not allowed; allowed: cosine, linear, constant$",
    ),
    ("model.mlp", "relu", r"^model.mlp='relu' is not allowed; allowed: gelu, swiglu$"),
    (
      "model.dtype",
      "float16",
      r"^model.dtype='float16' is not allowed; allowed: float32, bfloat16",
    ),
    ("train.b2", 1.0, r"^train.b2=1.0 is not allowed; allowed: in \[0, 1\)$"),
    # one check, one range: a negative count and 0 are refused alike
    ("train.steps", -5, r"^train.steps=-5 is not allowed; allowed: >= 1 to train \(--mode=eval"),
    ("train.steps", 0, r"^train.steps=0 is not allowed; allowed: >= 1 to train \(--mode=eval"),
    (
      "train.allow_changes",
      "train.lr,seed",
      r"^train.allow_changes='train.lr,seed' is not allowed; allowed: comma-separated names from "
      r"train.steps, train.lr, train.min_lr, train.warmup_steps, train.decay, or '' \(none\)$",
    ),
  ],
)
def test_out_of_range_values(field, value, message):
  config = tiny_config()
  section, key = field.split(".")
  config[section][key] = value
  with pytest.raises(ValueError, match=message):
    sharding.validate(config)


def test_eval_length_below_one():
  config = tiny_config()
  config.eval.lengths = (64, 0)
  with pytest.raises(
    ValueError, match=r"^eval.lengths=\(64, 0\) is not allowed; allowed: >= 1 each$"
  ):
    sharding.validate(config)


def test_kv_heads_must_divide_heads():
  config = tiny_config()
  config.model.num_kv_heads = 3
  with pytest.raises(ValueError, match=r"model.num_kv_heads=3 must divide model.num_heads=4"):
    sharding.validate(config)


def test_odd_head_dim_with_rotary_scheme():
  config = tiny_config("rope")
  config.model.head_dim = 15
  with pytest.raises(
    ValueError,
    match=r"^model\.head_dim=15 must be even for the rotary scheme "
    r"'rope' \(it rotates pairs of features\); set an even model\.head_dim, or "
    r"model\.position\.rotary_dim to an even number below 15$",
  ):
    sharding.validate(config)
  config.model.position.rotary_dim = 14  # rotating part of an odd head is fine
  sharding.validate(config)
  config = tiny_config("nope")
  config.model.head_dim = 15
  sharding.validate(config)  # NoPE has no rotation: odd head dims are fine


def test_scheme_name_changed_without_its_fields():
  config = tiny_config("rope")
  config.model.position.name = "alibi"
  with pytest.raises(
    ValueError,
    match=r"^model\.position\.name='alibi', but model\.position holds "
    r"another scheme's fields \['base', 'pairing', 'rotary_dim', 'scaling'\]: .* "
    r"--config=configs/base\.py:pos=alibi instead$",
  ):
    sharding.validate(config)


@pytest.mark.parametrize(
  "mesh, changes, message",
  [
    (
      {"data": 2, "tensor": 2},
      {},
      r"model\.vocab_size=259 is not divisible by mesh\.tensor=2 \(sharding\.vocab='tensor'\); "
      r"set --config\.sharding\.vocab='' to replicate it, or make model\.vocab_size a "
      r"multiple of 2$",
    ),
    (
      {"data": 2, "tensor": 2},
      {"sharding.vocab": "", "model.num_kv_heads": 1},
      r"model\.num_kv_heads=1 is not divisible by mesh\.tensor=2 \(sharding\.kv_heads='tensor'\)",
    ),
    (
      {"data": 4},
      {"data.batch_size": 6},
      r"data\.batch_size=6 is not divisible by mesh\.data\*mesh\.fsdp=4 "
      r"\(sharding\.batch='data,fsdp'\)",
    ),
    (
      {"fsdp": 4, "data": 1},
      {"model.d_model": 66, "model.head_dim": 16},
      r"model\.d_model=66 is not divisible by mesh\.fsdp=4 \(sharding\.embed='fsdp'\)",
    ),
    ({"data": 2, "tensor": 2}, {"sharding.vocab": ""}, None),  # every other dimension divides
  ],
)
def test_mesh_must_divide_every_sharded_dimension(mesh, changes, message):
  config = tiny_config()
  config.model.vocab_size = 259
  for axis, size in mesh.items():
    config.mesh[axis] = size
  for dotted, value in changes.items():
    section, key = dotted.split(".")
    config[section][key] = value
  if message is None:
    sharding.check_mesh(config, num_devices=4)
  else:
    with pytest.raises(ValueError, match="^" + message):
      sharding.check_mesh(config, num_devices=4)


def test_mesh_must_fit_the_devices():
  config = tiny_config()
  config.mesh.tensor = 2  # data=-1 fills the one device of this process: it cannot
  with pytest.raises(
    ValueError,
    match=r"^mesh=\{'data': -1, 'fsdp': 1, 'tensor': 2\}: the 1 "
    r"devices do not divide by the other axes' product 2, so mesh\.data=-1",
  ):
    sharding.validate(config)


def test_unknown_scheme_name():
  from configs import base

  with pytest.raises(
    ValueError, match=r"^model.position.name='ropee' is not allowed; allowed: alibi, "
  ):
    base.get_config("pos=ropee")


def test_unknown_config_argument():
  from configs import base

  with pytest.raises(
    ValueError, match=r"^config argument scheme is not a known field; allowed: pos, size$"
  ):
    base.get_config("scheme=rope")


@pytest.mark.slow
@pytest.mark.parametrize(
  "flag, message",
  [
    (
      "--config.train.lrr=0.1",
      "train.lrr is not a known field; allowed: "
      f"{', '.join(sorted(defaults.get_config().train.keys()))}",
    ),
    (
      "--config.model.position.scaling.facter=4",
      "model.position.scaling.facter is not a known field; allowed: attention_factor, beta_fast, ",
    ),
    (
      "--config.train.steps=ten",
      "flag --config.train.steps=ten: invalid literal for int() with base 10: 'ten'",
    ),
    ("--config.train.lr=-1", "train.lr=-1.0 is not allowed; allowed: > 0"),
    (
      "--config.model.position.name=spiral",
      "model.position.name='spiral' is not allowed; allowed: alibi, ",
    ),
    (
      "--config.model.position.name=alibi",
      "model.position.name='alibi', but model.position holds another scheme's fields",
    ),
    ("--config.model.head_dim=15", "model.head_dim=15 must be even for the rotary scheme 'rope'"),
    ("--config.model.position.base=-10", "model.position.base=-10.0 is not allowed; allowed: > 1"),
    (
      "--config.data.name=text_files --config.data.text_files=/nonexistent/dir",
      "data.text_files='/nonexistent/dir' matches no .txt or .jsonl file",
    ),
    (
      "--config.eval.protocol=rolling",
      "eval.protocol='rolling' is not allowed; allowed: windows, "
      "sliding, last_k, or several comma-separated",
    ),
    (
      "--mode=train_and_eval --config.eval.variants=yarn@x",
      "eval.variants: 'yarn@x' needs a number after '@'",
    ),
    (
      "--config=configs/base.py:size=tiny,scheme=rope",
      "--config=configs/base.py:size=tiny,"
      "scheme=rope: config argument scheme is not a known field; allowed: pos, size",
    ),
  ],
)
def test_command_line_errors_fail_before_compiling(tmp_path, flag, message):
  workdir = tmp_path / "run"
  own_config = flag.startswith("--config=")  # --config once: a second is an error of its own
  tiny = [f for f in TINY_FLAGS if not (own_config and f.startswith("--config="))]
  proc = run_lcx([*tiny, f"--workdir={workdir}", *flag.split()], check=False, timeout=120)
  assert proc.returncode == 2, proc.stderr[-3000:]
  lines = proc.stderr.strip().splitlines()
  assert lines[-1].startswith("error: " + message), lines[-1]
  assert "Traceback" not in proc.stderr
  assert not workdir.exists()  # nothing written: no config.json, checkpoints or metrics


# What a bad field must not wait for: checkpointing, the data pipeline and the modules that use
# them (seconds of imports; jax and flax themselves are needed: the schemes are flax modules).
HEAVY = (
  "orbax.checkpoint",
  "grain",
  "tensorflow_datasets",
  "lcx.run.checkpoint",
  "lcx.run.prepare",
  "lcx.tools.evaluate",
  "lcx.run.train",
)
# Runs an entry point as `python -m`, then prints the HEAVY modules imported by the time it exits.
IMPORTED_AT_EXIT = (
  "import atexit, runpy, sys\n"
  f"heavy = {HEAVY!r}\n"
  "atexit.register(lambda: print('imported:', [m for m in heavy if m in sys.modules]))\n"
  "sys.argv = sys.argv[1:]\n"
  "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n"
)


@pytest.mark.slow  # three subprocesses
@pytest.mark.parametrize(
  "args, message",
  [
    (
      [
        "lcx.main",
        "--mode=train",
        "--config=configs/base.py:size=tiny",
        "--workdir={run}",
        "--config.model.position.name=bogus",
      ],
      "model.position.name='bogus' is not allowed; allowed: alibi, cope, ",
    ),
    (
      [
        "lcx.main",
        "--mode=eval",
        "--workdir={run}",
        "--config.model.remap.name=dual_chunk",
        "--config.model.remap.window=3",
      ],
      "model.remap.window is not a known field; allowed: chunk_size, local_window, name",
    ),
    (
      [
        "lcx.tools.generate",
        "--workdir={run}",
        "--prompt=x",
        "--config.model.attention.gate=bogus",
      ],
      "model.attention.gate='bogus' is not allowed; allowed: one of ('none', 'elementwise', ",
    ),
  ],
)
def test_a_bad_field_is_refused_before_checkpointing_and_data_are_imported(tmp_path, args, message):
  run = tmp_path / "run"
  if "--mode=train" not in args:  # eval and generate start from a run's config.json alone
    config_lib.save(tiny_config(), str(run))
  proc = subprocess.run(
    [sys.executable, "-c", IMPORTED_AT_EXIT, *(a.format(run=run) for a in args)],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert proc.stderr.strip().splitlines()[-1].startswith(f"error: {message}")
  assert proc.stdout.strip().splitlines()[-1] == "imported: []"


def _another_value(default):
  """A value of a field's type other than its default."""
  if isinstance(default, Unset):
    return {int: 7, float: 0.25}[default.type]
  if isinstance(default, bool):
    return not default
  return default + 3 if isinstance(default, int) else default / 2


# (section, name, own field, its default) of every remap and sparse pattern.
OWN_FIELDS = [
  (section, name, field, default)
  for section, registry in (
    ("model.remap", remaps.REMAPS),
    ("model.attention.pattern", patterns.PATTERNS),
  )
  for name, entry in registry.items()
  for field, default in entry.defaults.items()
]


@pytest.mark.parametrize("source", ["config file", "a run's config.json"])
def test_every_remap_and_pattern_field_is_settable_by_flag_once_its_name_is(
  tmp_path, monkeypatch, source
):
  """`--config.model.remap.name=dual_chunk --config.model.remap.local_window=16` (issue 32), as
  the command line of train, eval and generate parses it (cli.parse_config_flags): naming a
  remap or pattern brings its own fields, in either order."""
  config_lib.save(tiny_config(), str(tmp_path))
  config_arg = {
    "config file": "configs/base.py:size=tiny",
    "a run's config.json": f"{cli.RUN_CONFIG}:{tmp_path}",
  }[source]
  assert len(OWN_FIELDS) >= 12  # dual_chunk's chunk_size and local_window among them
  for section, name, field, default in OWN_FIELDS:
    value = _another_value(default)
    for named_first in (True, False):
      flag_values = flags.FlagValues()
      config_flags.DEFINE_config_file("config", None, "", flag_values, lock_config=True)
      name_flag, field_flag = (
        f"--config.{section}.name={name}",
        f"--config.{section}.{field}={value}",
      )
      order = [name_flag, field_flag] if named_first else [field_flag, name_flag]
      argv = ["lcx", f"--config={config_arg}", *order]
      monkeypatch.setattr(sys, "argv", argv)  # where ml_collections reads the overrides
      cli.select_sections_on_parse(argv, flag_values)
      flag_values(argv)
      node = flag_values.config
      for key in section.split("."):
        node = node[key]
      assert (node.name, node[field]) == (name, value), (section, name, field)


def test_learned_table_must_cover_training_and_randomized_positions():
  config = tiny_config("learned")
  config.model.position.num_positions = config.data.seq_len - 1
  with pytest.raises(
    ValueError,
    match=rf"the learned table has {config.data.seq_len - 1} "
    rf"positions .* but {config.data.seq_len} are needed",
  ):
    sharding.validate(config)
  config.model.position.num_positions = config.data.seq_len
  sharding.validate(config)
  config.train.random_positions = 4 * config.data.seq_len
  with pytest.raises(ValueError, match=rf"but {4 * config.data.seq_len} are needed"):
    sharding.validate(config)


def test_relative_remap_with_absolute_scheme_fails_in_validation():
  config = tiny_config("sinusoidal")
  config.model.remap = remaps.default_config("self_extend")
  with pytest.raises(
    ValueError,
    match=r"model.remap.name='self_extend' remaps relative "
    r"distances, but model.position.name='sinusoidal' embeds absolute positions",
  ):
    sharding.validate(config)


def test_eval_lengths_past_a_learned_table_are_not_a_config_error():
  """Lengths a scheme cannot score are reported as skipped in the results, with the reason
  (tests/tools/evaluate), so a sweep over schemes is not stopped by one of them."""
  config = tiny_config("learned")
  for name in ("task", "stdlib"):
    config.data.name = name
    eval_checks.validate(config)  # 8x seq_len exceeds the learned table


@pytest.mark.parametrize(
  "fields, message",
  [
    (
      {"train.pose_target": 16},
      r"train.pose_target=16 is not allowed; allowed: 0 \(off\) or >= data.seq_len=32",
    ),
    (
      {"train.pose_target": 128, "train.random_positions": 256},
      r"train.pose_target=128 is not allowed with train.random_positions=256; allowed: one of",
    ),
    (
      {"eval.random_positions": -2},
      r"eval.random_positions=-2 is not allowed; allowed: -1 \(as trained: "
      r"train.random_positions\), 0 \(off\)",
    ),
  ],
)
def test_sampled_positions_are_checked_naming_the_fields(fields, message):
  config = tiny_config()
  for field, value in fields.items():
    section, key = field.split(".")
    config[section][key] = value
  with pytest.raises(ValueError, match=message):
    sharding.validate(config)


def test_pose_target_must_fit_a_learned_table_and_eval_sampling_the_eval_lengths():
  config = tiny_config("learned", pose_target=128)
  with pytest.raises(ValueError, match=r"the learned table has 32 positions .* but 128 are"):
    sharding.validate(config)
  config.model.position.num_positions = 128
  sharding.validate(config)
  config = tiny_config()
  config.eval.random_positions = 128  # eval lengths 32..256 by default multipliers (1, 2, 4, 8)
  sharding.validate(config)
  with pytest.raises(
    ValueError,
    match=r"eval.random_positions=128 is not allowed; allowed: 0 "
    r"\(off\) or >= the longest eval length 256",
  ):
    eval_checks.validate(config)
  config.eval.random_positions = 256
  eval_checks.validate(config)


@pytest.mark.parametrize(
  "pos, field, value, message",
  [
    (
      "rope",
      "model.nope_every",
      -1,
      r"model.nope_every=-1 is not allowed; allowed: an int >= 0 \(0: every block has positions\)",
    ),
    (
      "rope",
      "model.position_window",
      -3,
      r"model.position_window=-3 is not allowed; allowed: an int >= 0 \(0: no window\)",
    ),
    (
      "sinusoidal",
      "model.nope_every",
      2,
      r"model.nope_every=2 is not allowed with model.position.name='sinusoidal', which embeds "
      r"positions once at the input \(no block's hooks carry them\); allowed: 0",
    ),
    (
      "rope",
      "model.nope_every",
      3,
      r"model.nope_every=3 leaves no NoPE block among model.num_layers=2; allowed: 0 \(off\) "
      r"or at most 2",
    ),
    (
      "rope",
      "model.attention.temperature",
      "log",
      r"model.attention.temperature='log' is not allowed; allowed: one of \('none', 'log_n', "
      r"'ssmax', 'scale_invariant', 'llama4'\)",
    ),
    (
      "rope",
      "model.attention.beta_c",
      -0.5,
      r"model.attention.beta_c=-0.5 is not allowed; allowed: a number >= 0 \(0: off\)",
    ),
    (
      "rope",
      "model.attention.sink",
      "attention",
      r"model.attention.sink='attention' is not allowed; allowed: one of \('none', 'learned'\)",
    ),
    (
      "rope",
      "model.attention.kind",
      "stickbreaking",
      r"model.attention.kind='stickbreaking' is not allowed; allowed: one of \('softmax', "
      r"'stick_breaking'\)",
    ),
  ],
)
def test_attention_options_name_the_field(pos, field, value, message):
  config = tiny_config(pos)
  set_fields(config, {field: value})
  with pytest.raises(ValueError, match=message):
    sharding.validate(config)
