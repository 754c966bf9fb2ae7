"""Claims declared before the runs, and the verdict each gets from the results: the engine.

An experiment's sweep.py may declare `CLAIMS = [Claim(...), ...]`, written before its runs: which
row beats which baseline row, at which lengths, by at least how much. `./launch.sh report PATH...
--claims=experiments/NAME` judges them on the results and adds a "Claims (pre-declared)" section.

Each claim is judged at each length it names (a cell):
- per seed s, the row's run ROW-s<s> minus the baseline's BASE-s<s> in mean loss per token,
  paired over the same documents, with the wider of its 95% percentile bootstrap interval
  (documents resampled, the same ones for both runs: `lengths.paired`) and the 95% t interval
  of that token-weighted mean over the documents (`document_t`): with a handful of documents a
  percentile bootstrap is too narrow, and a seed agrees only where both exclude 0;
- over the n seeds, the mean of those differences, its t interval mean +- t(0.975, n-1) x sd /
  sqrt(n), and the two-sided p of the t test of mean 0, adjusted by Holm's step-down method over
  the claim's cells (the family: its lengths, m of them).

The verdicts, experiments/README.md's labels, tried in this order. "The claim's side" is below 0
for a claim "below" (lower loss), above 0 for "above"; "the effect" is the mean on that side.
- inconclusive, with one seed: no t interval (one run cannot show the seeds' variation).
- reproduced: the Holm-adjusted p < 0.05 with the mean on the claim's side, the effect larger
  than the claim's minimum effect, and every seed's bootstrap interval excluding 0 on the
  claim's side.
- not reproduced: the t interval excludes the minimum effect on the claim's side: the effect
  is reliably smaller than the minimum, or the opposite.
- underpowered: the t interval holds 0 and its half-width, the minimum detectable effect (MDE),
  exceeds the minimum effect: a tie says nothing.
- inconclusive otherwise; the first condition of "reproduced" that failed says why (e.g. the
  seeds whose bootstrap interval agrees, k of n).
"untestable here" is a judgment about the regime, not a statistic: a README gives it, never
this engine.

The claims are read from sweep.py without running it (`read_claims`): its imports load the
model and jax, and the report reads JSON only.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import os
from collections.abc import Sequence

from lcx import cli, errors
from lcx.tools.report import lengths, tables

SIDES = {"below": -1.0, "above": 1.0}  # direction -> the sign of a difference that agrees
ALPHA = 0.05  # two-sided, after Holm: the 95% of the intervals
T_QUANTILE = 0.975


@dataclasses.dataclass(frozen=True)
class Claim:
  """`row` minus `baseline` (run names without their -s<seed>) at `variant`, at each length in
  `lengths` (multiples of the training length), lies `direction` ("below": lower loss, or
  "above") 0 by more than `min_effect` nats/token, fixed before the runs."""

  name: str
  row: str
  baseline: str
  lengths: tuple[int, ...]
  direction: str
  min_effect: float
  variant: str = "none"

  def __post_init__(self):
    where = f"Claim({self.name!r})"
    if self.direction not in SIDES:
      raise errors.not_allowed(f"{where}.direction", self.direction, SIDES)
    if not self.lengths or not all(isinstance(n, int) and n >= 1 for n in self.lengths):
      raise errors.not_allowed(f"{where}.lengths", self.lengths, "integers >= 1 (multiples of L)")
    if not self.min_effect >= 0:
      raise errors.not_allowed(f"{where}.min_effect", self.min_effect, ">= 0 (nats/token)")

  def declared(self) -> str:
    """`alibi/none - rope/none < -0.010`: the comparison and the minimum effect on its side."""
    bound = tables.signed(SIDES[self.direction] * self.min_effect)
    sign = "<" if self.direction == "below" else ">"
    return f"{self.row}/{self.variant} - {self.baseline}/{self.variant} {sign} {bound}"


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
  p: float | None  # two-sided t test of mean 0; None with one seed
  holm: float | None = None  # p after Holm over the claim's cells
  verdict: str = ""
  decided: str = ""

  def agree(self) -> int:
    """Seeds whose bootstrap interval excludes 0 on the claim's side."""
    side = SIDES[self.claim.direction]
    return sum(1 for _, ci in self.pairs if ci and min(side * ci[0], side * ci[1]) > 0)


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


def t_interval(values: Sequence[float]) -> tuple[float, float, float]:
  """(mean, half-width of its 95% t interval, two-sided p of mean 0) over n >= 2 values."""
  n = len(values)
  mean = sum(values) / n
  se = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)
  if se == 0:  # identical values: exactly known
    return mean, 0.0, 1.0 if mean == 0 else 0.0
  p = 2 * (1 - t_cdf(abs(mean) / se, n - 1))
  return mean, t_quantile(T_QUANTILE, n - 1) * se, p


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


def verdict(cell: Cell) -> tuple[str, str]:
  """(label, the test that decided it) of a cell whose `holm` is set: the module's rules."""
  n, minimum = len(cell.seeds), cell.claim.min_effect
  if cell.half is None:
    return "inconclusive", "one seed: no t interval"
  side = SIDES[cell.claim.direction]
  effect = side * cell.mean
  failed = [
    why
    for ok, why in (
      (cell.holm < ALPHA and effect > 0, f"Holm p >= {ALPHA:g} on the claim's side"),
      (effect > minimum, "mean within the minimum effect"),
      (cell.agree() == n, f"seeds agreeing {cell.agree()}/{n}"),
    )
    if not ok
  ]
  if not failed:
    return "reproduced", f"Holm t test, mean past the minimum, seeds agreeing {n}/{n}"
  if effect + cell.half < minimum:
    return "not reproduced", "t interval excludes the minimum effect"
  if effect - cell.half <= 0 and cell.half > minimum:
    return "underpowered", "t interval holds 0, MDE > minimum effect"
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


def _cell(claim: Claim, multiple: int, rows: dict, bases: dict) -> Cell:
  """The claim at `multiple` x L over the seeds both rows ran, unadjusted."""
  seeds = tuple(sorted(set(rows) & set(bases)))
  train_len = rows[seeds[0]]["train_len"]
  key = str(multiple * train_len)
  pairs = []
  for s in seeds:
    a, b = rows[s]["lengths"].get(key), bases[s]["lengths"].get(key)
    got = None if a is None or b is None else lengths.paired(a, b, bases[s].get("protocol") or {})
    if got is None:
      raise ValueError(
        f"claim {claim.name!r}: {claim.row}-s{s} and {claim.baseline}-s{s} at {key} tokens "
        f"({multiple}x) cannot be paired: a length missing, no per-document losses, or "
        "different documents"
      )
    diff, ci = got
    t_ci = document_t(a, b)
    if ci is not None and t_ci is not None:  # the wider of the two (module docstring)
      ci = [min(ci[0], t_ci[0]), max(ci[1], t_ci[1])]
    pairs.append((diff, ci))
  diffs = [d for d, _ in pairs]
  mean, half, p = t_interval(diffs) if len(diffs) > 1 else (diffs[0], None, None)
  return Cell(claim, int(key), train_len, seeds, tuple(pairs), mean, half, p)


def judge(results: Sequence[dict], claims: Sequence[Claim]) -> list[Cell]:
  """Every claim's cells, Holm-adjusted within the claim, with their verdicts. A claim whose
  rows or lengths the results lack is a ValueError naming it."""
  results = tables.as_seeds(results)
  out = []
  for claim in claims:
    rows = _by_seed(results, claim.row, claim.variant, claim.name)
    bases = _by_seed(results, claim.baseline, claim.variant, claim.name)
    if not set(rows) & set(bases):
      raise ValueError(
        f"claim {claim.name!r}: no seed with both {claim.row}-s<seed>/{claim.variant} and "
        f"{claim.baseline}-s<seed>/{claim.variant} among the results"
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
  """experiments/NAME[:ARG] -> the CLAIMS its sweep.py declares (one list for every ARG: the
  results given pick the size), evaluated from the file's text with `Claim` as the only name:
  sweep.py's imports are not run. A ValueError names what is missing or wrong."""
  directory = target.rpartition(":")[0] if ":" in target.rpartition("/")[2] else target
  path = os.path.join(os.path.normpath(cli.shipped(directory)), "sweep.py")
  if not os.path.isfile(path):
    raise ValueError(f"--claims={target}: no {path}")
  tree = ast.parse(open(path, encoding="utf-8").read(), path)
  found = [
    node.value
    for node in tree.body
    if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "CLAIMS" for t in node.targets)
  ]
  if not found:
    raise ValueError(f"--claims={target}: {path} declares no CLAIMS = [Claim(...), ...]")
  try:
    claims = eval(  # noqa: S307 (the project's own file, with no names but Claim)
      compile(ast.Expression(found[-1]), path, "eval"), {"__builtins__": {}, "Claim": Claim}
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
