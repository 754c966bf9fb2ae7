import collections
import re

import numpy as np
import pytest

import lcx.data
from lcx.data import config, tasks, tokenizers

TOKENIZER = tokenizers.ByteTokenizer()


# Independent oracles: each computes the answer from the prompt bytes alone.
def _recall(prompt):
  pairs, query = prompt.split(b"?")
  table = dict(p.split(b":") for p in pairs.split(b";") if p)
  return table[query.removesuffix(b":")]


def _induction(prompt):
  cue = prompt[-tasks.INDUCTION_CUE :]
  start = prompt.index(cue) + len(cue)
  return prompt[start : len(prompt) - len(cue)]


def _polynomial(prompt):
  terms, x = re.fullmatch(rb"f=(.*);f\((\d)\)=", prompt).groups()
  total = sum(int(c) * int(x) ** int(d) for c, d in re.findall(rb"(\d)x\^(\d)", terms))
  return str(total % 10).encode()


def _lego(prompt):
  """Values spread from the constant 1 to every variable set from it, breadth first."""
  clauses, query = prompt.removesuffix(b"=").split(b";")
  set_from = collections.defaultdict(list)  # right-hand name -> [(variable, sign)]
  for clause in clauses.split(b","):
    variable, expression = clause.split(b"=")
    set_from[expression[1:]].append((variable, -1 if expression[:1] == b"-" else 1))
  values, queue = {b"1": 1}, collections.deque([b"1"])
  while queue:
    name = queue.popleft()
    for variable, sign in set_from[name]:
      assert variable not in values
      values[variable] = sign * values[name]
      queue.append(variable)
  assert len(values) == clauses.count(b",") + 2  # Every variable resolved, once.
  return b"+1" if values[query] == 1 else b"-1"


def _niah(prompt):
  """Needles `key is value. ` collected in order; the question at the end says which."""
  table = collections.defaultdict(list)
  for key, value in re.findall(rb"\b([a-z]{3}) is (\d{3})\. ", prompt):
    table[key].append(value)
  if m := re.search(rb"What is ([a-z]{3})\? $", prompt):
    (value,) = table[m.group(1)]
    return value
  if m := re.search(rb"What are ([a-z]{3}) and ([a-z]{3})\? $", prompt):
    return b",".join(v for k in m.groups() for v in table[k])
  key = re.search(rb"What are all values of ([a-z]{3})\? $", prompt).group(1)
  assert len(table) == 1
  return b",".join(table[key])


_SCAN_DOES = {"walk": "W", "run": "R", "jump": "J", "look": "L", "turn": ""}
_SCAN_TURNS = {"left": "<", "right": ">"}


def _scan_clause(words):
  times = {"twice": 2, "thrice": 3}.get(words[-1], 1)
  if times > 1:
    words = words[:-1]
  does = _SCAN_DOES[words[0]]
  if len(words) == 1:
    assert words[0] != "turn"
    return does * times
  turn, how = _SCAN_TURNS[words[-1]], words[1:-1]
  once = {(): turn + does, ("opposite",): 2 * turn + does, ("around",): 4 * (turn + does)}[
    tuple(how)
  ]
  return once * times


def _scan_command(words):
  """The last link splits the command: links group from the left."""
  links = [i for i, word in enumerate(words) if word in ("and", "after")]
  if not links:
    return _scan_clause(words)
  before, after = _scan_command(words[: links[-1]]), _scan_clause(words[links[-1] + 1 :])
  return before + after if words[links[-1]] == "and" else after + before


def _scan(prompt):
  return (_scan_command(prompt.removesuffix(b"=").decode().split()) + ".").encode()


_PCFG_EDITS = {
  "copy": lambda x: x,
  "reverse": lambda x: list(reversed(x)),
  "shift": lambda x: x[1:] + x[:1],
  "echo": lambda x: x + [x[-1]],
  "repeat": lambda x: x * 2,
  "append": lambda x, y: x + y,
  "prepend": lambda x, y: y + x,
  "remove_first": lambda x, y: y,
  "remove_second": lambda x, y: x,
}


def _swap_first_last(x):
  x = list(x)
  x[0], x[-1] = x[-1], x[0]
  return x


_PCFG_EDITS["swap_first_last"] = _swap_first_last


def _pcfg(prompt):
  """Recursive descent over the prefix notation, on lists of symbols."""
  tokens = prompt.removesuffix(b"=").decode().split(" ")

  def expression(at):
    token = tokens[at]
    if token.isupper():
      return list(token), at + 1
    x, at = expression(at + 1)
    if _PCFG_EDITS[token].__code__.co_argcount == 1:
      return _PCFG_EDITS[token](x), at
    assert tokens[at] == ","
    y, at = expression(at + 1)
    return _PCFG_EDITS[token](x, y), at

  symbols, end = expression(0)
  assert end == len(tokens)
  return ("".join(symbols) + ".").encode()


def _modular_arithmetic(prompt):
  assert re.fullmatch(rb"[0-4](?:[-+*][0-4])*=", prompt)
  return str(eval(prompt[:-1].decode()) % 5).encode()  # Python's precedence: `*` first


def _cycle_navigation(prompt):
  position = 0
  for move in prompt.removesuffix(b"="):
    position = (position + {ord("0"): 0, ord("+"): 1, ord("-"): -1}[move]) % 5
  return str(position).encode()


def _stack_manipulation(prompt):
  stack, actions = re.fullmatch(rb"([01]+)([pzo]*)=", prompt).groups()
  stack = list(stack)
  for action in actions:
    if action == ord("p"):
      stack = stack[:-1]
    else:
      stack.append(ord("0") + (action == ord("o")))
  return bytes(reversed(stack)) + b"."


def _binary_addition(prompt):
  a, b = prompt.removesuffix(b"=").split(b"+")
  total = int(a[::-1], 2) + int(b[::-1], 2)
  return bin(total)[2:].zfill(len(a) + 1)[::-1].encode()


ORACLES = {
  "copy": lambda p: p.removesuffix(b"="),
  "reverse": lambda p: p.removesuffix(b"=")[::-1],
  "sort": lambda p: bytes(sorted(p.removesuffix(b"="))),
  "addition": lambda p: (
    str(sum(map(int, p[:-1].split(b"+")))).encode().zfill(len(p[:-1].split(b"+")[0]) + 1)
  ),
  "parity": lambda p: str(p.count(b"1") % 2).encode(),
  "associative_recall": _recall,
  "passkey": lambda p: re.search(rb"The pass key is (\d{5})\.", p).group(1),
  "induction": _induction,
  "polynomial": _polynomial,
  "summation": lambda p: str(sum(map(int, p[:-1].split(b"+"))) % 10).encode(),
  "lego": _lego,
  "scan": _scan,
  "pcfg": _pcfg,
  "niah_multikey": _niah,
  "niah_multiquery": _niah,
  "niah_multivalue": _niah,
  "niah": _niah,
  "even_pairs": lambda p: (
    b"1" if sum(p[i : i + 2] in (b"ab", b"ba") for i in range(len(p))) % 2 == 0 else b"0"
  ),
  "modular_arithmetic": _modular_arithmetic,
  "cycle_navigation": _cycle_navigation,
  "stack_manipulation": _stack_manipulation,
  "bucket_sort": lambda p: bytes(sorted(p.removesuffix(b"="))),
  "duplicate_string": lambda p: p.removesuffix(b"=") * 2,
  "binary_addition": _binary_addition,
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
  "polynomial": lambda p, a: p.count(b"x"),
  "summation": lambda p, a: len(p) // 2,
  "lego": lambda p, a: p.count(b",") + 1,
  "scan": lambda p, a: len(re.findall(rb" (?:and|after) ", p)) + 1,
  "pcfg": lambda p, a: sum(word[:1].islower() for word in p.split()),
  **{
    task: lambda p, a: sum(p.count(s) for s in tasks.FILLER)
    for task in ("niah_multikey", "niah_multiquery", "niah_multivalue", "niah")
  },
  "even_pairs": lambda p, a: len(p) - 1,
  "modular_arithmetic": lambda p, a: len(p) // 2,
  "cycle_navigation": lambda p, a: len(p) - 1,
  "stack_manipulation": lambda p, a: len(p) - 1,
  "bucket_sort": lambda p, a: len(p) - 1,
  "duplicate_string": lambda p, a: len(p) - 1,
  "binary_addition": lambda p, a: len(p.split(b"+")[0]),
}
# The paper's tasks (Kazemnejad et al. 2023) that lcx generates besides the classics.
PAPER_TASKS = ("polynomial", "summation", "lego", "scan", "pcfg")


# Flip-flop's and MQAR's answers are random sequences with determined bytes in them, not a
# function of the prompt: tests/data/test_sequence_tasks.py.
PROMPT_TASKS = sorted(set(tasks.TASKS) - set(tasks.SEQUENCE_TASKS))


def test_every_task_has_an_oracle():
  assert set(ORACLES) == set(PROMPT_TASKS) == set(SIZES)


@pytest.mark.parametrize("task", PROMPT_TASKS)
@pytest.mark.parametrize("length", [1, 2, 7, 40])
def test_examples_are_correct_and_of_the_asked_size(task, length):
  for seed in range(10):
    example = tasks.TASKS[task](np.random.default_rng(seed), length)
    assert example.answer == ORACLES[task](example.prompt)
    assert SIZES[task](example.prompt, example.answer) == length


@pytest.mark.parametrize("task", PAPER_TASKS)
def test_paper_tasks_agree_with_their_oracles_across_lengths(task):
  lengths = np.random.default_rng(1).integers(1, 49, size=300)
  for seed, length in enumerate(lengths):
    example = tasks.TASKS[task](np.random.default_rng([seed, 7]), int(length))
    assert example.answer == ORACLES[task](example.prompt), example
    assert SIZES[task](example.prompt, example.answer) == length


@pytest.mark.parametrize("task", PROMPT_TASKS)
def test_examples_are_deterministic_given_the_rng(task):
  for seed in range(5):
    first, again = (tasks.TASKS[task](np.random.default_rng(seed), 12) for _ in range(2))
    assert first == again
  prompts = {tasks.TASKS[task](np.random.default_rng(s), 12).prompt for s in range(5)}
  assert len(prompts) == 5  # Another rng, another example.


# Tasks with few possible answers, and the most one answer may take of 200 draws.
FEW_ANSWERS = {
  "parity": 0.65,
  "lego": 0.65,
  "summation": 0.2,
  "polynomial": 0.2,
  "even_pairs": 0.65,
  "modular_arithmetic": 0.3,
  "cycle_navigation": 0.3,
}


@pytest.mark.parametrize("task", sorted(tasks.TASKS))
def test_the_answer_cannot_be_guessed_without_the_prompt(task):
  answers = [tasks.TASKS[task](np.random.default_rng(seed), 8).answer for seed in range(200)]
  most_common_share = collections.Counter(answers).most_common(1)[0][1] / len(answers)
  assert most_common_share < FEW_ANSWERS.get(task, 0.05)


@pytest.mark.parametrize("task", sorted(set(PROMPT_TASKS) - set(tasks.MAX_BYTES)))
def test_document_size_depends_on_length_only(task):
  for length in (1, 5, 13):
    sizes = {
      len(
        tasks.training_document(tasks.TASKS[task](np.random.default_rng(s), length), TOKENIZER)[
          "ids"
        ]
      )
      for s in range(20)
    }
    assert sizes == {tasks.document_tokens(task, length, TOKENIZER)}


@pytest.mark.parametrize("task", sorted(tasks.MAX_BYTES))
def test_varying_documents_stay_within_the_declared_bound(task):
  for length in (1, 2, 5, 13, 30):
    sizes = [
      len(
        tasks.training_document(tasks.TASKS[task](np.random.default_rng(s), length), TOKENIZER)[
          "ids"
        ]
      )
      for s in range(300 if length > 1 else 2000)
    ]
    assert max(sizes) <= tasks.document_tokens(task, length, TOKENIZER)
    # One symbol is a one-bit stack and no action: the only stack_manipulation of size 1.
    assert len(set(sizes)) > 1 or (task, length) == ("stack_manipulation", 1)
    if length == 1:  # Some one-clause / one-function draw reaches the bound.
      assert max(sizes) == tasks.document_tokens(task, length)


# The longest examples (every clause the longest, every link `after`; every function
# `remove_second` with 3-letter arguments): their documents are exactly the bound.
LONGEST = {
  "scan": lambda n: " after ".join(["jump around right thrice"] * n) + "=",
  "pcfg": lambda n: "remove_second " * n + "ABC" + " , DEF" * n + "=",
  # multivalue: the longest question and answer.
  # a stack of n - 1 bits and one push: the stack ends n bits deep
  "stack_manipulation": lambda n: "0" * max(n - 1, 1) + "o" * (n > 1) + "=",
  "niah": lambda n: (
    b"".join(tasks.FILLER[i % 5] for i in range(n)).decode()
    + "abc is 123. abc is 456. What are all values of abc? "
  ),
}


@pytest.mark.parametrize("task", sorted(tasks.MAX_BYTES))
def test_the_declared_bound_is_reached(task):
  assert set(LONGEST) == set(tasks.MAX_BYTES)
  for length in (1, 3, 20):
    prompt = LONGEST[task](length).encode()
    assert SIZES[task](prompt, b"") == length
    assert len(prompt) + len(ORACLES[task](prompt)) + 2 == tasks.document_tokens(task, length)


def test_chomsky_tasks_match_the_papers_examples():
  """Deletang et al.'s worked examples, in lcx's symbols."""
  assert ORACLES["modular_arithmetic"](b"1+2*3=") == b"2"
  assert ORACLES["modular_arithmetic"](b"1-1-1=") == b"4"
  assert ORACLES["modular_arithmetic"](b"0*1+4*3-2=") == b"0"
  assert ORACLES["stack_manipulation"](b"0110opp=") == b"110."
  assert ORACLES["stack_manipulation"](b"110ppp=") == b"."
  assert _binary_addition(b"00100+01101=") == b"010110"  # 4 + 22 = 26, widths padded
  assert ORACLES["even_pairs"](b"abba=") == b"1" and ORACLES["even_pairs"](b"aab=") == b"0"
  for seed in range(200):  # the same examples from the generators' own code paths
    example = tasks.modular_arithmetic(np.random.default_rng(seed), 3)
    assert example.answer == _modular_arithmetic(example.prompt)


def test_niah_needles_land_at_every_sentence_boundary_and_keep_their_order():
  length, starts = 3, collections.Counter()
  for seed in range(300):
    prompt = tasks.niah_multivalue(np.random.default_rng(seed), length).prompt
    sentences = re.split(rb"(?<=\. )", prompt)
    needles = [i for i, s in enumerate(sentences) if re.fullmatch(rb"[a-z]{3} is \d{3}\. ", s)]
    assert len(needles) == tasks.NIAH_NEEDLES
    starts[sum(not re.match(rb"[a-z]{3} is", s) for s in sentences[: needles[0]])] += 1
  assert sorted(starts) == list(range(length + 1))  # before the first sentence ... after the last


def test_niah_mixes_its_three_variants():
  questions = collections.Counter(
    re.search(rb"What (is|are all|are)", tasks.niah(np.random.default_rng(s), 2).prompt).group(1)
    for s in range(600)
  )
  assert set(questions) == {b"is", b"are all", b"are"}
  assert min(questions.values()) > 150


def test_lego_refuses_more_variables_than_names():
  with pytest.raises(
    ValueError, match=r"^length=677 is not allowed; allowed: 1..676 for data.task='lego'"
  ):
    tasks.lego(np.random.default_rng(0), 677)


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
  data_cfg.update(
    name="task",
    task="copy",
    task_min_len=3,
    task_max_len=9,
    task_eval_factor=4,
    seq_len=64,
    batch_size=4,
  )
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
  assert all(any(lo <= n <= hi for lo, hi in tasks.eval_buckets(_task_cfg())) for n in lengths)


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
    assert ORACLES["copy"](bytes(prompt[1:].astype(np.uint8))) == bytes(answer.astype(np.uint8))
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


def _split(ids_N, answer_N):
  """(prompt, answer) bytes of a document's ids, the answer where answer_N is 1."""
  start = int(np.argmax(answer_N))
  assert ids_N[0] == TOKENIZER.bos_id and answer_N[start:].sum() == answer_N.sum()
  return (bytes(ids_N[1:start].astype(np.uint8)), bytes(ids_N[answer_N == 1].astype(np.uint8)))


@pytest.mark.parametrize("task", PROMPT_TASKS)
def test_every_task_trains_and_evaluates_through_the_pipeline(task):
  longest = tasks.document_tokens(task, 5)
  data_cfg = _task_cfg(task=task, task_min_len=1, task_max_len=5, seq_len=longest - 1)
  documents = tasks.train_examples(data_cfg, TOKENIZER, 0, 1)
  sizes = set()
  for i in range(40):
    document = documents[i]
    prompt, answer = _split(document["ids"], document["loss_mask"])
    assert answer == ORACLES[task](prompt) and len(document["ids"]) <= longest
    sizes.add(SIZES[task](prompt, answer))
  assert sizes == set(range(1, 6))
  batch = next(lcx.data.make_train_iterator(data_cfg))
  segments = batch["segment_ids"][0]
  for segment in set(segments[segments > 0].tolist()):
    where = segments == segment
    ids = np.append(batch["inputs"][0][where], batch["targets"][0][where][-1])
    prompt, answer = _split(ids, np.append(0, batch["loss_mask"][0][where]))
    assert answer == ORACLES[task](prompt)
  for prompt, answer in tasks.eval_examples(task, 9, 5, seed=3):
    text = bytes(prompt[1:].astype(np.uint8))
    assert bytes(answer.astype(np.uint8)) == ORACLES[task](text)
  with pytest.raises(ValueError, match=f"data.task={task!r} at data.task_max_len=5"):
    tasks.train_examples(_task_cfg(task=task, task_max_len=5, seq_len=longest - 2), TOKENIZER, 0, 1)


def test_processes_draw_different_examples():
  first = [tasks.train_examples(_task_cfg(), TOKENIZER, p, 2)[0]["ids"] for p in (0, 1)]
  assert not np.array_equal(first[0], first[1])


def test_task_iterator_resumes_exactly(assert_resumes):
  assert_resumes(_task_cfg(task="associative_recall", task_max_len=4))


def test_a_task_too_long_for_seq_len_is_refused():
  with pytest.raises(ValueError, match="data.task_max_len=40 .* data.seq_len=64"):
    lcx.data.make_train_iterator(_task_cfg(task_max_len=40))
