"""Extension fine-tuning (train.init_from): the source's parameters at the new length and
scaling with a fresh optimizer, the source recorded, resume over it, and every refusal."""

import json
import os

import jax
import numpy as np
import pytest
from flax import nnx

from lcx import data
from lcx.config import run_config
from lcx.run import checkpoint, prepare, sharding, train
from lcx.tools import evaluate
from tests.helpers import TINY_FLAGS, read_metrics, run_lcx, tiny_config

SOURCE_STEPS, FINETUNE_STEPS = 60, 40


def _finetune_config(source, **train_fields):
  """The PI recipe on the tiny model: twice the source's length, linear scaling by 2."""
  config = tiny_config(
    "rope",
    steps=FINETUNE_STEPS,
    warmup_steps=5,
    lr=1e-3,
    checkpoint_every=20,
    init_from=str(source),
    **train_fields,
  )
  config.data.seq_len = 64
  config.model.position.scaling.rope_type = "linear"
  config.model.position.scaling.factor = 2.0
  return config


@pytest.fixture(scope="module")
def source(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("source")
  train.train(
    tiny_config("rope", steps=SOURCE_STEPS, warmup_steps=10, lr=3e-3, checkpoint_every=1000),
    str(workdir),
  )
  return workdir


@pytest.fixture(scope="module")
def finetuned(source, tmp_path_factory):
  workdir = tmp_path_factory.mktemp("finetuned")
  train.train(_finetune_config(source), str(workdir))
  return workdir


def _first_batch_loss(config, params_dir, step):
  """The loss of `params_dir`'s parameters at `step` on the first batch `config` trains on."""
  prepared = prepare.prepare(config)
  params = prepare.restore_params(prepared, str(params_dir), step)
  iterator = data.make_train_iterator(prepared.config.data, process_index=0, process_count=1)
  batch = sharding.global_batch(next(iterator), prepared.mesh, prepared.rules)
  loss = jax.jit(lambda p, b: train.loss_fn(nnx.merge(prepared.graphdef, p), b, b["positions"]))(
    params, batch
  )
  return float(loss)


@pytest.mark.slow  # trains the module's runs (~10-30 s)
def test_finetune_starts_from_the_source_loss_at_the_new_length_and_lowers_it(source, finetuned):
  metrics = read_metrics(finetuned)
  # The fine-tune's own resolved config (config.json): seq_len 64, linear scaling by 2.
  config = run_config.run_config(str(finetuned))
  source_loss = _first_batch_loss(config, source, SOURCE_STEPS)
  losses = [metrics[s]["loss"] for s in range(1, FINETUNE_STEPS + 1)]
  print(
    f"source loss on the fine-tune's first batch: {source_loss:.5f}; fine-tune "
    f"step 1: {losses[0]:.5f}, step {FINETUNE_STEPS}: {losses[-1]:.5f}, mean of the last 5 "
    f"steps: {np.mean(losses[-5:]):.5f}"
  )
  assert losses[0] == pytest.approx(source_loss, abs=1e-5)
  # Not a fresh model: ln(259) = 5.56 is where a fresh one starts.
  assert losses[0] < 4.5
  assert np.mean(losses[-5:]) < losses[0] - 0.1
  # A fresh schedule: warmup from 0 again.
  assert metrics[1]["lr"] == 0.0 and metrics[6]["lr"] == pytest.approx(1e-3)


@pytest.mark.slow  # trains the module's runs (~10-30 s)
def test_the_source_is_recorded_in_config_checkpoint_and_evaluation(source, finetuned):
  resolved = f"{os.path.abspath(source)}@{SOURCE_STEPS}"
  saved = json.loads((finetuned / "config.json").read_text())
  assert saved["train"]["init_from"] == resolved
  _, meta = prepare.checkpoint_meta(str(finetuned))
  assert meta["init_from"] == {"workdir": os.path.abspath(source), "step": SOURCE_STEPS}
  assert meta["config"]["train"]["init_from"] == resolved
  config = run_config.run_config(str(finetuned))
  config.eval.multipliers = (1,)
  config.eval.bootstrap = 0
  result = evaluate.evaluate(config, str(finetuned))["none"]
  assert result["init_from"] == {"workdir": os.path.abspath(source), "step": SOURCE_STEPS}
  assert result["train_len"] == 64


@pytest.mark.slow  # trains the module's runs (~10-30 s)
def test_a_workdir_with_its_own_checkpoint_resumes_exactly_and_ignores_init_from(
  source, finetuned, tmp_path, capsys
):
  train.train(_finetune_config(source, stop_after=20), str(tmp_path))
  capsys.readouterr()
  train.train(_finetune_config(source), str(tmp_path))
  err = capsys.readouterr().err
  assert (
    f"train.init_from={str(source)!r} not used: {tmp_path} holds its own checkpoint "
    "(step 20), training resumes from it" in err
  )
  assert "resumed from step 20" in err and "starting from" not in err
  ours, theirs = read_metrics(tmp_path), read_metrics(finetuned)
  assert [ours[s]["loss"] for s in range(1, 41)] == [theirs[s]["loss"] for s in range(1, 41)]
  pa, _ = checkpoint.restore_params(str(tmp_path))
  pb, _ = checkpoint.restore_params(str(finetuned))
  for x, y in zip(jax.tree.leaves(pa), jax.tree.leaves(pb), strict=True):
    np.testing.assert_array_equal(x, y)
  # The source is not read on resume (it may be gone); the run keeps what it recorded.
  config = _finetune_config(tmp_path / "gone")
  prepared = prepare.prepare(config, str(tmp_path))
  assert prepared.init_from is None
  assert prepared.config.train.init_from == f"{os.path.abspath(source)}@{SOURCE_STEPS}"


def test_yarn_takes_the_source_training_length_as_its_original_length(source, tmp_path):
  config = _finetune_config(source)
  config.model.position.scaling.rope_type = "yarn"
  prepared = prepare.prepare(config, str(tmp_path))
  assert prepared.config.model.position.scaling.original_max_position_embeddings == 32
  assert prepared.config.model.max_len == 64
  assert prepared.init_from == prepare.Source(os.path.abspath(source), SOURCE_STEPS)
  config.model.position.scaling.original_max_position_embeddings = 48  # set: kept
  prepared = prepare.prepare(config, str(tmp_path))
  assert prepared.config.model.position.scaling.original_max_position_embeddings == 48
  assert not os.listdir(tmp_path)  # prepare writes nothing


def _refused(config, workdir, match):
  with pytest.raises(ValueError, match=match):
    prepare.prepare(config, str(workdir))
  assert not os.listdir(workdir)


def test_a_missing_source_no_checkpoint_or_unknown_step_is_refused(source, tmp_path):
  new, empty = tmp_path / "new", tmp_path / "empty"
  new.mkdir()
  empty.mkdir()
  missing = tmp_path / "missing"
  _refused(
    _finetune_config(missing), new, rf"^train\.init_from='{missing}': no such directory {missing}$"
  )
  _refused(
    _finetune_config(empty),
    new,
    rf"^train\.init_from='{empty}': no checkpoint in {empty}/checkpoints; train the "
    "source run first$",
  )
  assert not os.listdir(empty)  # nothing created in the source either
  _refused(
    _finetune_config(f"{source}@7"),
    new,
    rf"^train\.init_from='{source}@7': no checkpoint at step 7 in {source}/checkpoints; "
    rf"steps there: \[(\d+, )*{SOURCE_STEPS}\]$",
  )
  _refused(
    _finetune_config(f"{source}@last"),
    new,
    r"the step after '@' must be an integer \(DIR or DIR@STEP\)",
  )
  config = _finetune_config(f"{source}@{SOURCE_STEPS}")  # an explicit step is accepted
  assert prepare.prepare(config, str(new)).init_from.step == SOURCE_STEPS


def test_a_parameter_of_another_shape_is_refused_naming_it(source, tmp_path):
  config = _finetune_config(source)
  config.model.d_model = 32
  _refused(
    config,
    tmp_path,
    r"^train\.init_from='.*': parameter blocks\.0\.attn\.wk has shape \(64, 4, 16\) in "
    r"the source and \(32, 4, 16\) in this config; the model's shape fields",
  )


@pytest.mark.slow  # trains a learned-table source
def test_a_learned_table_of_another_length_is_refused(tmp_path):
  learned = tmp_path / "learned"
  train.train(tiny_config("learned", steps=1, checkpoint_every=1000), str(learned))
  config = tiny_config("learned", init_from=str(learned))
  config.data.seq_len = 64
  new = tmp_path / "new"
  new.mkdir()
  _refused(
    config,
    new,
    r"parameter position\.\S+ has shape \(32, 64\) in the source and "
    r"\(64, 64\) in this config",
  )


def test_another_tokenizer_is_refused(source, tmp_path, monkeypatch):
  class OtherTokenizer:
    vocab_size = 259

    def metadata(self):
      return {"kind": "sentencepiece", "vocab_size": 259, "sha256": "0" * 64}

  monkeypatch.setattr(prepare.data, "get_tokenizer", lambda data_cfg: OtherTokenizer())
  _refused(
    _finetune_config(source),
    tmp_path,
    r"^train\.init_from='.*': the source was trained with tokenizer \{'kind': 'byte', "
    r"'vocab_size': 259\}, data\.\* gives \{'kind': 'sentencepiece'",
  )


def test_another_scheme_needs_init_from_any_scheme(source, tmp_path):
  config = tiny_config("nope", init_from=str(source))
  _refused(
    config,
    tmp_path,
    r"^model\.position\.name='nope' differs from the source's 'rope' \(train\.init_from="
    r".*\); set train\.init_from_any_scheme=True to fine-tune into another scheme$",
  )
  config.train.init_from_any_scheme = True  # RoPE -> NoPE (DroPE): same parameters
  assert prepare.prepare(config, str(tmp_path)).init_from.step == SOURCE_STEPS


def test_the_temperature_changes_only_with_init_from_any_scheme(source, tmp_path):
  """DroPE recalibrates with a temperature; one with parameters (ssmax) is not the source's."""
  config = _finetune_config(source)
  config.model.attention.temperature = "log_n"
  _refused(
    config,
    tmp_path,
    r"^model\.attention\.temperature='log_n' differs from the source's 'none' \(train\.init_from=",
  )
  config.train.init_from_any_scheme = True
  assert prepare.prepare(config, str(tmp_path / "log_n")).init_from.step == SOURCE_STEPS
  config.model.attention.temperature = "ssmax"
  (tmp_path / "ssmax").mkdir()
  _refused(config, tmp_path / "ssmax", r"^train\.init_from='.*': parameter .*ssmax.* has shape")


@pytest.mark.slow  # recalibrates the source
@pytest.mark.parametrize("over", ["head", "heads"])
def test_qk_norm_is_added_only_with_init_from_any_scheme_and_starts_from_one(
  source, tmp_path, over
):
  """DroPE's reference recalibrates with QK-norm added (over all heads, as OLMo 2): the new
  scales start at 1, every other parameter is the source's."""
  config = tiny_config("nope", init_from=str(source))
  config.train.init_from_any_scheme = True
  config.model.update(qk_norm=True, qk_norm_over=over)
  config.model.attention.temperature = "log_n"
  prepared = prepare.prepare(config, str(tmp_path / "drope"))
  params, added = prepare.restore_source_params(prepared)
  expected = [f"blocks.{i}.attn.{n}_norm.scale" for i in range(2) for n in "kq"]
  assert sorted(added) == expected
  shape = {"head": (16,), "heads": (4, 16)}[over]
  source_params, _ = checkpoint.restore_params(str(source))
  flat = {checkpoint.dotted(path): var.get_value() for path, var in nnx.to_flat_state(params)}
  for name, value in flat.items():
    if name in added:
      assert value.shape == shape and np.all(np.asarray(value) == 1.0), name
    else:
      np.testing.assert_array_equal(value, _at(source_params, name), err_msg=name)
  train.train(config, str(tmp_path / "drope"))  # recalibrates: the new scales train too
  trained, meta = checkpoint.restore_params(str(tmp_path / "drope"))
  assert meta["step"] == config.train.steps
  assert not np.all(_at(trained, expected[0]) == 1.0)
  refused = tiny_config("rope", init_from=str(source))
  refused.model.qk_norm = True
  (tmp_path / "plain").mkdir()
  _refused(
    refused, tmp_path / "plain", r"^train\.init_from='.*': parameter blocks\.0\.attn\.k_norm"
  )


def _at(tree: dict, dotted: str):
  for key in dotted.split("."):
    tree = tree[int(key) if key.isdigit() and not isinstance(tree, dict) else key]
  return np.asarray(tree)


def test_another_trained_field_is_refused(source, tmp_path):
  config = _finetune_config(source)
  config.model.position.base = 500.0
  _refused(
    config,
    tmp_path,
    r"^model\.position\.base=500\.0 differs from the source's 10000\.0 \(train\.init_from="
    r".*\): fine-tuning may change only data\.seq_len \(model\.max_len follows\)",
  )


@pytest.mark.slow  # a subprocess
def test_the_cli_refuses_a_missing_source_before_writing(tmp_path):
  workdir = tmp_path / "run"
  proc = run_lcx(
    [*TINY_FLAGS, f"--workdir={workdir}", f"--config.train.init_from={tmp_path}/missing"],
    check=False,
  )
  assert proc.returncode == 2, proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == (
    f"error: train.init_from='{tmp_path}/missing': no such directory {tmp_path}/missing"
  )
  assert not workdir.exists()


def test_a_scaling_file_sets_the_scaling_the_finetune_trains_with(source, tmp_path):
  long_factor = [1.0, 1.0, 1.5, 1.5, 2.0, 2.5, 3.0, 3.5]  # head_dim 16: 8 rotary pairs
  factors = tmp_path / "factors.json"
  factors.write_text(
    json.dumps(
      {
        "rope_type": "longrope",
        "factor": 2.0,
        "original_max_position_embeddings": 32,
        "short_factor": [1.0] * 8,
        "long_factor": long_factor,
      }
    )
  )
  config = _finetune_config(source, scaling_file=str(factors))
  workdir = tmp_path / "run"
  workdir.mkdir()
  prepared = prepare.prepare(config, str(workdir))
  scaling = prepared.config.model.position.scaling
  assert scaling.rope_type == "longrope"
  assert list(scaling.long_factor) == long_factor
  assert prepared.config.train.scaling_file == str(factors)
  _refused(
    _finetune_config(source, scaling_file=str(tmp_path / "missing.json")),
    workdir,
    r"train.scaling_file=.*missing.json.*cannot read",
  )
  nope = tiny_config("nope", scaling_file=str(factors))
  _refused(nope, workdir, r"train.scaling_file=.* is not allowed with model.position.name='nope'")
