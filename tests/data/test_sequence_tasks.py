"""Tasks whose answer is a random sequence with determined bytes scored: flip-flop language
modelling (Liu et al. 2023: the language, its mixes, its error rate) and MQAR (Zoology)."""

import re
import types

import numpy as np
import pytest

import lcx.data
from lcx.data import config, tasks, tokenizers
from lcx.tools.evaluate import checks as eval_checks, tasks as task_eval

TOKENIZER = tokenizers.ByteTokenizer()
P_IGNORE = {"flip_flop": 0.8, "flip_flop_sparse": 0.98, "flip_flop_dense": 0.1}  # the paper's


def _reads(text: bytes) -> list[tuple[int, int]]:
  """Independent oracle: (byte index, bit) of every read's answer, from the last write."""
  memory, reads = None, []
  for m in re.finditer(rb"([wri])([01])", text):
    if m.group(1) == b"w":
      memory = m.group(2)
    elif m.group(1) == b"r":
      reads.append((m.start(2), int(memory)))
  return reads


@pytest.mark.parametrize("task", sorted(tasks.FLIP_FLOP))
@pytest.mark.parametrize("length", [2, 3, 17, 256])
def test_flip_flop_is_the_language_with_the_read_bits_scored(task, length):
  for seed in range(20):
    example = tasks.TASKS[task](np.random.default_rng(seed), length)
    assert example.prompt == b"" and re.fullmatch(rb"(?:[wri][01])+", example.answer)
    assert len(example.answer) == 2 * length
    assert example.answer[:1] == b"w" and example.answer[-2:-1] == b"r"
    reads = _reads(example.answer)
    assert example.scored == tuple(i for i, _ in reads)
    assert [int(example.answer[i : i + 1]) for i in example.scored] == [b for _, b in reads]


def test_flip_flop_mixes_have_the_papers_probabilities():
  assert tasks.FLIP_FLOP == P_IGNORE
  for task, p_ignore in P_IGNORE.items():
    ops = b"".join(
      tasks.TASKS[task](np.random.default_rng(s), 256).answer[2:-2:2] for s in range(80)
    )
    share = {op: ops.count(op) / len(ops) for op in b"wri"}
    n = len(ops)  # 20,320 draws: 5 standard errors of the most spread share is under 0.018
    assert abs(share[ord("i")] - p_ignore) < 5 * np.sqrt(0.25 / n), (task, share)
    for op in b"wr":
      assert abs(share[op] - (1 - p_ignore) / 2) < 5 * np.sqrt(0.25 / n), (task, share)


def test_flip_flop_bits_are_fair():
  draws = [tasks.TASKS["flip_flop"](np.random.default_rng(s), 64) for s in range(50)]
  bits = [int(chr(b)) for e in draws for b in e.answer[1::2]]
  reads = [e.answer[i] - ord("0") for e in draws for i in e.scored]
  assert abs(np.mean(bits) - 0.5) < 0.05 and abs(np.mean(reads) - 0.5) < 0.1


def test_flip_flop_refuses_a_length_without_a_write_and_a_read():
  with pytest.raises(ValueError, match=r"^length=1 is not allowed; allowed: >= 2 for flip-flop"):
    tasks.TASKS["flip_flop"](np.random.default_rng(0), 1)


def _cfg(**overrides):
  data_cfg = config.default_config()
  data_cfg.update(
    name="task",
    task="flip_flop",
    task_min_len=8,
    task_max_len=8,
    task_eval_factor=2,
    seq_len=tasks.document_tokens("flip_flop", 8) - 1,
    batch_size=4,
    task_eval_examples=200,
  )
  data_cfg.update(overrides)
  return data_cfg


def test_flip_flop_trains_on_the_read_bits_only():
  assert tasks.document_tokens("flip_flop", 256) == 514  # BOS + the paper's 512 tokens + EOS
  documents = tasks.train_examples(_cfg(), TOKENIZER, 0, 1)
  for i in range(30):
    ids_N, mask_N = documents[i]["ids"], documents[i]["loss_mask"]
    assert ids_N[0] == TOKENIZER.bos_id and ids_N[-1] == TOKENIZER.eos_id and len(ids_N) == 18
    text = bytes(ids_N[1:-1].astype(np.uint8))
    assert np.flatnonzero(mask_N).tolist() == [1 + i for i, _ in _reads(text)]
  batch = next(lcx.data.make_train_iterator(_cfg()))
  targets, mask = (
    batch["targets"][batch["loss_mask"] == 1],
    batch["inputs"][batch["loss_mask"] == 1],
  )
  assert set(targets.tolist()) <= set(b"01") and set(mask.tolist()) == {ord("r")}


class _NextToken:
  """A runner stand-in: predicts each next token of the true sequence, or `constant` always."""

  def __init__(self, data_cfg, constant=None):
    self.config = types.SimpleNamespace(data=data_cfg, eval=types.SimpleNamespace(bootstrap=200))
    self.constant = constant

  def check_length(self, length):
    pass

  def predict(self, inputs_NxT, pos_NxT, segments_NxT):
    if self.constant is not None:
      return np.full(inputs_NxT.shape, self.constant, np.int32)
    next_NxT = np.zeros_like(inputs_NxT)
    next_NxT[:, :-1] = inputs_NxT[:, 1:]
    for row in range(len(inputs_NxT)):  # the last input's next token: a read's or a query's
      text = bytes(inputs_NxT[row][segments_NxT[row] == 1][1:].astype(np.uint8))
      if self.config.data.task == "mqar":
        key = text[-2:]
        last = text[text.index(key) + 2]
      else:
        last = ord(str(_reads(text + b"0")[-1][1]))
      next_NxT[row, segments_NxT[row].sum() - 1] = last
    return next_NxT


def test_a_perfect_predictor_scores_no_error_and_a_constant_one_the_share_of_other_bits():
  data_cfg = _cfg()
  perfect = task_eval.sweep(_NextToken(data_cfg), TOKENIZER)
  assert list(perfect["buckets"]) == ["8-8", "9-16"]
  for bucket in perfect["buckets"].values():
    assert bucket["error_rate"] == 0.0 and bucket["accuracy"] == 1.0
    assert bucket["error_rate_ci"] == [0.0, 0.0]
  zeros = task_eval.sweep(_NextToken(data_cfg, constant=ord("0")), TOKENIZER)
  sizes = tasks.eval_lengths(data_cfg, data_cfg.task_eval_examples, data_cfg.seed)
  for (lo, hi), bucket in zip(tasks.eval_buckets(data_cfg), zeros["buckets"].values()):
    reads = []
    for size in sorted(set(sizes.tolist())):
      if lo <= size <= hi:
        for index in range(int((sizes == size).sum())):
          example = tasks.TASKS["flip_flop"](tasks._eval_rng(data_cfg.seed, size, index), size)
          reads += [bit for _, bit in _reads(example.answer)]
    assert bucket["error_rate"] == pytest.approx(np.mean(reads))  # wrong exactly on the ones
    low, high = bucket["error_rate_ci"]
    assert low < bucket["error_rate"] < high and 0.35 < bucket["error_rate"] < 0.65


def test_the_flip_flop_config_is_paths_table_1_setting_with_the_three_mixes():
  from configs import flip_flop
  from lcx.run import sharding

  config = flip_flop.get_config("pos=rope")
  sharding.validate(config)
  eval_checks.validate(config)
  m = config.model
  assert (m.num_layers, m.num_heads, m.d_model) == (1, 2, 64)
  assert config.data.seq_len == 513 and config.data.task == "flip_flop"
  named = config.eval.named_variants
  assert {k: v["data"]["task"] for k, v in named.items()} == {
    "sparse": "flip_flop_sparse",
    "dense": "flip_flop_dense",
  }
  assert config.eval.variants == "none,sparse,dense"


def _mqar(prompt: bytes, answer: bytes) -> list[tuple[int, int]]:
  """Independent oracle: (answer index, value) of each query, from the pairs in the prompt."""
  table = dict(re.findall(rb"([a-z]{2})([A-Z])", prompt))
  assert len(table) == len(prompt) // 3  # distinct keys
  return [(m.start(2), table[m.group(1)][0]) for m in re.finditer(rb"([a-z]{2})([A-Z])", answer)]


@pytest.mark.parametrize("length", [1, 2, 9, 64])
def test_mqar_asks_every_key_once_and_scores_its_value(length):
  for seed in range(20):
    example = tasks.mqar(np.random.default_rng(seed), length)
    assert (
      re.fullmatch(rb"(?:[a-z]{2}[A-Z])+", example.prompt) and len(example.prompt) == 3 * length
    )
    assert len(example.answer) == 3 * length
    queries = _mqar(example.prompt, example.answer)
    assert example.scored == tuple(i for i, _ in queries)
    assert [example.answer[i] for i in example.scored] == [v for _, v in queries]
    assert sorted(re.findall(rb"[a-z]{2}", example.answer)) == sorted(
      re.findall(rb"[a-z]{2}", example.prompt)
    )
  with pytest.raises(ValueError, match=r"^length=677 is not allowed; allowed: 1..676 for mqar"):
    tasks.mqar(np.random.default_rng(0), 677)


def test_mqar_trains_on_the_values_and_a_perfect_predictor_scores_no_error():
  data_cfg = _cfg(task="mqar", seq_len=tasks.document_tokens("mqar", 8) - 1)
  document = tasks.train_examples(data_cfg, TOKENIZER, 0, 1)[0]
  ids_N = document["ids"]
  assert len(ids_N) == 2 + 6 * 8 and document["loss_mask"].sum() == 8
  assert set(ids_N[document["loss_mask"] == 1].tolist()) <= set(tasks.MQAR_VALUES)
  perfect = task_eval.sweep(_NextToken(data_cfg), TOKENIZER)
  assert all(b["error_rate"] == 0.0 and b["accuracy"] == 1.0 for b in perfect["buckets"].values())
  first = task_eval.sweep(_NextToken(data_cfg, constant=ord("A")), TOKENIZER)
  for bucket in first["buckets"].values():  # wrong on every value but the A's: ~25/26
    assert 0.9 < bucket["error_rate"] < 1.0
