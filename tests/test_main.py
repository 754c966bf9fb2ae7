"""The command line: every bad input is one `error: ...` line with exit status 2, before any
file is written; config-specific messages are in test_config.py."""

import collections
import json

import pytest

from tests.helpers import TINY_FLAGS, refused_before_jax, run_lcx, tiny_config


@pytest.mark.slow
@pytest.mark.parametrize(
  "args, message",
  [
    (
      ["--config=configs/base.py:size=tiny"],
      "flag --workdir=None: Flag --workdir must have a value other than None.",
    ),
    (
      ["--config=configs/nonexistent.py"],
      "Configuration is not available because of an earlier "
      "failure to load: Failed loading config file",
    ),
    ([*TINY_FLAGS, "--mode=serve"], "flag --mode=serve: value should be one of "),
    (
      [*TINY_FLAGS, "--distributed=on"],
      "--distributed=on: jax.distributed.initialize() could "
      "not read a cluster from the environment",
    ),
    (
      [*TINY_FLAGS, "--distributed=off", "--coordinator_address=127.0.0.1:1"],
      "--distributed=off contradicts --coordinator_address; drop one",
    ),
  ],
)
def test_bad_command_lines_are_one_line_errors(tmp_path, args, message):
  workdir = tmp_path / "run"
  proc = run_lcx(
    [*args, f"--workdir={workdir}"] if "workdir" not in message else args,
    env={"JAX_PLATFORMS": "cpu"},
    check=False,
    timeout=120,
  )
  assert proc.returncode == 2, proc.stderr[-3000:]
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("error: " + message), last
  assert "Traceback" not in proc.stderr
  assert not workdir.exists()


@pytest.mark.slow
def test_train_and_eval_checks_the_config_loads_the_tokenizer_and_traces_the_model_once(
  tmp_path, monkeypatch
):
  """One command (lcx.main's `run`, once main parsed the flags) checks the config once:
  check_declared before jax is imported, check_code before prepare's module (a bad value is
  refused before checkpointing and the data pipeline load), and prepare repeats neither.
  prepare loads the tokenizer and traces the abstract model; the mesh check, training, the
  evaluation plan and the `none` variant reuse what it built."""
  from lcx import main
  from lcx.config import checks as config_lib
  from lcx.data import pipeline
  from lcx.model import decoder as model
  from lcx.run import checkpoint, sharding
  from lcx.tools.evaluate import checks as eval_checks

  calls = collections.Counter()
  Checkpointer_init = checkpoint.Checkpointer.__init__

  def counted(name, original):
    def wrapper(*args, **kwargs):
      calls[name] += 1
      return original(*args, **kwargs)

    return wrapper

  for name in ("check_declared", "check_code", "check_fields"):
    monkeypatch.setattr(config_lib, name, counted(name, getattr(config_lib, name)))
  monkeypatch.setattr(sharding, "validate", counted("validate", sharding.validate))
  monkeypatch.setattr(eval_checks, "validate", counted("validate_eval", eval_checks.validate))
  monkeypatch.setattr(model, "abstract", counted("abstract", model.abstract))
  for kind, load in list(pipeline.TOKENIZERS.items()):  # every load, whoever asks for it
    monkeypatch.setitem(pipeline.TOKENIZERS, kind, counted(f"tokenizer {kind}", load))
  # One flow: evaluation takes the trained parameters from training, reading nothing back.
  monkeypatch.setattr(checkpoint.Checkpointer, "__init__", counted("open", Checkpointer_init))
  monkeypatch.setattr(
    checkpoint.Checkpointer,
    "restore_params",
    counted("restore_params", checkpoint.Checkpointer.restore_params),
  )
  config = tiny_config(steps=2, checkpoint_every=2)
  workdir = tmp_path / "run"
  main.run(config, str(workdir), "train_and_eval")
  assert (workdir / "eval" / "none.json").exists()  # it trained and evaluated
  assert calls == {
    "check_declared": 1,
    "check_code": 1,
    "abstract": 1,
    "tokenizer byte": 1,
    "open": 1,
  }, calls
  in_memory = json.loads((workdir / "eval" / "none.json").read_text())
  # Evaluating the checkpoint from disk (one reader, one restore) gives the same result.
  calls.clear()
  main.run(config, str(workdir), "eval", force=True)
  assert calls["open"] == 1 and calls["restore_params"] == 1, calls
  from_disk = json.loads((workdir / "eval" / "none.json").read_text())
  assert from_disk["checkpoint"] == in_memory["checkpoint"] and from_disk["step"] == 2
  assert from_disk["lengths"] == in_memory["lengths"]


@pytest.mark.parametrize(
  "override, message",
  [
    (
      "--config.model.position.name=bogus",
      "model.position.name='bogus' is not allowed; allowed: alibi, cope, fire, fox, ",
    ),
    ("--config.train.lr=-1", "train.lr=-1.0 is not allowed; allowed: > 0"),
    ("--config.eval.lengths=(64,0)", "eval.lengths=(64, 0) is not allowed; allowed: >= 1 each"),
    (
      "--config.eval.protocol=windows,bogus",
      "eval.protocol='windows,bogus' is not allowed; allowed: windows, sliding, last_k",
    ),
    (
      "--config.model.position.base=0.5",
      "model.position.base=0.5 is not allowed; allowed: > 1 (theta_i",
    ),
  ],
)
def test_a_bad_field_is_refused_before_jax_is_imported(tmp_path, override, message):
  """The config file, the flags and the field checks load no jax (6-7 s of a typo's wait
  before): the module list Python prints under PYTHONPROFILEIMPORTTIME has no jax or flax."""
  workdir = tmp_path / "run"
  error = refused_before_jax(["--config=configs/base.py", override, f"--workdir={workdir}"])
  assert error.startswith("error: " + message), error
  assert not workdir.exists()
