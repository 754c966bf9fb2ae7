"""The rest of Kazemnejad et al. 2023's ("The Impact of Positional Encoding on Length
Generalization in Transformers") set, with their sizes: terms, digits, variables, clauses and
functions (polynomial, summation, lego, SCAN, PCFG SET). SCAN's and PCFG's examples vary in size
at a length: `scan_max_bytes` and `pcfg_max_bytes` bound them."""

import string

import numpy as np

from lcx import errors
from lcx.data.tasks.example import LETTERS, Example


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


def scan_max_bytes(length: int) -> int:
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


def pcfg_max_bytes(length: int) -> int:
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
