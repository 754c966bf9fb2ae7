"""Claims declared before the runs, and the verdict each gets from the results: the engine.

An experiment's sweep.py may declare `CLAIMS = [Claim(...), ...]`, written before its runs: which
row beats which baseline row, or how much a row's loss rises past L, at which lengths, by at
least how much. `./launch.sh report PATH... --claims=experiments/NAME` judges them on the
results and adds a "Claims (pre-declared)" section.

What a claim compares, per seed s, in mean loss per token over the same documents (`Claim`):
- a row against a baseline: the run ROW-s<s> minus BASE-s<s> at the length;
- a rise (`minus_length`, e.g. 1): ROW-s<s>'s loss at the length minus its own loss at
  minus_length x L, document by document (a "lengths" result scores the same documents and
  tokens at every length of the windows protocol: `lengths.paired` checks it);
- a difference of rises (`minus_length` and a baseline): ROW-s<s>'s rise minus BASE-s<s>'s, each
  document's own difference of differences (`lengths.minus`).

Each claim is judged at each length it names (a cell):
- per seed s, that difference, with the wider of its 95% percentile bootstrap interval
  (documents resampled, the same ones for both sides: `lengths.paired`) and the 95% t interval
  of that token-weighted mean over the documents (`document_t`): with a handful of documents a
  percentile bootstrap is too narrow, and a seed agrees only where both agree;
- over the n seeds, the mean of those differences, its t interval mean +- t(0.975, n-1) x sd /
  sqrt(n), and the p of its t test (below), adjusted by Holm's step-down method over the
  claim's cells (the family: its lengths, m of them).

The directions (`DIRECTIONS`), each with its test, its seeds' agreement and its rules:
- "below" / "above" (the claim's side: below 0, lower loss, or above it): the two-sided p of the
  t test of mean 0; a seed agrees where its interval excludes 0 on the claim's side;
- "within" (flat, or equal): |mean| below the minimum effect m, an equivalence test (TOST,
  Schuirmann 1987): p is twice the larger of the one-sided t tests of mean <= -m and mean >= m,
  so that p < 0.05 exactly where the 95% t interval lies inside (-m, m), as the two-sided p of
  the others is below 0.05 exactly where their 95% interval excludes 0; a seed agrees where its
  interval lies inside (-m, m).

The verdicts, experiments/README.md's labels, tried in this order ("the effect": the mean on
the claim's side).
- inconclusive, with one seed: no t interval (one run cannot show the seeds' variation).
- reproduced: below / above: the Holm-adjusted p < 0.05 with the mean on the claim's side, the
  effect larger than the claim's minimum effect, and every seed agreeing; within: the
  Holm-adjusted p < 0.05 and every seed agreeing.
- not reproduced: the t interval excludes the minimum effect on the claim's side (the effect is
  reliably smaller than the minimum, or the opposite); within: the t interval lies outside
  (-m, m) (|mean| reliably past m).
- underpowered: below / above: the t interval holds 0 and its half-width, the minimum detectable
  effect (MDE), exceeds the minimum effect: a tie says nothing; within: the MDE exceeds m, so
  the t interval cannot fit inside (-m, m).
- inconclusive otherwise; the first condition of "reproduced" that failed says why (e.g. the
  seeds that agree, k of n).
"untestable here" is a judgment about the regime, not a statistic: a README gives it, never
this engine.

The claims are read from sweep.py without running it (`read_claims`): its imports load the
model and jax, and the report reads JSON only. `CLAIMS` holds every size's claims; a variant
whose runs are other rows declares its own list, `CLAIMS_<ARG>` (`experiments/NAME:matched_base`
reads `CLAIMS_MATCHED_BASE`).
"""

from __future__ import annotations

import ast
import dataclasses
import math
import os
import re
from collections.abc import Sequence

from lcx import cli, errors
from lcx.tools.report import lengths, tables

ALPHA = 0.05  # two-sided, after Holm: the 95% of the intervals
T_QUANTILE = 0.975


@dataclasses.dataclass(frozen=True)
class Claim:
  """At each length in `lengths` (multiples of the training length), in each seed: `row` minus
  `baseline` (run names without their -s<seed>) at `variant`; with `minus_length` (a multiple,
  e.g. 1), each row's loss there minus its own at minus_length x L (its rise), `row`'s rise
  minus `baseline`'s, or with `baseline=None` `row`'s rise alone. It lies `direction` ("below":
  lower loss, or "above") 0 by more than `min_effect` nats/token, or "within" +-min_effect of 0
  (flat, or equal): fixed before the runs."""

  name: str
  row: str
  baseline: str | None
  lengths: tuple[int, ...]
  direction: str
  min_effect: float
  variant: str = "none"
  minus_length: int | None = None

  def __post_init__(self):
    where = f"Claim({self.name!r})"
    if self.direction not in DIRECTIONS:
      raise errors.not_allowed(f"{where}.direction", self.direction, DIRECTIONS)
    if not self.lengths or not all(isinstance(n, int) and n >= 1 for n in self.lengths):
      raise errors.not_allowed(f"{where}.lengths", self.lengths, "integers >= 1 (multiples of L)")
    direction = DIRECTIONS[self.direction]
    if not direction.allows(self.min_effect):
      raise errors.not_allowed(f"{where}.min_effect", self.min_effect, direction.allowed)
    minus = self.minus_length
    if minus is not None and (not isinstance(minus, int) or minus < 1 or minus in self.lengths):
      raise errors.not_allowed(
        f"{where}.minus_length", minus, "None, or a multiple of L (an integer >= 1) not in lengths"
      )
    if self.baseline is None and minus is None:  # a row minus nothing
      raise errors.not_allowed(
        f"{where}.baseline", None, "a row's name, or None with minus_length (the row's own rise)"
      )

  def stems(self) -> tuple[str, ...]:
    """The rows the claim reads: the row, and its baseline where it has one."""
    return (self.row,) if self.baseline is None else (self.row, self.baseline)

  def quantity(self) -> str:
    """`alibi/none - rope/none`, `alibi/none - 1x`, `(si/none - 1x) - (rope/none - 1x)`."""
    if self.minus_length is None:
      return f"{self.row}/{self.variant} - {self.baseline}/{self.variant}"
    rises = [f"{stem}/{self.variant} - {self.minus_length}x" for stem in self.stems()]
    return rises[0] if len(rises) == 1 else " - ".join(f"({r})" for r in rises)

  def declared(self) -> str:
    """`alibi/none - rope/none < -0.010`, `-0.050 < alibi/none - 1x < +0.050`: the comparison
    and its bound."""
    return DIRECTIONS[self.direction].declared(self.quantity(), self.min_effect)


@dataclasses.dataclass(frozen=True)
class Cell:
  """One claim at one length: the per-seed paired differences and what they give."""

  claim: Claim
  length: int  # tokens
  train_len: int
  seeds: tuple[int, ...]
  pairs: tuple[tuple[float, list[float] | None], ...]  # per seed: difference, its interval
  mean: float
  half: float | None  # the t interval's half-width (the MDE); None with one seed
  p: float | None  # the direction's t test (module docstring); None with one seed
  holm: float | None = None  # p after Holm over the claim's cells
  verdict: str = ""
  decided: str = ""

  def agree(self) -> int:
    """Seeds whose interval agrees with the claim (its direction's `agrees`)."""
    direction = DIRECTIONS[self.claim.direction]
    return sum(1 for _, ci in self.pairs if ci and direction.agrees(ci, self.claim.min_effect))


# Student's t.


def t_cdf(t: float, df: int) -> float:
  """P(T <= t) for Student's t with integer df >= 1, exact (Abramowitz & Stegun 26.7.3-4: a
  finite series in cos(theta), theta = atan(t / sqrt(df))): no scipy."""
  theta = math.atan(abs(t) / math.sqrt(df))
  c2 = math.cos(theta) ** 2
  if df % 2:
    term, total = 1.0, 1.0 if df > 1 else 0.0
    for k in range(1, (df - 1) // 2):  # 1 + 2/3 c2 + 2*4/(3*5) c2^2 + ...
      term *= c2 * (2 * k) / (2 * k + 1)
      total += term
    inside = 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
  else:
    term, total = 1.0, 1.0
    for k in range(1, df // 2):  # 1 + 1/2 c2 + 1*3/(2*4) c2^2 + ...
      term *= c2 * (2 * k - 1) / (2 * k)
      total += term
    inside = math.sin(theta) * total
  return 0.5 + math.copysign(inside / 2, t)  # inside: P(|T| <= |t|)


def t_quantile(q: float, df: int) -> float:
  """The t with P(T <= t) = q (0.5 < q < 1), by bisection on `t_cdf`."""
  lo, hi = 0.0, 1.0
  while t_cdf(hi, df) < q:
    hi *= 2
  for _ in range(200):
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if t_cdf(mid, df) < q else (lo, mid)
  return (lo + hi) / 2


def mean_se(values: Sequence[float]) -> tuple[float, float]:
  """(mean, its standard error sd / sqrt(n)) over n >= 2 values."""
  n = len(values)
  mean = sum(values) / n
  return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def t_interval(values: Sequence[float]) -> tuple[float, float, float]:
  """(mean, half-width of its 95% t interval, two-sided p of mean 0) over n >= 2 values."""
  n = len(values)
  mean, se = mean_se(values)
  if se == 0:  # identical values: exactly known
    return mean, 0.0, 1.0 if mean == 0 else 0.0
  p = 2 * (1 - t_cdf(abs(mean) / se, n - 1))
  return mean, t_quantile(T_QUANTILE, n - 1) * se, p


def equivalence_p(values: Sequence[float], bound: float) -> float:
  """Twice the larger p of the two one-sided t tests of mean <= -bound and mean >= bound (TOST),
  at most 1: below 0.05 exactly where the 95% t interval lies inside (-bound, bound)."""
  mean, se = mean_se(values)
  if se == 0:  # identical values: exactly known
    return 0.0 if abs(mean) < bound else 1.0
  df = len(values) - 1
  larger = max(1 - t_cdf((mean + bound) / se, df), t_cdf((mean - bound) / se, df))
  return min(1.0, 2 * larger)


def document_t(a: dict, b: dict) -> tuple[float, float] | None:
  """The 95% t interval of A - B's token-weighted mean loss over the D documents two paired
  length entries share (D - 1 degrees of freedom; the standard error of a ratio of sums, each
  document a cluster of its tokens); None with fewer than two documents."""
  ids, loss_a_D, tokens_D = lengths.documents(a)
  loss_b_D = lengths.documents(b)[1]
  d = len(ids)
  if d < 2:
    return None
  diff_D = loss_a_D - loss_b_D
  w_D = tokens_D / tokens_D.sum()
  mean = float((w_D * diff_D).sum())
  se = math.sqrt(float((w_D**2 * (diff_D - mean) ** 2).sum()) * d / (d - 1))
  half = t_quantile(T_QUANTILE, d - 1) * se
  return mean - half, mean + half


def holm(ps: Sequence[float]) -> list[float]:
  """Holm's step-down adjusted p-values, in the order given: the i-th smallest of m is
  multiplied by m - i + 1 (i from 1), never below an earlier one's, at most 1."""
  order = sorted(range(len(ps)), key=lambda i: ps[i])
  out, running = [0.0] * len(ps), 0.0
  for rank, i in enumerate(order):
    running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
    out[i] = running
  return out


# Verdicts.


@dataclasses.dataclass(frozen=True)
class Rules:
  """A direction's verdict rules for one cell (module docstring): the conditions of
  "reproduced", each with what its failure says, what a reproduction was decided by, and the
  tests of "not reproduced" and "underpowered", each with what it says."""

  reproduced: tuple[tuple[bool, str], ...]
  decided: str
  not_reproduced: tuple[bool, str]
  underpowered: tuple[bool, str]


@dataclasses.dataclass(frozen=True)
class Side:
  """Directions "below" (sign -1: lower loss) and "above" (+1): the mean past the minimum
  effect on that side of 0, by the t test of mean 0."""

  sign: float
  allowed: str = ">= 0 (nats/token)"  # the min_effect allowed
  note: str = ""  # what the section's note adds for it

  def allows(self, minimum: float) -> bool:
    return minimum >= 0

  def declared(self, quantity: str, minimum: float) -> str:
    return f"{quantity} {'<' if self.sign < 0 else '>'} {tables.signed(self.sign * minimum)}"

  def p(self, values: Sequence[float], minimum: float) -> float:
    return t_interval(values)[2]

  def agrees(self, ci: list[float], minimum: float) -> bool:
    """The interval excludes 0 on the claim's side."""
    return min(self.sign * ci[0], self.sign * ci[1]) > 0

  def rules(self, cell: Cell) -> Rules:
    n, k, minimum, half = len(cell.seeds), cell.agree(), cell.claim.min_effect, cell.half
    effect = self.sign * cell.mean
    return Rules(
      (
        (cell.holm < ALPHA and effect > 0, f"Holm p >= {ALPHA:g} on the claim's side"),
        (effect > minimum, "mean within the minimum effect"),
        (k == n, f"seeds agreeing {k}/{n}"),
      ),
      f"Holm t test, mean past the minimum, seeds agreeing {n}/{n}",
      (effect + half < minimum, "t interval excludes the minimum effect"),
      (effect - half <= 0 and half > minimum, "t interval holds 0, MDE > minimum effect"),
    )


@dataclasses.dataclass(frozen=True)
class Within:
  """Direction "within": |mean| below the minimum effect m (a flat curve, or two equal rows),
  by the equivalence test (`equivalence_p`)."""

  allowed: str = '> 0 (nats/token) with "within": |mean| < 0 never holds'
  note: str = (
    " -m < ... < +m: flat, or equal (an equivalence claim): its p is twice the larger of the two"
    " one-sided t tests of mean <= -m and mean >= m (TOST), below 0.05 exactly where the 95% t"
    " interval lies inside (-m, m); a seed agrees where its interval lies inside (-m, m)."
  )

  def allows(self, minimum: float) -> bool:
    return minimum > 0

  def declared(self, quantity: str, minimum: float) -> str:
    return f"{tables.signed(-minimum)} < {quantity} < {tables.signed(minimum)}"

  def p(self, values: Sequence[float], minimum: float) -> float:
    return equivalence_p(values, minimum)

  def agrees(self, ci: list[float], minimum: float) -> bool:
    """The interval lies inside (-m, m)."""
    return -minimum < ci[0] and ci[1] < minimum

  def rules(self, cell: Cell) -> Rules:
    n, k, minimum, half = len(cell.seeds), cell.agree(), cell.claim.min_effect, cell.half
    return Rules(
      (
        (cell.holm < ALPHA, f"Holm equivalence p >= {ALPHA:g}"),
        (k == n, f"seeds within the bound {k}/{n}"),
      ),
      f"Holm equivalence t test, seeds within the bound {n}/{n}",
      (abs(cell.mean) - half > minimum, "t interval outside the bound"),
      (half > minimum, "MDE > the bound: the t interval cannot fit inside it"),
    )


DIRECTIONS = {"below": Side(-1.0), "above": Side(1.0), "within": Within()}


def verdict(cell: Cell) -> tuple[str, str]:
  """(label, the test that decided it) of a cell whose `holm` is set: the module's rules."""
  if cell.half is None:
    return "inconclusive", "one seed: no t interval"
  rules = DIRECTIONS[cell.claim.direction].rules(cell)
  failed = [why for ok, why in rules.reproduced if not ok]
  if not failed:
    return "reproduced", rules.decided
  for label, (ok, why) in (
    ("not reproduced", rules.not_reproduced),
    ("underpowered", rules.underpowered),
  ):
    if ok:
      return label, why
  return "inconclusive", failed[0]


def _by_seed(results: Sequence[dict], stem: str, variant: str, name: str) -> dict[int, dict]:
  """seed -> the lengths result of run STEM-s<seed> at `variant`; one per seed."""
  out: dict[int, dict] = {}
  for r in tables.of_kind(results, "lengths"):
    match = tables.SEEDED_RUN.match(str(r["run"]))
    if match and match["stem"] == stem and r["variant"] == variant:
      seed = int(match["seed"])
      if seed in out:
        raise ValueError(f"claim {name!r}: two results named {r['run']}/{variant}; give one")
      out[seed] = r
  return out


def _sides(claim: Claim, key: str, minus_key: str | None, row: dict, base: dict) -> tuple:
  """The two length entries (or None) whose paired difference is the claim in one seed: the row
  and the baseline at the length; with minus_length, the row at the length and at minus_length
  x L (its rise), or the two rows' rises, each document's own (`lengths.minus`)."""
  at_row, at_base = row["lengths"], base["lengths"]
  if minus_key is None:
    return at_row.get(key), at_base.get(key)
  if claim.baseline is None:
    return at_row.get(key), at_row.get(minus_key)
  return (
    lengths.minus(at_row.get(key), at_row.get(minus_key)),
    lengths.minus(at_base.get(key), at_base.get(minus_key)),
  )


def _seed_pair(claim: Claim, seed: int, multiple: int, row: dict, base: dict) -> tuple:
  """(the claim's difference in one seed, the wider of its two intervals over documents)."""
  train_len = row["train_len"]
  key = str(multiple * train_len)
  minus_key = None if claim.minus_length is None else str(claim.minus_length * train_len)
  a, b = _sides(claim, key, minus_key, row, base)
  got = None if a is None or b is None else lengths.paired(a, b, base.get("protocol") or {})
  if got is None:
    runs = " and ".join(f"{stem}-s{seed}" for stem in claim.stems())
    at = f"{key} tokens ({multiple}x)"
    at += "" if minus_key is None else f" and {minus_key} tokens ({claim.minus_length}x)"
    raise ValueError(
      f"claim {claim.name!r}: {runs} at {at} cannot be paired: a length missing, no "
      "per-document losses, or different documents"
    )
  diff, ci = got
  t_ci = document_t(a, b)
  if ci is not None and t_ci is not None:  # the wider of the two (module docstring)
    ci = [min(ci[0], t_ci[0]), max(ci[1], t_ci[1])]
  return diff, ci


def _cell(claim: Claim, multiple: int, rows: dict, bases: dict) -> Cell:
  """The claim at `multiple` x L over the seeds both rows ran, unadjusted."""
  seeds = tuple(sorted(set(rows) & set(bases)))
  train_len = rows[seeds[0]]["train_len"]
  pairs = tuple(_seed_pair(claim, s, multiple, rows[s], bases[s]) for s in seeds)
  diffs = [d for d, _ in pairs]
  if len(diffs) == 1:
    mean, half, p = diffs[0], None, None
  else:
    mean, half, _ = t_interval(diffs)
    p = DIRECTIONS[claim.direction].p(diffs, claim.min_effect)
  return Cell(claim, multiple * train_len, train_len, seeds, pairs, mean, half, p)


def judge(results: Sequence[dict], claims: Sequence[Claim]) -> list[Cell]:
  """Every claim's cells, Holm-adjusted within the claim, with their verdicts. A claim whose
  rows or lengths the results lack is a ValueError naming it."""
  results = tables.as_seeds(results)
  out = []
  for claim in claims:
    rows = _by_seed(results, claim.row, claim.variant, claim.name)
    bases = (
      rows
      if claim.baseline is None
      else _by_seed(results, claim.baseline, claim.variant, claim.name)
    )
    if not set(rows) & set(bases):
      runs = " and ".join(f"{stem}-s<seed>/{claim.variant}" for stem in claim.stems())
      raise ValueError(
        f"claim {claim.name!r}: no seed with {'both ' if claim.baseline else ''}{runs} among "
        "the results"
      )
    cells = [_cell(claim, m, rows, bases) for m in claim.lengths]
    ps = [c.p for c in cells]
    adjusted = holm(ps) if None not in ps else ps
    for c, a in zip(cells, adjusted):
      c = dataclasses.replace(c, holm=a)
      out.append(dataclasses.replace(c, **dict(zip(("verdict", "decided"), verdict(c)))))
  return out


# The section.


def _interval(c: Cell) -> list[float] | None:
  return None if c.half is None else [c.mean - c.half, c.mean + c.half]


def _p(p: float | None) -> str:
  return "-" if p is None else "<0.001" if p < 0.001 else f"{p:.3f}"


# What the section's note adds where a claim takes rises.
RISES_NOTE = (
  " X - 1x: a row's loss at the cell's length minus its own loss at 1x (a rise: the same "
  "documents and tokens at every length), and (A - 1x) - (B - 1x): A's rise minus B's, each "
  "document's own difference of differences; both paired per seed and per document as a "
  "difference of rows is."
)


def claims_table(results: Sequence[dict], claims: Sequence[Claim]) -> str:
  """The "Claims (pre-declared)" section: a note on the tests, a row per claim and length."""
  if not claims:
    return ""
  rows = [
    [
      c.claim.name,
      c.claim.declared(),
      tables.times(c.length, c.train_len),
      ",".join(map(str, c.seeds)),
      tables.cell(c.mean, _interval(c), tables.signed),
      f"{_p(c.holm)} (m={len(c.claim.lengths)})",
      f"{c.agree()}/{len(c.seeds)}",
      "-" if c.half is None else tables.f3(c.half),
      f"**{c.verdict}**",
      c.decided,
    ]
    for c in judge(results, claims)
  ]
  note = (
    "Each claim as its experiment's sweep.py declares it (CLAIMS): row minus baseline of the "
    "same seed, in mean loss (nats/token; negative: lower loss), beyond the minimum effect on "
    "the claim's side. Cells: the mean over seeds [95% t interval: t(0.975, n-1) x sd / "
    "sqrt(n)]; the two-sided t test's p, Holm-adjusted over the claim's m lengths; the seeds "
    "whose 95% interval over the same documents (the wider of the paired bootstrap and the t "
    "interval over documents) excludes 0 on the claim's side; MDE: the t interval's "
    "half-width. The rules: lcx/tools/report/claims.py."
  )
  note += RISES_NOTE if any(c.minus_length is not None for c in claims) else ""
  note += "".join(dict.fromkeys(DIRECTIONS[c.direction].note for c in claims))
  return (
    note
    + "\n\n"
    + tables.markdown_table(
      [
        "claim",
        "declared",
        "length",
        "seeds",
        "difference [t interval]",
        "Holm p",
        "seeds agree",
        "MDE",
        "verdict",
        "decided by",
      ],
      rows,
      align="lllrrrrrll",
    )
  )


def read_claims(target: str) -> list[Claim]:
  """experiments/NAME[:ARG] -> the claims its sweep.py declares: `CLAIMS_<ARG>` where it assigns
  one (ARG upper-cased, other characters as _), else `CLAIMS` (one list for the sizes of the
  same rows: the results given pick the size), evaluated from the file's text with `Claim` and
  the names assigned above it to a Claim or a list of them as the only names (two variants can
  share claims): sweep.py's imports are not run. A ValueError names what is missing or wrong."""
  arg = target.rpartition("/")[2].partition(":")[2]
  directory = target[: len(target) - len(arg) - 1] if arg else target.rstrip(":")
  path = os.path.join(os.path.normpath(cli.shipped(directory)), "sweep.py")
  if not os.path.isfile(path):
    raise ValueError(f"--claims={target}: no {path}")
  tree = ast.parse(open(path, encoding="utf-8").read(), path)

  def assigned(name: str) -> list[ast.expr]:
    return [
      node.value
      for node in tree.body
      if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == name for t in node.targets)
    ]

  own = "CLAIMS_" + re.sub(r"\W", "_", arg).upper() if arg else None
  found = (own and assigned(own)) or assigned("CLAIMS")
  if not found:
    raise ValueError(f"--claims={target}: {path} declares no CLAIMS = [Claim(...), ...]")
  try:
    scope = _claim_names(tree, found[-1], path)
    claims = eval(  # noqa: S307 (the project's own file, with no names but Claim's)
      compile(ast.Expression(found[-1]), path, "eval"), scope
    )
  except (NameError, TypeError) as error:
    raise ValueError(f"--claims={target}: {path}: CLAIMS must be a list of Claim(...): {error}")
  except ValueError as error:  # a Claim's own check
    raise ValueError(f"--claims={target}: {path}: {error}") from None
  if not isinstance(claims, (list, tuple)) or not all(isinstance(c, Claim) for c in claims):
    raise ValueError(f"--claims={target}: {path}: CLAIMS must be a list of Claim(...)")
  names = [c.name for c in claims]
  if len(set(names)) != len(names):
    raise ValueError(f"--claims={target}: {path}: two claims share a name: {names}")
  return list(claims)


def _claim_names(tree: ast.Module, before: ast.expr, path: str) -> dict:
  """The scope a CLAIMS list is evaluated in: `Claim`, and each name sweep.py assigns above it to
  a Claim or a list or tuple of them (evaluated in the same scope, in order). Any other
  assignment is left out: it needs names this reading does not run."""
  scope = {"__builtins__": {}, "Claim": Claim}
  for node in tree.body:
    if not isinstance(node, ast.Assign):
      continue
    if node.value is before:
      break
    names = [t.id for t in node.targets if isinstance(t, ast.Name)]
    try:
      value = eval(compile(ast.Expression(node.value), path, "eval"), scope)  # noqa: S307
    except ValueError:  # a Claim's own check: the caller names the file
      raise
    except Exception:  # noqa: BLE001 (names of imports and functions: not claims)
      continue
    items = value if isinstance(value, (list, tuple)) else [value]
    if names and items and all(isinstance(c, Claim) for c in items):
      scope.update(dict.fromkeys(names, value))
  return scope
