"""Synthetic tasks: deterministic (prompt, answer) generators for length generalisation.

Each task maps `(rng, length)` to an `Example` of bytes. `length` is the task's size
(how many symbols to copy, digits to add, key-value pairs, filler sentences, terms,
variables, clauses, functions...), and an example's token count depends on `length`
only, so a training length bound is a token bound. Answers are random given the length:
only the prompt determines them. Flip-flop (`FLIP_FLOP`) is the exception: its answer is the
whole sequence, and only the bytes it marks `scored` (the read bits) are determined.

SCAN and PCFG cannot keep that property (what a command or a function composition
produces varies with the draw), so their answers end with `.` (a model must say where
an answer stops) and `MAX_BYTES` declares the most bytes their examples can take at a
length; `document_tokens` uses it, so the training bound stays a token bound. `niah`
(a uniform mix of the three NIAH variants, each of one size) declares its bound too; its
question says which variant, hence how long the answer is.

Training draws sizes uniformly from [task_min_len, task_max_len]; evaluation draws
them uniformly up to task_eval_factor * task_max_len and reports exact match per size
bucket (`eval_buckets`: the training range, then doublings). A training document is
`[BOS] + prompt + answer + [EOS]`, with loss on the answer tokens only.
"""

import dataclasses
import functools
import string
import sys
from collections.abc import Callable

import numpy as np

from lcx import errors

LETTERS = string.ascii_lowercase.encode()


@dataclasses.dataclass(frozen=True)
class Example:
  """`scored`: the answer bytes that carry loss and score (all when None), for a task whose
  answer interleaves random bytes with determined ones (flip-flop)."""

  prompt: bytes
  answer: bytes
  scored: tuple[int, ...] | None = None


def _letters(rng: np.random.Generator, n: int) -> bytes:
  return bytes(rng.choice(np.frombuffer(LETTERS, np.uint8), size=n))


def _number(rng: np.random.Generator, digits: int) -> str:
  """A `digits`-digit number without a leading zero (0..9 for one digit)."""
  first = str(rng.integers(1 if digits > 1 else 0, 10))
  return first + "".join(str(d) for d in rng.integers(0, 10, size=digits - 1))


def copy(rng: np.random.Generator, length: int) -> Example:
  """`abc=` -> `abc`."""
  symbols = _letters(rng, length)
  return Example(symbols + b"=", symbols)


def reverse(rng: np.random.Generator, length: int) -> Example:
  """`abc=` -> `cba`."""
  symbols = _letters(rng, length)
  return Example(symbols + b"=", symbols[::-1])


def sort(rng: np.random.Generator, length: int) -> Example:
  """`cab=` -> `abc`."""
  symbols = _letters(rng, length)
  return Example(symbols + b"=", bytes(sorted(symbols)))


def addition(rng: np.random.Generator, length: int) -> Example:
  """Two `length`-digit numbers; the sum is zero-padded to `length + 1` digits."""
  a, b = _number(rng, length), _number(rng, length)
  total = str(int(a) + int(b)).zfill(length + 1)
  return Example(f"{a}+{b}=".encode(), total.encode())


def parity(rng: np.random.Generator, length: int) -> Example:
  """`10110=` -> `1`: whether the count of ones is odd."""
  bits = rng.integers(0, 2, size=length)
  return Example("".join(map(str, bits)).encode() + b"=", str(bits.sum() % 2).encode())


def associative_recall(rng: np.random.Generator, length: int) -> Example:
  """`length` pairs `key:value;`, then `?key:` -> its value.

  Keys are 4 letters and distinct from each other (so the query has one answer);
  values are 4 digits and may repeat.
  """
  keys = set()
  while len(keys) < length:
    keys.add(_letters(rng, 4))
  keys = sorted(keys)
  keys = [keys[i] for i in rng.permutation(length)]
  values = [str(v).zfill(4).encode() for v in rng.integers(0, 10_000, size=length)]
  query = int(rng.integers(length))
  pairs = b"".join(k + b":" + v + b";" for k, v in zip(keys, values))
  return Example(pairs + b"?" + keys[query] + b":", values[query])


FILLER = (
  b"The grass is green. ",
  b"The sky is blue. ",
  b"The sun is yellow. ",
  b"Here we go. ",
  b"There and back again. ",
)
PASSKEY_QUESTION = b"What is the pass key? The pass key is "


def passkey_at_depth(rng: np.random.Generator, length: int, depth: float) -> Example:
  """A 5-digit key stated after `round(depth * length)` of `length` filler sentences."""
  key = _number(rng, 5).encode()
  needle = b"The pass key is " + key + b". Remember it. " + key + b" is the pass key. "
  filler = [FILLER[i % len(FILLER)] for i in range(length)]
  at = round(depth * length)
  prompt = b"".join(filler[:at]) + needle + b"".join(filler[at:]) + PASSKEY_QUESTION
  return Example(prompt, key)


def passkey(rng: np.random.Generator, length: int) -> Example:
  """`passkey_at_depth` at a uniformly random depth."""
  return passkey_at_depth(rng, length, float(rng.uniform()))


# Needle-in-a-haystack variants after RULER (Hsieh et al. 2024), as DroPE reports them
# (Gelberg et al. 2025): NIAH_NEEDLES needles `key is value. ` (3-letter keys, 3-digit
# values) at uniform sentence boundaries of `length` filler sentences, then a question.
NIAH_NEEDLES = 2


def _niah_prompt(rng: np.random.Generator, length: int, needles: list[bytes], question: bytes):
  """`length` filler sentences with `needles` at sorted uniform boundaries, then `question`."""
  at = np.sort(rng.integers(0, length + 1, size=len(needles)))
  parts = []
  for i in range(length + 1):
    parts += [n for n, a in zip(needles, at) if a == i]
    if i < length:
      parts.append(FILLER[i % len(FILLER)])
  return b"".join(parts) + question


def _distinct_keys(rng: np.random.Generator, n: int) -> list[bytes]:
  keys: list[bytes] = []
  while len(keys) < n:
    key = _letters(rng, 3)
    keys += [] if key in keys else [key]
  return keys


def _distinct_values(rng: np.random.Generator, n: int) -> list[bytes]:
  return [str(v).encode() for v in rng.choice(np.arange(100, 1000), size=n, replace=False)]


def niah_multikey(rng: np.random.Generator, length: int) -> Example:
  """Needles of distinct keys; one key is asked: `... What is abc? ` -> `123`."""
  keys, values = _distinct_keys(rng, NIAH_NEEDLES), _distinct_values(rng, NIAH_NEEDLES)
  needles = [k + b" is " + v + b". " for k, v in zip(keys, values)]
  query = int(rng.integers(NIAH_NEEDLES))
  return Example(
    _niah_prompt(rng, length, needles, b"What is " + keys[query] + b"? "), values[query]
  )


def niah_multiquery(rng: np.random.Generator, length: int) -> Example:
  """Needles of distinct keys; all are asked, in a random order: `What are abc and xyz? `
  -> `123,456` (values in the asked order)."""
  keys, values = _distinct_keys(rng, NIAH_NEEDLES), _distinct_values(rng, NIAH_NEEDLES)
  needles = [k + b" is " + v + b". " for k, v in zip(keys, values)]
  order = rng.permutation(NIAH_NEEDLES)
  question = b"What are " + b" and ".join(keys[i] for i in order) + b"? "
  return Example(_niah_prompt(rng, length, needles, question), b",".join(values[i] for i in order))


def niah_multivalue(rng: np.random.Generator, length: int) -> Example:
  """Needles of one key with distinct values: `What are all values of abc? ` -> `123,456`
  (in the order they appear)."""
  (key,), values = _distinct_keys(rng, 1), _distinct_values(rng, NIAH_NEEDLES)
  needles = [key + b" is " + v + b". " for v in values]
  question = b"What are all values of " + key + b"? "
  return Example(_niah_prompt(rng, length, needles, question), b",".join(values))


NIAH = {"multikey": niah_multikey, "multiquery": niah_multiquery, "multivalue": niah_multivalue}


def niah(rng: np.random.Generator, length: int) -> Example:
  """One of the three NIAH variants, drawn uniformly: a model trained on all three."""
  return tuple(NIAH.values())[int(rng.integers(len(NIAH)))](rng, length)


def _niah_max_bytes(length: int) -> int:
  """The longest variant's prompt + answer (each variant has one size at a length)."""
  rng = np.random.default_rng(0)
  return max(len(e.prompt) + len(e.answer) for e in (f(rng, length) for f in NIAH.values()))


# Tasks whose evaluation can place the needle at chosen depths (data.task_eval_depths).
AT_DEPTH: dict[str, Callable[[np.random.Generator, int, float], Example]] = {
  "passkey": passkey_at_depth,
}


INDUCTION_CUE = 3  # Letters of the prefix repeated in the prompt to start the repeat.


def induction(rng: np.random.Generator, length: int) -> Example:
  """A random prefix, then its first letters again: continue the repeat.

  The prefix is drawn until its opening letters occur nowhere else, so the point
  where the repeat starts is unambiguous.
  """
  while True:
    prefix = _letters(rng, length + INDUCTION_CUE)
    prompt = prefix + prefix[:INDUCTION_CUE]
    if prompt.find(prefix[:INDUCTION_CUE], 1) == len(prefix):
      return Example(prompt, prefix[INDUCTION_CUE:])


# The tasks below are the rest of Kazemnejad et al. 2023's ("The Impact of Positional
# Encoding on Length Generalization in Transformers") set, with their sizes: terms,
# digits, variables, clauses and functions.


def polynomial(rng: np.random.Generator, length: int) -> Example:
  """`length` terms `cx^d` (c in 0..9, d in 0..3) evaluated at x in 0..9, mod 10.

  `f=2x^2+1x^0+7x^3;f(3)=` -> `8` (208 mod 10); x^0 is 1, also at x = 0. The
  modulus is the paper's: the answer stays one digit at every length.
  """
  coeffs = rng.integers(0, 10, size=length)
  degrees = rng.integers(0, 4, size=length)
  x = int(rng.integers(0, 10))
  value = 0
  for coeff, degree in zip(coeffs, degrees):
    value = (value + int(coeff) * pow(x, int(degree), 10)) % 10
  terms = "+".join(f"{c}x^{d}" for c, d in zip(coeffs, degrees))
  return Example(f"f={terms};f({x})=".encode(), str(value).encode())


def summation(rng: np.random.Generator, length: int) -> Example:
  """`length` digits to sum mod 10 (the paper's modulus): `3+3+1+8+6=` -> `1`."""
  digits = rng.integers(0, 10, size=length)
  prompt = "+".join(str(d) for d in digits) + "="
  return Example(prompt.encode(), str(int(digits.sum()) % 10).encode())


LEGO_NAMES = 26 * 26  # Variables are two lowercase letters: the most a lego prompt has.


def lego(rng: np.random.Generator, length: int) -> Example:
  """`length` variables in a chain, each `+` or `-` the one before, the first `+1` or
  `-1`; the clauses shuffled, then one variable asked: `ab=-xy,xy=-1,cd=+ab;cd=` -> `+1`.

  Names are distinct pairs of lowercase letters, so every clause has the same width.
  """
  if not 1 <= length <= LEGO_NAMES:
    raise errors.not_allowed(
      "length", length, f"1..{LEGO_NAMES} for data.task='lego' (two-letter variable names)"
    )
  names = [
    bytes([LETTERS[i // 26], LETTERS[i % 26]])
    for i in rng.choice(LEGO_NAMES, size=length, replace=False)
  ]
  minus = rng.integers(0, 2, size=length).astype(bool)
  clauses, values, value = [], [], 1
  for i, name in enumerate(names):
    value = -value if minus[i] else value
    sign = b"-" if minus[i] else b"+"
    clauses.append(name + b"=" + sign + (names[i - 1] if i else b"1"))
    values.append(value)
  query = int(rng.integers(length))
  prompt = b",".join(clauses[i] for i in rng.permutation(length))
  answer = b"+1" if values[query] > 0 else b"-1"
  return Example(prompt + b";" + names[query] + b"=", answer)


# SCAN (Lake & Baroni 2018): action letters for its primitives and turns.
SCAN_ACTIONS = {"walk": b"W", "run": b"R", "jump": b"J", "look": b"L", "left": b"<", "right": b">"}


def _scan_clauses() -> tuple[tuple[bytes, bytes], ...]:
  """SCAN's 102 one-clause commands (no `and`/`after`) and the actions each means.

  `x left` turns then does x; `x opposite left` turns twice first; `x around left`
  does (turn, x) four times; `turn` alone does nothing but the turns; `twice` and
  `thrice` repeat the whole.
  """
  clauses = []
  for verb in ("walk", "run", "jump", "look", "turn"):
    action = SCAN_ACTIONS.get(verb, b"")
    forms = [] if verb == "turn" else [(verb, action)]
    for side in ("left", "right"):
      turn = SCAN_ACTIONS[side]
      forms += [
        (f"{verb} {side}", turn + action),
        (f"{verb} opposite {side}", 2 * turn + action),
        (f"{verb} around {side}", 4 * (turn + action)),
      ]
    for words, actions in forms:
      for count, repeat in ((1, ""), (2, " twice"), (3, " thrice")):
        clauses.append(((words + repeat).encode(), count * actions))
  return tuple(clauses)


SCAN_CLAUSES = _scan_clauses()
SCAN_LINKS = (b"and", b"after")


def scan(rng: np.random.Generator, length: int) -> Example:
  """A SCAN command of `length` clauses -> its actions and `.`.

  `walk left after jump twice=` -> `JJ<W.` (walk W, run R, jump J, look L, turn
  left <, right >). A clause is uniform over `SCAN_CLAUSES`, each link `and` (then)
  or `after` (before) uniformly. SCAN joins at most two clauses; longer commands
  group from the left: `a after b and c` is `(a after b) and c`, i.e. `b a c`.
  The paper sizes SCAN by its actions, which SCAN's grammar caps at 48 with gaps;
  clauses are a size with no cap.
  """
  picks = rng.integers(len(SCAN_CLAUSES), size=length)
  afters = rng.integers(0, 2, size=length - 1)  # 1: `after`, 0: `and`.
  words, actions = SCAN_CLAUSES[picks[0]]
  prompt = [words]
  for pick, after in zip(picks[1:], afters):
    more_words, more_actions = SCAN_CLAUSES[pick]
    prompt += [SCAN_LINKS[after], more_words]
    actions = more_actions + actions if after else actions + more_actions
  return Example(b" ".join(prompt) + b"=", actions + b".")


def _scan_max_bytes(length: int) -> int:
  """Every clause the one with the most words + actions, every link `after`."""
  clause = max(len(words) + len(actions) for words, actions in SCAN_CLAUSES)
  link = max(len(link) for link in SCAN_LINKS) + 2  # With its two spaces.
  return clause * length + link * (length - 1) + 2  # `=` and `.`


# PCFG SET (Hupkes et al. 2020): string edits applied to strings of symbols.
PCFG_UNARY = ("copy", "reverse", "shift", "echo", "swap_first_last", "repeat")
PCFG_BINARY = ("append", "prepend", "remove_first", "remove_second")
PCFG_LEAF = 3  # The most letters in an argument string.
SYMBOLS = string.ascii_uppercase.encode()


def _pcfg_apply(name: str, x: bytes, y: bytes = b"") -> bytes:
  if name == "reverse":
    return x[::-1]
  if name == "shift":
    return x[1:] + x[:1]
  if name == "echo":
    return x + x[-1:]
  if name == "swap_first_last":
    return x[-1:] + x[1:-1] + x[:1] if len(x) > 1 else x
  if name == "repeat":
    return x + x
  if name == "append":
    return x + y
  if name == "prepend":
    return y + x
  if name == "remove_first":
    return y
  return x  # copy, remove_second


def pcfg(rng: np.random.Generator, length: int) -> Example:
  """`length` functions of PCFG SET in prefix notation, binary arguments split by ` , `,
  applied to strings of 1..3 uppercase letters -> the resulting string and `.`.

  `echo append copy ABC , shift remove_second KD , HQ=` -> `ABCDKK.` (the paper's
  size: its productivity split counts functions). Functions are uniform over the
  ten, except that `repeat` becomes one of the other five unary ones when its argument
  is longer than `PCFG_LEAF` letters, so answers grow linearly with `length`, not
  exponentially. `swap_first_last` leaves one letter as it is.
  """
  names = PCFG_UNARY + PCFG_BINARY
  tokens = []  # Prefix order: function names (str) and argument strings (bytes).
  need, functions = 1, length  # Expressions still to write; functions still to place.
  while need:
    if functions and (need == 1 or rng.random() < 0.5):
      tokens.append(names[rng.integers(len(names))])
      need += tokens[-1] in PCFG_BINARY
      functions -= 1
    else:
      size = int(rng.integers(1, PCFG_LEAF + 1))
      tokens.append(bytes(rng.choice(np.frombuffer(SYMBOLS, np.uint8), size=size)))
      need -= 1
  stack = []  # (value, text) of the expressions to the right; the top is the nearest.
  for token in reversed(tokens):
    if isinstance(token, bytes):
      stack.append((token, token))
    elif token in PCFG_BINARY:
      (x, x_text), (y, y_text) = stack.pop(), stack.pop()
      text = b"%s %s , %s" % (token.encode(), x_text, y_text)
      stack.append((_pcfg_apply(token, x, y), text))
    else:
      x, x_text = stack.pop()
      if token == "repeat" and len(x) > PCFG_LEAF:
        token = PCFG_UNARY[rng.integers(len(PCFG_UNARY) - 1)]  # Any but repeat (last).
      stack.append((_pcfg_apply(token, x), b"%s %s" % (token.encode(), x_text)))
  ((value, text),) = stack
  return Example(text + b"=", value + b".")


def _pcfg_max_bytes(length: int) -> int:
  """Charges each function its name and space, a binary one also ` , ` and one
  argument (there is one more argument than binary functions), plus what it can add
  to the answer: a kept argument (append, prepend), a repeat's copy (at most
  PCFG_LEAF letters), an echo's letter. The remaining argument, its letters in the
  answer, `=` and `.` come once."""
  unary = max(len(f) + 1 + (f == "echo") + PCFG_LEAF * (f == "repeat") for f in PCFG_UNARY)
  binary = max(
    len(f) + 4 + PCFG_LEAF + PCFG_LEAF * (f in ("append", "prepend")) for f in PCFG_BINARY
  )
  return max(unary, binary) * length + 2 * PCFG_LEAF + 2


# Flip-flop language modelling (Liu et al. 2023, "Exposing Attention Glitches with Flip-Flop
# Language Modeling"): `length` instructions w (write), r (read), i (ignore), each followed by a
# bit; the first is w and the last r, the rest i with probability p_i and w or r with (1 - p_i)/2
# each. A read's bit is the last written bit: the only determined bits, so the only ones scored
# (the paper's error rate) and trained on. The paper's sequences are 512 tokens (length 256);
# it trains on FFL(p_i=0.8) and tests on it, on a sparse FFL(0.98) and a dense FFL(0.1).
FLIP_FLOP = {"flip_flop": 0.8, "flip_flop_sparse": 0.98, "flip_flop_dense": 0.1}


def flip_flop_mix(rng: np.random.Generator, length: int, p_ignore: float) -> Example:
  """`w1i0r1w0r0` -> the whole string as the answer (empty prompt), scored on the bits after r.

  Every token but the read bits is random, so the model writes the whole sequence and only the
  read bits can be right or wrong.
  """
  if length < 2:
    raise errors.not_allowed("length", length, ">= 2 for flip-flop (a first write, a last read)")
  p_write = (1 - p_ignore) / 2
  middle = rng.choice(3, size=length - 2, p=[p_write, p_write, p_ignore])
  ops = np.concatenate([[0], middle, [1]])  # 0 w, 1 r, 2 i
  bits = rng.integers(0, 2, size=length)
  text, scored, memory = bytearray(), [], 0
  for op, bit in zip(ops.tolist(), bits.tolist()):
    if op == 0:
      memory = bit
    elif op == 1:
      bit = memory
      scored.append(len(text) + 1)
    text += b"wri"[op : op + 1] + str(bit).encode()
  return Example(b"", bytes(text), tuple(scored))


MQAR_VALUES = string.ascii_uppercase.encode()


def mqar(rng: np.random.Generator, length: int) -> Example:
  """Multi-query associative recall (Arora et al. 2023, Zoology): `length` pairs of a key (two
  lowercase letters, distinct) and a value (an uppercase letter), then every key asked once in a
  random order, each followed by its value: `abXcdY` -> `cdYabX`, scored on the values.

  The answer is the query block; its keys are random (unscored), its values determined.
  """
  if not 1 <= length <= LEGO_NAMES:
    raise errors.not_allowed("length", length, f"1..{LEGO_NAMES} for mqar (two-letter keys)")
  keys = [
    bytes([LETTERS[i // 26], LETTERS[i % 26]])
    for i in rng.choice(LEGO_NAMES, size=length, replace=False)
  ]
  values = [MQAR_VALUES[i : i + 1] for i in rng.integers(0, len(MQAR_VALUES), size=length)]
  order = rng.permutation(length)
  answer = b"".join(keys[i] + values[i] for i in order)
  return Example(
    b"".join(k + v for k, v in zip(keys, values)), answer, tuple(range(2, 3 * length, 3))
  )


# Tasks whose answer is a whole random sequence with determined bytes in it (`Example.scored`):
# no function of the prompt gives their answer.
SEQUENCE_TASKS = (*FLIP_FLOP, "mqar")


# A subset of Deletang et al. 2023's ("Neural Networks and the Chomsky Hierarchy") tasks, as
# Ruoss et al. 2023 use them, sized like the paper by input symbols, one byte each. Answers with
# a length that varies end with `.` (the paper's termination token).


def even_pairs(rng: np.random.Generator, length: int) -> Example:
  """`length` letters a/b -> `1` if `ab` and `ba` occur an even number of times in all, else `0`."""
  symbols = bytes(rng.choice(np.frombuffer(b"ab", np.uint8), size=length))
  pairs = sum(symbols[i] != symbols[i + 1] for i in range(length - 1))
  return Example(symbols + b"=", b"1" if pairs % 2 == 0 else b"0")


CHOMSKY_MODULUS = 5  # The paper's modulus for modular arithmetic and cycle length.


def modular_arithmetic(rng: np.random.Generator, length: int) -> Example:
  """`length` numbers in 0..4 joined by `+`, `-`, `*` (`*` first, then left to right) mod 5:
  `1-1-1=` -> `4`, `0*1+4*3-2=` -> `0`."""
  numbers = rng.integers(0, CHOMSKY_MODULUS, size=length)
  ops = rng.choice(np.frombuffer(b"+-*", np.uint8), size=length - 1)
  terms, sign, product = [], 1, int(numbers[0])
  for op, number in zip(bytes(ops), numbers[1:].tolist()):
    if op == ord("*"):
      product *= number
    else:
      terms.append(sign * product)
      sign, product = (1 if op == ord("+") else -1), number
  terms.append(sign * product)
  text = "".join(str(n) + chr(o) for n, o in zip(numbers[:-1].tolist(), bytes(ops)))
  prompt = (text + str(numbers[-1]) + "=").encode()
  return Example(prompt, str(sum(terms) % CHOMSKY_MODULUS).encode())


def cycle_navigation(rng: np.random.Generator, length: int) -> Example:
  """`length` moves on a cycle of 5 from 0: `0` stay, `+` one forward, `-` one back -> the
  final position: `++-+=` -> `2`."""
  moves = rng.integers(0, 3, size=length)
  position = int((moves == 1).sum() - (moves == 2).sum()) % CHOMSKY_MODULUS
  return Example(bytes(b"0+-"[m] for m in moves) + b"=", str(position).encode())


STACK_ACTIONS = b"pzo"  # pop, push 0, push 1


def stack_manipulation(rng: np.random.Generator, length: int) -> Example:
  """A stack of bits given bottom to top, then actions `p` pop (ignored on an empty stack),
  `z` push 0, `o` push 1, `length` symbols in all -> the final stack top to bottom and `.`:
  `0110opp=` -> `110.`. The stack takes 1..length-1 symbols (one bit at length 1)."""
  size = 1 if length == 1 else int(rng.integers(1, length))
  stack = bytes(rng.choice(np.frombuffer(b"01", np.uint8), size=size))
  actions = bytes(rng.choice(np.frombuffer(STACK_ACTIONS, np.uint8), size=length - size))
  final = bytearray(stack)
  for action in actions:
    if action == ord("p"):
      final = final[:-1]
    else:
      final.append(ord("0") if action == ord("z") else ord("1"))
  return Example(stack + actions + b"=", bytes(final[::-1]) + b".")


def bucket_sort(rng: np.random.Generator, length: int) -> Example:
  """`length` letters from `a`..`e` -> sorted: `ceab=` -> `abce`."""
  symbols = bytes(rng.choice(np.frombuffer(b"abcde", np.uint8), size=length))
  return Example(symbols + b"=", bytes(sorted(symbols)))


def duplicate_string(rng: np.random.Generator, length: int) -> Example:
  """`length` bits -> them twice: `011=` -> `011011`."""
  symbols = bytes(rng.choice(np.frombuffer(b"01", np.uint8), size=length))
  return Example(symbols + b"=", symbols + symbols)


def binary_addition(rng: np.random.Generator, length: int) -> Example:
  """Two `length`-bit numbers, little-endian (lowest bit first) -> their sum, little-endian,
  `length + 1` bits: `110+100=` -> `0010` (3 + 1 = 4). The paper splits `length` between two
  numbers of random widths and ends the sum with a termination token; equal widths keep every
  answer one size, as the `addition` task does."""
  a, b = (rng.integers(0, 2, size=length) for _ in range(2))
  total = int("".join(map(str, a[::-1])), 2) + int("".join(map(str, b[::-1])), 2)
  bits = f"{total:b}".zfill(length + 1)[::-1]
  text = "".join(map(str, a)) + "+" + "".join(map(str, b)) + "="
  return Example(text.encode(), bits.encode())


TASKS: dict[str, Callable[[np.random.Generator, int], Example]] = {
  "copy": copy,
  "reverse": reverse,
  "sort": sort,
  "addition": addition,
  "parity": parity,
  "associative_recall": associative_recall,
  "passkey": passkey,
  "induction": induction,
  "polynomial": polynomial,
  "summation": summation,
  "lego": lego,
  "scan": scan,
  "pcfg": pcfg,
  "niah_multikey": niah_multikey,
  "niah_multiquery": niah_multiquery,
  "niah_multivalue": niah_multivalue,
  "niah": niah,
  **{
    name: functools.partial(flip_flop_mix, p_ignore=p_ignore)
    for name, p_ignore in FLIP_FLOP.items()
  },
  "mqar": mqar,
  "even_pairs": even_pairs,
  "modular_arithmetic": modular_arithmetic,
  "cycle_navigation": cycle_navigation,
  "stack_manipulation": stack_manipulation,
  "bucket_sort": bucket_sort,
  "duplicate_string": duplicate_string,
  "binary_addition": binary_addition,
}

# Tasks whose example size varies at a given length: the most bytes prompt + answer
# can take (some draw reaches it). Every other task's examples all have one size.
MAX_BYTES: dict[str, Callable[[int], int]] = {
  "scan": _scan_max_bytes,
  "pcfg": _pcfg_max_bytes,
  "niah": _niah_max_bytes,
  "stack_manipulation": lambda length: 2 * length + 2,  # the stack at most `length` bits
}


def _task(name: str) -> Callable[[np.random.Generator, int], Example]:
  if name not in TASKS:
    raise errors.not_allowed("data.task", name, TASKS)
  return TASKS[name]


def _at_depth(name: str, depth: float) -> Callable[[np.random.Generator, int], Example]:
  if name not in AT_DEPTH:
    raise ValueError(
      f"data.task={name!r} has no needle depth; tasks with one: {', '.join(AT_DEPTH)}."
    )
  return functools.partial(AT_DEPTH[name], depth=depth)


def _train_rng(seed: int, index: int) -> np.random.Generator:
  return np.random.default_rng([seed, 0, index])


def _eval_rng(seed: int, length: int, index: int) -> np.random.Generator:
  """Tagged apart from `_train_rng`, so evaluation never replays training examples."""
  return np.random.default_rng([seed, 1, length, index])


def train_length(data_cfg, rng: np.random.Generator) -> int:
  return int(rng.integers(data_cfg.task_min_len, data_cfg.task_max_len + 1))


def eval_lengths(data_cfg, num: int, seed: int = 0) -> np.ndarray:
  """`num` sizes uniform in [task_min_len, task_eval_factor * task_max_len]."""
  high = data_cfg.task_eval_factor * data_cfg.task_max_len
  return np.random.default_rng([seed, 2]).integers(data_cfg.task_min_len, high + 1, size=num)


def eval_buckets(data_cfg) -> list[tuple[int, int]]:
  """Inclusive size ranges: [task_min_len, task_max_len] (seen in training), then
  doublings (max, 2 max], (2 max, 4 max], ... up to task_eval_factor * task_max_len."""
  high = data_cfg.task_eval_factor * data_cfg.task_max_len
  edges = [data_cfg.task_min_len - 1, data_cfg.task_max_len]
  while edges[-1] < high:
    edges.append(min(2 * edges[-1], high))
  return [(low + 1, top) for low, top in zip(edges[:-1], edges[1:])]


def scored_mask(example: Example, answer_ids: np.ndarray) -> np.ndarray:
  """Which answer ids are scored: all, or the `scored` bytes (tasks are byte-level)."""
  if example.scored is None:
    return np.ones(len(answer_ids), bool)
  mask_N = np.zeros(len(answer_ids), bool)
  mask_N[list(example.scored)] = True
  return mask_N


def training_document(example: Example, tokenizer) -> dict:
  """`[BOS] + prompt + answer + [EOS]` ids, loss mask 1 exactly on the (scored) answer ids."""
  prompt_ids = tokenizer.encode(example.prompt)
  answer_ids = tokenizer.encode(example.answer)
  ids_N = np.concatenate([[tokenizer.bos_id], prompt_ids, answer_ids, [tokenizer.eos_id]]).astype(
    np.int32
  )
  loss_mask_N = np.zeros(ids_N.shape, np.float32)
  loss_mask_N[1 + len(prompt_ids) : 1 + len(prompt_ids) + len(answer_ids)] = scored_mask(
    example, answer_ids
  )
  return {"ids": ids_N, "loss_mask": loss_mask_N}


def document_tokens(task: str, length: int, tokenizer=None) -> int:
  """Token count of the longest training document of this size: every draw's for a
  task of one size, BOS + `MAX_BYTES` + EOS for one that varies (tasks are byte-level:
  data.tokenizer must be 'byte')."""
  if task in MAX_BYTES:
    return MAX_BYTES[task](length) + 2
  if tokenizer is None:
    from lcx.run.data import tokenizers  # Tasks are byte-level.

    tokenizer = tokenizers.ByteTokenizer()
  example = _task(task)(np.random.default_rng(0), length)
  return len(training_document(example, tokenizer)["ids"])


def train_examples(data_cfg, tokenizer, process_index: int, process_count: int):
  """An endless grain MapDataset of training documents; this process takes every
  `process_count`-th example index, so processes never share an example."""
  import grain  # here, not at the top: checking a config (data.validate) needs none of it

  generate = _task(data_cfg.task)
  longest = document_tokens(data_cfg.task, data_cfg.task_max_len, tokenizer)
  if longest - 1 > data_cfg.seq_len:
    raise ValueError(
      f"data.task={data_cfg.task!r} at data.task_max_len={data_cfg.task_max_len}"
      f" makes documents of up to {longest} tokens, more than data.seq_len="
      f"{data_cfg.seq_len} + 1; raise data.seq_len or lower data.task_max_len."
    )

  def document(index: int) -> dict:
    rng = _train_rng(data_cfg.seed, index)
    return training_document(generate(rng, train_length(data_cfg, rng)), tokenizer)

  indices = grain.MapDataset.range(process_index, sys.maxsize, process_count)
  return indices.map(document)


def eval_examples(
  task: str,
  length: int,
  num: int,
  seed: int = 0,
  tokenizer=None,
  depth: float | None = None,
  scored: bool = False,
) -> list[tuple[np.ndarray, ...]]:
  """`num` (prompt_ids, answer_ids) pairs of size `length`; prompts start with BOS.

  `depth` places the needle of an `AT_DEPTH` task; the same draws are used at every
  depth, so depths compare like for like. Decode greedily from the prompt and score
  with `exact_match`. `scored` adds each answer's `scored_mask` as a third item.
  """
  if tokenizer is None:
    from lcx.run.data import tokenizers  # Tasks are byte-level by default.

    tokenizer = tokenizers.ByteTokenizer()
  generate = _task(task) if depth is None else _at_depth(task, depth)
  pairs = []
  for index in range(num):
    example = generate(_eval_rng(seed, length, index), length)
    prompt_ids = np.concatenate([[tokenizer.bos_id], tokenizer.encode(example.prompt)])
    answer_ids = tokenizer.encode(example.answer)
    mask = (scored_mask(example, answer_ids),) if scored else ()
    pairs.append((prompt_ids.astype(np.int32), answer_ids, *mask))
  return pairs


def exact_match(pred_ids, answer_ids) -> bool:
  """Whether the first len(answer_ids) predicted ids are exactly the answer.

  Ids after the answer are ignored, so decoding may run a fixed budget past it.
  """
  pred_N = np.asarray(pred_ids).reshape(-1)
  answer_N = np.asarray(answer_ids).reshape(-1)
  return len(pred_N) >= len(answer_N) and bool(np.array_equal(pred_N[: len(answer_N)], answer_N))
