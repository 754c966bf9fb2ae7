"""The passkey probe: prompts of exact token lengths with the needle at its depth, scoring by
the first number generated, config checks naming the field, and the result file end to end."""

import json
import os
import re
import types

import numpy as np
import pytest

from lcx.data.tokenizers import ByteTokenizer
from lcx.run import sharding, train
from lcx.tools import evaluate
from lcx.tools.evaluate import checks as eval_checks, passkey
from tests.helpers import run_lcx, tiny_config

BYTES = ByteTokenizer()


@pytest.mark.parametrize("length", [97, 100, 161, 400, 1000])
def test_prompt_has_the_exact_length_and_the_needle_at_its_depth(length):
  needle = passkey.NEEDLE.format(key="12345")
  starts = []
  for depth in (0.0, 0.25, 0.5, 0.75, 1.0):
    ids = passkey.prompt(BYTES, length, depth, "12345")
    text = BYTES.decode(ids)
    assert len(ids) == length and ids[0] == BYTES.bos_id and ids.dtype == np.int32
    assert text.endswith(passkey.QUESTION) and text.count(needle) == 1
    assert "12345" not in text.replace(needle, "")
    at = text.index(needle)
    filler = text[:at] + text[at + len(needle) : -len(passkey.QUESTION)]
    assert filler == "" or filler.endswith(". ")  # whole sentences up to the question
    assert at == 0 or text[:at].endswith(". ")  # the needle sits between sentences
    starts.append(at)
  budget = length - passkey.shortest(BYTES, 5)
  assert starts == sorted(starts) and starts[0] == 0 and starts[-1] == budget


def test_answer_is_the_first_number_and_keys_are_seeded():
  assert passkey.answer(BYTES, BYTES.encode(" 12345. The")) == "12345"
  assert passkey.answer(BYTES, BYTES.encode("123456")) == "123456"  # not the key 12345
  assert passkey.answer(BYTES, BYTES.encode(" the key")) is None
  keys = passkey.keys(50, 5, seed=3)
  assert keys == passkey.keys(50, 5, seed=3) != passkey.keys(50, 5, seed=4)
  assert all(len(k) == 5 and k[0] != "0" for k in keys)
  assert set(passkey.keys(200, 1, seed=0)) == set("0123456789")


def test_config_checks_name_the_field():
  config = tiny_config()
  config.eval.passkey.depths = (0.0, 1.5)
  with pytest.raises(ValueError, match=r"eval.passkey.depths=\(0.0, 1.5\) is not allowed"):
    sharding.validate(config)
  config = tiny_config()
  config.eval.passkey.lengths = (64, 0)
  with pytest.raises(ValueError, match="eval.passkey.lengths"):
    sharding.validate(config)
  config = tiny_config()
  config.data.update(name="task", task="copy", task_max_len=4)
  config.eval.passkey.lengths = (128,)
  with pytest.raises(ValueError, match="eval.passkey.lengths=.*for text runs"):
    eval_checks.validate(config)
  config = tiny_config()
  config.eval.passkey.lengths = (200, 64)
  with pytest.raises(
    ValueError,
    match=r"eval.passkey.lengths=\(200, 64\): 64 tokens cannot "
    r"hold .* use lengths >= 97",
  ):
    passkey.check_lengths(config, BYTES)


def _fake_runner(config, too_long=None):
  def check_length(n):
    if too_long and n > too_long:
      raise ValueError(f"the learned table has {too_long} positions")

  return types.SimpleNamespace(
    config=config,
    prepared=types.SimpleNamespace(graphdef=None),
    params=None,
    check_length=check_length,
    kernel=lambda n: "dense",
  )


@pytest.mark.parametrize("oracle,accuracy", [(True, 1.0), (False, 0.0)])
def test_sweep_scores_each_cell_by_exact_match(monkeypatch, oracle, accuracy):
  """A generator that reads the key from the prompt scores 1, one that is off by one 0; a
  length the scheme cannot reach is skipped with the reason."""
  config = tiny_config()
  config.eval.passkey.update(lengths=(120, 100, 300), depths=(0.0, 0.5, 1.0), examples=3)
  config.eval.batch_tokens = 260  # two rows of 120 + 7 tokens per batch, the last filled up
  calls = []

  def fake_generate(graphdef, params, prompt_BxP, new_tokens, kernel):
    calls.append(prompt_BxP.shape)
    out = []
    for row in prompt_BxP:
      key = int(BYTES.decode(row).split("The pass key is ")[1][:5]) + (0 if oracle else 1)
      out.append(BYTES.encode(f" {key}. "[:new_tokens]))
    return np.stack(out)

  monkeypatch.setattr(passkey.generate, "generate", fake_generate)
  body = passkey.sweep(_fake_runner(config, too_long=200), BYTES)
  assert body["lengths"] == [100, 120, 300] and body["depths"] == [0.0, 0.5, 1.0]
  assert [(c["length"], c["depth"]) for c in body["cells"]] == [
    (n, d) for n in (100, 120) for d in (0.0, 0.5, 1.0)
  ]
  assert all(c["accuracy"] == accuracy and c["examples"] == 3 for c in body["cells"])
  assert list(body["skipped"]) == ["300"] and "learned table" in body["skipped"]["300"]
  assert body["protocol"]["new_tokens"] == 7
  assert set(calls) == {(2, 100), (2, 120)} and len(calls) == 2 * 5  # 9 prompts in 5 batches


@pytest.mark.slow
def test_evaluation_writes_a_passkey_result_per_variant_that_the_report_renders(tmp_path, capsys):
  workdir = str(tmp_path / "run")
  config = tiny_config("rope", steps=10, checkpoint_every=1000)
  config.eval.update(multipliers=(1,), num_tokens=256, bootstrap=10, variants="none,yarn@2")
  config.eval.passkey.update(lengths=(100,), depths=(0.0, 1.0), examples=2)
  train.train(config, workdir)
  capsys.readouterr()
  results = evaluate.evaluate(config, workdir)
  assert sorted(results) == ["none", "passkey@none", "passkey@yarn@2", "yarn@2"]
  err = capsys.readouterr().err  # each length's time, and how much of it went to compiling
  assert re.search(
    r"eval length 32: perplexity .* kernel, [\d.]+ s, [\d.]+ of them compiling\)", err
  )
  assert re.search(
    r"passkey length 100: accuracy .* examples \([\d.]+ s, [\d.]+ of them compiling\)", err
  )
  with open(os.path.join(workdir, "eval", "passkey@yarn@2.json")) as f:
    result = json.load(f)
  assert result["kind"] == "passkey" and result["variant"] == "yarn@2"
  assert result["overrides"] == {"model.position.scaling": {"rope_type": "yarn", "factor": 2.0}}
  assert result["step"] == 10 and result["train_len"] == 32 and result["lengths"] == [100]
  assert [(c["length"], c["depth"], c["examples"]) for c in result["cells"]] == [
    (100, 0.0, 2),
    (100, 1.0, 2),
  ]
  common = set(results["none"]) - {"protocol", "lengths", "skipped"}
  assert common <= set(result)  # the same common keys as the length sweep's
  # Another passkey setting: the length results are reused, the passkey ones recomputed.
  config.eval.passkey.examples = 3
  capsys.readouterr()
  again = evaluate.evaluate(config, workdir)
  err = capsys.readouterr().err
  assert "reusing" in err and err.count("reusing") == 2 and "none.json (same checkpoint" in err
  assert "passkey@none.json (same checkpoint" not in err
  assert again["passkey@none"]["cells"][0]["examples"] == 3
  proc = run_lcx(
    [os.path.join(workdir, "eval"), f"--out={tmp_path / 'report'}"], module="lcx.tools.report"
  )
  assert "Passkey retrieval" in proc.stdout and "| 100 (3.125x) |" in proc.stdout
  assert (tmp_path / "report" / "passkey.png").exists()
