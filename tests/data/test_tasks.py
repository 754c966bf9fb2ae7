import collections
import re

import numpy as np
import pytest

import lcx.data
from lcx.data import config
from lcx.data import tasks
from lcx.data import tokenizers

TOKENIZER = tokenizers.ByteTokenizer()


# Independent oracles: each computes the answer from the prompt bytes alone.
def _recall(prompt):
  pairs, query = prompt.split(b"?")
  table = dict(p.split(b":") for p in pairs.split(b";") if p)
  return table[query.removesuffix(b":")]


def _induction(prompt):
  cue = prompt[-tasks.INDUCTION_CUE:]
  start = prompt.index(cue) + len(cue)
  return prompt[start : len(prompt) - len(cue)]


ORACLES = {
    "copy": lambda p: p.removesuffix(b"="),
    "reverse": lambda p: p.removesuffix(b"=")[::-1],
    "sort": lambda p: bytes(sorted(p.removesuffix(b"="))),
    "addition": lambda p: str(sum(map(int, p[:-1].split(b"+")))).encode().zfill(
        len(p[:-1].split(b"+")[0]) + 1),
    "parity": lambda p: str(p.count(b"1") % 2).encode(),
    "associative_recall": _recall,
    "passkey": lambda p: re.search(rb"The pass key is (\d{5})\.", p).group(1),
    "induction": _induction,
}

# How the size `length` shows in a prompt, checked independently of the generator.
SIZES = {
    "copy": lambda p, a: len(p) - 1,
    "reverse": lambda p, a: len(p) - 1,
    "sort": lambda p, a: len(p) - 1,
    "addition": lambda p, a: len(p.split(b"+")[0]),
    "parity": lambda p, a: len(p) - 1,
    "associative_recall": lambda p, a: p.count(b";"),
    "passkey": lambda p, a: sum(p.count(s) for s in tasks.FILLER),
    "induction": lambda p, a: len(a),
}


def test_every_task_has_an_oracle():
  assert set(ORACLES) == set(tasks.TASKS) == set(SIZES)


@pytest.mark.parametrize("task", sorted(tasks.TASKS))
@pytest.mark.parametrize("length", [1, 2, 7, 40])
def test_examples_are_correct_and_of_the_asked_size(task, length):
  for seed in range(10):
    example = tasks.TASKS[task](np.random.default_rng(seed), length)
    assert example.answer == ORACLES[task](example.prompt)
    assert SIZES[task](example.prompt, example.answer) == length


@pytest.mark.parametrize("task", sorted(tasks.TASKS))
def test_the_answer_cannot_be_guessed_without_the_prompt(task):
  answers = [
      tasks.TASKS[task](np.random.default_rng(seed), 8).answer for seed in range(200)
  ]
  most_common_share = collections.Counter(answers).most_common(1)[0][1] / len(answers)
  assert most_common_share < (0.65 if task == "parity" else 0.05)


@pytest.mark.parametrize("task", sorted(tasks.TASKS))
def test_document_size_depends_on_length_only(task):
  for length in (1, 5, 13):
    sizes = {
        len(tasks.training_document(
            tasks.TASKS[task](np.random.default_rng(s), length), TOKENIZER)["ids"])
        for s in range(20)
    }
    assert sizes == {tasks.document_tokens(task, length, TOKENIZER)}


def test_training_document_masks_exactly_the_answer():
  example = tasks.Example(b"abc=", b"abc")
  document = tasks.training_document(example, TOKENIZER)
  assert TOKENIZER.decode(document["ids"]) == "abc=abc"
  assert document["ids"][0] == TOKENIZER.bos_id and document["ids"][-1] == TOKENIZER.eos_id
  assert bytes(document["ids"][document["loss_mask"] == 1].astype(np.uint8)) == b"abc"


def test_passkey_depth_places_the_key():
  rng = np.random.default_rng
  start = tasks.passkey_at_depth(rng(0), 10, 0.0).prompt
  end = tasks.passkey_at_depth(rng(0), 10, 1.0).prompt
  assert start.startswith(b"The pass key is ")
  assert end.index(b"The pass key is ") == sum(len(s) for s in (tasks.FILLER * 2)[:10])


def _task_cfg(**overrides):
  data_cfg = config.default_config()
  data_cfg.update(name="task", task="copy", task_min_len=3, task_max_len=9,
                  task_eval_factor=4, seq_len=64, batch_size=4)
  data_cfg.update(overrides)
  return data_cfg


def test_training_lengths_are_uniform_over_the_configured_range():
  rng = np.random.default_rng(0)
  lengths = [tasks.train_length(_task_cfg(), rng) for _ in range(3000)]
  counts = collections.Counter(lengths)
  assert sorted(counts) == list(range(3, 10))
  assert min(counts.values()) > 3000 / 7 * 0.8


def test_training_documents_follow_the_configured_lengths():
  documents = tasks.train_examples(_task_cfg(), TOKENIZER, 0, 1)
  answer_lengths = {int(documents[i]["loss_mask"].sum()) for i in range(300)}
  assert answer_lengths == set(range(3, 10))


def test_eval_lengths_are_uniform_up_to_the_eval_factor():
  num = 20_000
  lengths = tasks.eval_lengths(_task_cfg(), num)
  assert lengths.min() == 3 and lengths.max() == 36
  counts = np.bincount(lengths, minlength=37)[3:]
  expected = num / len(counts)
  chi_square = ((counts - expected) ** 2 / expected).sum()
  # 33 degrees of freedom: mean 33, sd ~8; 80 is far in the tail for uniform draws
  # while a skew (log-uniform, or training sizes oversampled) is in the thousands.
  assert chi_square < 80, chi_square


def test_eval_buckets_are_the_training_range_then_doublings():
  assert tasks.eval_buckets(_task_cfg()) == [(3, 9), (10, 18), (19, 36)]
  assert tasks.eval_buckets(_task_cfg(task_eval_factor=3)) == [(3, 9), (10, 18), (19, 27)]
  assert tasks.eval_buckets(_task_cfg(task_eval_factor=1)) == [(3, 9)]
  lengths = tasks.eval_lengths(_task_cfg(), 500)
  assert all(any(lo <= n <= hi for lo, hi in tasks.eval_buckets(_task_cfg()))
             for n in lengths)


def test_eval_depth_moves_only_the_needle():
  shallow, deep = (tasks.eval_examples("passkey", 6, 3, depth=d) for d in (0.0, 1.0))
  for (prompt_0, answer_0), (prompt_1, answer_1) in zip(shallow, deep):
    np.testing.assert_array_equal(answer_0, answer_1)  # the same draw at both depths
    text_0, text_1 = (bytes(p[1:].astype(np.uint8)) for p in (prompt_0, prompt_1))
    assert text_0.startswith(b"The pass key is ") and text_1.startswith(tasks.FILLER[0])
    assert sorted(text_0) == sorted(text_1)
  with pytest.raises(ValueError, match="data.task='copy' has no needle depth"):
    tasks.eval_examples("copy", 6, 1, depth=0.5)


def test_eval_examples_are_deterministic_and_not_training_examples():
  pairs = tasks.eval_examples("copy", 9, 20, seed=0)
  again = tasks.eval_examples("copy", 9, 20, seed=0)
  for (prompt, answer), (prompt2, answer2) in zip(pairs, again):
    np.testing.assert_array_equal(prompt, prompt2)
    np.testing.assert_array_equal(answer, answer2)
    assert prompt[0] == TOKENIZER.bos_id and len(answer) == 9
    assert ORACLES["copy"](bytes(prompt[1:].astype(np.uint8))) == bytes(
        answer.astype(np.uint8))
  training = tasks.train_examples(_task_cfg(task_min_len=9), TOKENIZER, 0, 1)
  train_prompts = {bytes(training[i]["ids"][1:11].astype(np.uint8)) for i in range(200)}
  eval_prompts = {bytes(p[1:].astype(np.uint8)) for p, _ in pairs}
  assert train_prompts.isdisjoint(eval_prompts)


def test_exact_match():
  assert tasks.exact_match([1, 2, 3], [1, 2, 3])
  assert tasks.exact_match(np.array([1, 2, 3, 9, 9]), np.array([1, 2, 3]))
  assert not tasks.exact_match([1, 2, 4], [1, 2, 3])
  assert not tasks.exact_match([1, 2], [1, 2, 3])


def test_task_batches_keep_examples_whole_with_loss_on_answers():
  batch = next(lcx.data.make_train_iterator(_task_cfg()))
  for row in range(4):
    segments = batch["segment_ids"][row]
    for segment in set(segments[segments > 0].tolist()):
      where = segments == segment
      text = TOKENIZER.decode(batch["inputs"][row][where])
      answer = TOKENIZER.decode(batch["targets"][row][where & (batch["loss_mask"][row] == 1)])
      prompt = text[: text.index("=") + 1]
      assert batch["inputs"][row][where][0] == TOKENIZER.bos_id
      assert answer.encode() == ORACLES["copy"](prompt.encode())


def test_processes_draw_different_examples():
  first = [tasks.train_examples(_task_cfg(), TOKENIZER, p, 2)[0]["ids"] for p in (0, 1)]
  assert not np.array_equal(first[0], first[1])


def test_task_iterator_resumes_exactly(assert_resumes):
  assert_resumes(_task_cfg(task="associative_recall", task_max_len=4))


def test_a_task_too_long_for_seq_len_is_refused():
  with pytest.raises(ValueError, match="data.task_max_len=40 .* data.seq_len=64"):
    lcx.data.make_train_iterator(_task_cfg(task_max_len=40))
