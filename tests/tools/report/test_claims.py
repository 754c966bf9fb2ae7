"""The verdict engine (lcx.tools.report.claims): Student's t without scipy, Holm's adjustment, each
of the verdicts from synthetic seeded results, and `--claims` on the command line."""

import math
import subprocess
import sys

import numpy as np
import pytest

from lcx.tools import report
from lcx.tools.report import claims
from tests.helpers import ROOT, run_lcx
from tests.tools.report.results import lengths_result, row_cells, save

# t(0.975, df) for df = 1..30, three decimals, as printed in a statistics textbook's table.
T_TABLE = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228]
T_TABLE += [2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086]
T_TABLE += [2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]

DOCS = 20
PATTERN = np.array([1.0, -1.0] * (DOCS // 2))  # mean 0: a seed's difference is its shift exactly


def _pair(seed, shifts, jitter=0.002, row="alibi", base="rope"):
  """(row-s<seed>, base-s<seed>) results at 1x, 2x, 4x on the same 20 documents of 100 tokens:
  the row's loss is the base's + shifts[multiple] + jitter x (+1, -1, ...), so the paired
  difference is shifts[multiple] and its bootstrap interval about +- jitter / 2."""
  out = []
  for name, is_row in ((row, True), (base, False)):
    r = lengths_result(f"{name}-s{seed}", losses={1: 2.0, 2: 2.1, 4: 2.3})
    for mult, n in ((1, "64"), (2, "128"), (4, "256")):
      loss = np.random.default_rng(99).normal(2.0, 0.5, DOCS) + 0.1 * mult
      if is_row:
        loss = loss + shifts.get(mult, 0.0) + jitter * PATTERN
      r["lengths"][n]["per_document"] = {
        "ids": list(range(DOCS)),
        "loss": [float(x) for x in loss],
        "tokens": [100] * DOCS,
      }
    out.append(r)
  return out


def _results(diffs, jitters=None, lengths=(4,)):
  """Seeded pairs: diffs[i] is seed i's row-minus-base difference at every multiple in
  `lengths` (a number), or per multiple (a dict)."""
  jitters = jitters or [0.002] * len(diffs)
  return [
    r
    for seed, (d, j) in enumerate(zip(diffs, jitters))
    for r in _pair(seed, d if isinstance(d, dict) else {m: d for m in lengths}, j)
  ]


def _claim(lengths=(4,), direction="below", min_effect=0.01):
  return report.Claim("alibi_wins", "alibi", "rope", lengths, direction, min_effect)


def _judge(diffs, jitters=None, **claim):
  return report.judge(_results(diffs, jitters, claim.get("lengths", (4,))), [_claim(**claim)])


def test_t_quantile_is_the_textbook_table_for_1_to_30_degrees_of_freedom():
  assert [round(report.t_quantile(0.975, df), 3) for df in range(1, 31)] == T_TABLE


@pytest.mark.parametrize("t", [-3.0, -0.5, 0.0, 0.7, 2.0, 9.0])
def test_t_cdf_is_the_closed_forms_for_1_2_and_3_degrees_of_freedom(t):
  assert report.t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
  assert report.t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
  three = 0.5 + (math.atan(t / math.sqrt(3)) + math.sqrt(3) * t / (t * t + 3)) / math.pi
  assert report.t_cdf(t, 3) == pytest.approx(three, abs=1e-12)


def test_t_interval_by_hand():
  # -0.05, -0.06, -0.04: mean -0.05, sd 0.01, se 0.01 / sqrt(3); t = 0.05 / se = 8.660 with
  # 2 degrees of freedom, two-sided p = 1 - t / sqrt(2 + t^2) (the df = 2 closed form).
  mean, half, p = report.t_interval([-0.05, -0.06, -0.04])
  se = 0.01 / math.sqrt(3)
  assert mean == pytest.approx(-0.05)
  assert half == pytest.approx(4.302653 * se, rel=1e-6)  # 0.02484
  t = 0.05 / se
  assert p == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-9)  # 0.01307
  assert report.t_interval([0.02, 0.02]) == (0.02, 0.0, 0.0)  # identical seeds: exactly known


def test_holm_by_hand():
  # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> 0.06 (never
  # below an earlier one); returned in the order given.
  assert report.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
  assert report.holm([0.6, 0.7]) == [1.0, 1.0]  # at most 1
  assert report.holm([0.01]) == [0.01]


def test_a_claim_judged_at_two_lengths_is_holm_adjusted_over_both():
  at = {2: [-0.05, -0.06, -0.04], 4: [-0.02, -0.05, -0.04]}
  cells = _judge([{m: at[m][s] for m in at} for s in range(3)], lengths=(2, 4))
  p = {c.length // 64: report.t_interval(at[c.length // 64])[2] for c in cells}
  assert p[2] < p[4]  # 2x: the smaller p, times 2; 4x: times 1, but not below 2x's
  assert [c.p for c in cells] == pytest.approx([p[2], p[4]])
  assert [c.holm for c in cells] == pytest.approx([2 * p[2], max(p[4], 2 * p[2])])


@pytest.mark.parametrize(
  "diffs, jitters, minimum, verdict, decided",
  [
    (
      [-0.05, -0.06, -0.04],
      None,
      0.01,
      "reproduced",
      "Holm t test, mean past the minimum, seeds agreeing 3/3",
    ),
    ([0.02, 0.03, 0.025], None, 0.01, "not reproduced", "t interval excludes the minimum effect"),
    (
      [-0.002, -0.003, -0.0025],
      None,
      0.01,
      "not reproduced",
      "t interval excludes the minimum effect",
    ),
    ([-0.05, 0.04, -0.02], None, 0.01, "underpowered", "t interval holds 0, MDE > minimum effect"),
    ([-0.05, -0.06, -0.04], [0.002, 0.002, 0.4], 0.01, "inconclusive", "seeds agreeing 2/3"),
    ([-0.011, -0.013, -0.009], None, 0.012, "inconclusive", "mean within the minimum effect"),
    ([-0.05], None, 0.01, "inconclusive", "one seed: no t interval"),
  ],
  ids=[
    "reproduced",
    "opposite",
    "too_small",
    "underpowered",
    "seeds_disagree",
    "small",
    "one_seed",
  ],
)
def test_each_verdict_is_reachable(diffs, jitters, minimum, verdict, decided):
  (cell,) = _judge(diffs, jitters, min_effect=minimum)
  assert (cell.verdict, cell.decided) == (verdict, decided)
  assert [d for d, _ in cell.pairs] == pytest.approx(diffs, abs=1e-9)  # the paired differences


def test_an_above_claim_is_judged_on_its_own_side():
  (cell,) = _judge([0.05, 0.06, 0.04], direction="above")
  assert (cell.verdict, cell.agree()) == ("reproduced", 3)
  (cell,) = _judge([-0.05, -0.06, -0.04], direction="above")
  assert (cell.verdict, cell.agree()) == ("not reproduced", 0)


def test_a_reproduced_claim_turns_underpowered_without_its_third_seed():
  (three,) = _judge([-0.05, -0.06, -0.04])
  (two,) = _judge([-0.05, -0.06])
  assert three.verdict == "reproduced"
  # two seeds: mean -0.055, se 0.005, half-width t(0.975, 1) x 0.005 = 0.0635 > 0.01.
  assert (two.verdict, two.half) == ("underpowered", pytest.approx(12.7062 * 0.005, rel=1e-4))
  assert two.p == pytest.approx(1 - 2 / math.pi * math.atan(11.0))  # 0.0578: t = 11, df = 1


def test_the_table_prints_each_cell():
  results = _results([-0.05, -0.06, -0.04])
  table = report.claims_table(results, [_claim()])
  assert table.splitlines()[-1] == (
    "| alibi_wins | alibi/none - rope/none < -0.010 | 256 (4x) | 0,1,2 | -0.050 [-0.075, -0.025] | "
    "0.013 (m=1) |         3/3 | 0.025 | **reproduced** | Holm t test, mean past the minimum, "
    "seeds agreeing 3/3 |"
  )
  sections = report.format_tables(results, claims=[_claim()])
  assert sections.endswith("## Claims (pre-declared)\n\n" + table)
  assert "Claims" not in report.format_tables(results)


def test_a_claim_the_results_cannot_judge_is_a_value_error_naming_it():
  results = _results([-0.05, -0.06])
  with pytest.raises(ValueError, match="claim 'x': no seed with both xpos-s<seed>/none and rope"):
    report.judge(results, [report.Claim("x", "xpos", "rope", (4,), "below", 0.01)])
  with pytest.raises(ValueError, match=r"alibi-s0 and rope-s0 at 1024 tokens \(16x\) cannot be"):
    report.judge(results, [_claim(lengths=(16,))])


@pytest.mark.parametrize(
  "fields, error",
  [
    ({"direction": "lower"}, "Claim('c').direction='lower' is not allowed; allowed: below, above"),
    ({"lengths": ()}, "Claim('c').lengths=() is not allowed; allowed: integers >= 1"),
    ({"min_effect": -0.1}, "Claim('c').min_effect=-0.1 is not allowed; allowed: >= 0"),
  ],
)
def test_a_bad_claim_names_its_field_and_the_allowed(fields, error):
  declared = {"lengths": (4,), "direction": "below", "min_effect": 0.01, **fields}
  with pytest.raises(ValueError, match=error.replace("(", r"\(").replace(")", r"\)")):
    report.Claim("c", "alibi", "rope", **declared)


# The command line.


def _experiment(tmp_path, claims):
  """A sweep.py whose imports would fail if run: --claims reads CLAIMS from the text only."""
  path = tmp_path / "exp" / "sweep.py"
  path.parent.mkdir()
  path.write_text(
    f"import not_a_module\n\nCLAIMS = {claims}\n\ndef get_runs(arg=''):\n  return {{}}\n"
  )
  return tmp_path / "exp"


def _cli(*args):
  return run_lcx([str(a) for a in args], module="lcx.tools.report", check=False, timeout=120)


def test_cli_claims_prints_and_writes_the_section(tmp_path):
  for r in _results([-0.05, -0.06, -0.04]):
    save(tmp_path / "in" / f"{r['run']}.json", r)
  exp = _experiment(tmp_path, '[Claim("alibi_wins", "alibi", "rope", (4,), "below", 0.01)]')
  proc = _cli(tmp_path / "in", f"--out={tmp_path / 'out'}", f"--claims={exp}:full")
  assert proc.returncode == 0, proc.stderr
  table = report.claims_table(report.load(str(tmp_path / "in")), [_claim()])
  assert f"## Claims (pre-declared)\n\n{table}\n" in proc.stdout
  assert f"## Claims (pre-declared)\n\n{table}\n" in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.parametrize(
  "claims, error",
  [
    (
      '[Claim("x", "xpos", "rope", (4,), "below", 0.01)]',
      "error: claim 'x': no seed with both xpos-s<seed>/none and rope-s<seed>/none among the "
      "results",
    ),
    (
      '[Claim("x", "alibi", "rope", (4,), "sideways", 0.01)]',
      "Claim('x').direction='sideways' is not allowed; allowed: below, above",
    ),
    ("[print('x')]", "CLAIMS must be a list of Claim(...): name 'print' is not defined"),
    (None, "declares no CLAIMS = [Claim(...), ...]"),
    ("", "no "),
  ],
  ids=["unknown_row", "bad_direction", "not_a_claim", "none_declared", "no_sweep"],
)
def test_cli_bad_claims_are_one_line_and_write_nothing(tmp_path, claims, error):
  for r in _results([-0.05, -0.06]):
    save(tmp_path / "in" / f"{r['run']}.json", r)
  exp = _experiment(tmp_path, claims) if claims else tmp_path / "in"
  if claims is None:
    (exp / "sweep.py").write_text("def get_runs(arg=''):\n  return {}\n")
  if claims == "":  # no sweep.py: the error names the file it looked for
    error += str(exp / "sweep.py")
  proc = _cli(tmp_path / "in", f"--out={tmp_path / 'out'}", f"--claims={exp}")
  assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("error: ") and error in last, proc.stderr
  assert "## " not in proc.stdout and not (tmp_path / "out").exists()


def test_a_variant_with_its_own_rows_reads_its_own_claims(tmp_path):
  """`CLAIMS_<ARG>` for experiments/NAME:ARG where sweep.py assigns one, else `CLAIMS`."""
  exp = _experiment(tmp_path, '[Claim("alibi_wins", "alibi", "rope", (4,), "below", 0.01)]')
  sweep = exp / "sweep.py"
  sweep.write_text(
    sweep.read_text()
    + 'CLAIMS_MATCHED_BASE = [Claim("si_wins", "si", "rope", (16,), "below", 0.02)]\n'
  )
  names = {arg: [c.name for c in report.read_claims(f"{exp}{arg}")] for arg in ("", ":full")}
  assert names == {"": ["alibi_wins"], ":full": ["alibi_wins"]}
  (claim,) = report.read_claims(f"{exp}:matched_base")
  assert (claim.name, claim.row, claim.lengths, claim.min_effect) == ("si_wins", "si", (16,), 0.02)


def test_variants_share_claims_assigned_above_them(tmp_path):
  """A Claim or a list of them assigned above CLAIMS is a name CLAIMS may use (context_table's
  two variants share the SI claims); a name assigned below it, or anything else, is not."""
  exp = _experiment(tmp_path, '[Claim("alibi_wins", "alibi", "rope", (4,), "below", 0.01)]')
  sweep = exp / "sweep.py"
  shared = (
    'SHARED = [Claim("si_wins", "si", "rope", (16,), "below", 0.02)]\n'
    'ONE = Claim("rope_rises", "rope", None, (16,), "above", 0.3, minus_length=1)\n'
    "STEPS = 600\n"
  )
  text = sweep.read_text().replace("CLAIMS = [", shared + "CLAIMS = [*SHARED, ONE, ")
  sweep.write_text(text + "CLAIMS_MATCHED_BASE = [ONE, *SHARED]\n")
  names = {
    arg: [c.name for c in report.read_claims(f"{exp}{arg}")] for arg in ("", ":matched_base")
  }
  assert names == {
    "": ["si_wins", "rope_rises", "alibi_wins"],
    ":matched_base": ["rope_rises", "si_wins"],
  }
  sweep.write_text(text.replace("*SHARED, ONE, ", "*SHARED, STEPS, ") + "LATER = []\n")
  with pytest.raises(ValueError, match="CLAIMS must be a list of Claim"):
    report.read_claims(str(exp))
  sweep.write_text(text.replace("*SHARED, ONE, ", "*SHARED, *LATER, ") + "LATER = []\n")
  with pytest.raises(ValueError, match="name 'LATER' is not defined"):
    report.read_claims(str(exp))
  sweep.write_text(text.replace('"below", 0.02', '"sideways", 0.02'))
  with pytest.raises(ValueError, match=r"sweep\.py: Claim\('si_wins'\)\.direction='sideways'"):
    report.read_claims(str(exp))


def test_reading_the_schemes_claims_imports_no_jax():
  code = (
    "import sys; from lcx.tools import report; "
    "claims = report.read_claims('experiments/schemes:full'); "
    "print(len(claims), [m for m in ('jax', 'flax', 'lcx.model') if m in sys.modules])"
  )
  out = subprocess.run(
    [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
  )
  assert out.stdout.strip() == "4 []", out.stderr[-2000:]


def test_document_t_by_hand():
  """Three documents of 100, 100 and 200 tokens, differences +0.3, -0.1, +0.1: weights 1/4, 1/4,
  1/2, weighted mean 0.1; se = sqrt(sum w^2 (d - mean)^2 x 3 / 2) = sqrt(0.0075) = 0.0866;
  t(0.975, 2) = 4.303."""
  a = {"per_document": {"ids": [0, 1, 2], "loss": [2.3, 1.9, 2.1], "tokens": [100, 100, 200]}}
  b = {"per_document": {"ids": [0, 1, 2], "loss": [2.0, 2.0, 2.0], "tokens": [100, 100, 200]}}
  lo, hi = claims.document_t(a, b)
  half = report.t_quantile(0.975, 2) * math.sqrt(0.0075)
  assert (lo, hi) == (pytest.approx(0.1 - half), pytest.approx(0.1 + half))


def test_a_seed_agrees_only_where_the_t_interval_over_its_documents_agrees_too(monkeypatch):
  """Few documents: a percentile bootstrap narrower than the documents' t interval does not
  make a seed agree (the audit's PaTH at 16x: 3 of 3 by bootstrap, 1 of 3 by t)."""
  cells = _judge([-0.05, -0.06, -0.04], jitters=[0.002, 0.002, 0.002])
  assert cells[0].agree() == 3
  monkeypatch.setattr(claims, "document_t", lambda a, b: (-0.2, 0.1))  # wide, holds 0
  cells = _judge([-0.05, -0.06, -0.04], jitters=[0.002, 0.002, 0.002])
  assert cells[0].agree() == 0 and cells[0].verdict != "reproduced"
  assert all(ci == [-0.2, 0.1] for _, ci in cells[0].pairs)


# Rises: one row's loss at a length minus its own at 1x, and the difference of two rows' rises.


def _rising(stem, seed, rises, jitter=0.002, level=0.0):
  """STEM-s<seed> at 1x, 2x, 4x on the same 20 documents of 100 tokens: each document's loss
  at 1x is its difficulty + `level`, at m x that + rises[m] + jitter x (+1, -1, ...), so the
  rise from 1x is rises[m] exactly and its interval about +- jitter / 2."""
  r = lengths_result(f"{stem}-s{seed}", losses={1: 2.0, 2: 2.1, 4: 2.3})
  hard = np.random.default_rng(99).normal(2.0, 0.5, DOCS)
  for mult, n in ((1, "64"), (2, "128"), (4, "256")):
    loss = hard + level + (rises.get(mult, 0.0) + jitter * PATTERN if mult > 1 else 0.0)
    r["lengths"][n]["per_document"] = {
      "ids": list(range(DOCS)),
      "loss": [float(x) for x in loss],
      "tokens": [100] * DOCS,
    }
  return r


def _rise_results(rises, jitters=None, stem="alibi", lengths=(4,), level=0.0):
  """Seeds 0..n-1 of STEM: rises[i] is seed i's rise at every multiple in `lengths` (a
  number), or per multiple (a dict)."""
  jitters = jitters or [0.002] * len(rises)
  return [
    _rising(stem, seed, r if isinstance(r, dict) else {m: r for m in lengths}, j, level)
    for seed, (r, j) in enumerate(zip(rises, jitters))
  ]


def _rise(direction="within", min_effect=0.05, lengths=(4,), baseline=None):
  return report.Claim("flat", "alibi", baseline, lengths, direction, min_effect, minus_length=1)


def _judge_rise(rises, jitters=None, **claim):
  results = _rise_results(rises, jitters, lengths=claim.get("lengths", (4,)))
  return report.judge(results, [_rise(**claim)])


def test_equivalence_p_by_hand():
  # -0.01, 0, +0.01 within 0.05: mean 0, se 0.01 / sqrt(3); each one-sided t = 0.05 / se = 8.660
  # with 2 degrees of freedom, one-sided p = (1 - t / sqrt(2 + t^2)) / 2; twice the larger.
  t = 0.05 / (0.01 / math.sqrt(3))
  p = claims.equivalence_p([-0.01, 0.0, 0.01], 0.05)
  assert p == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-9)  # 0.0131
  # p = 0.05 exactly where the 95% t interval touches the bound, on either side.
  for values in ([0.02, 0.03, 0.04], [-0.05, -0.01, -0.03, -0.02]):
    mean, half, _ = report.t_interval(values)
    assert claims.equivalence_p(values, abs(mean) + half) == pytest.approx(0.05, rel=1e-6)
  assert claims.equivalence_p([0.02, 0.02], 0.05) == 0.0  # identical seeds: exactly known
  assert claims.equivalence_p([0.07, 0.07], 0.05) == 1.0


@pytest.mark.parametrize(
  "rises, jitters, direction, minimum, verdict, decided",
  [
    (
      [0.01, -0.005, 0.0],
      None,
      "within",
      0.05,
      "reproduced",
      "Holm equivalence t test, seeds within the bound 3/3",
    ),
    ([0.3, 0.35, 0.4], None, "within", 0.05, "not reproduced", "t interval outside the bound"),
    (
      [0.3, 0.35, 0.4],
      None,
      "above",
      0.1,
      "reproduced",
      "Holm t test, mean past the minimum, seeds agreeing 3/3",
    ),
    (
      [0.01, -0.005, 0.0],
      None,
      "above",
      0.3,
      "not reproduced",
      "t interval excludes the minimum effect",
    ),
    (
      [0.08, -0.07, 0.01],
      None,
      "within",
      0.05,
      "underpowered",
      "MDE > the bound: the t interval cannot fit inside it",
    ),
    ([0.04, 0.05, 0.06], None, "within", 0.05, "inconclusive", "Holm equivalence p >= 0.05"),
    (
      [0.01, -0.005, 0.0],
      [0.002, 0.002, 0.3],
      "within",
      0.05,
      "inconclusive",
      "seeds within the bound 2/3",
    ),
    ([0.01], None, "within", 0.05, "inconclusive", "one seed: no t interval"),
  ],
  ids=[
    "flat",
    "rising_not_flat",
    "rising",
    "flat_not_rising",
    "too_noisy",
    "at_the_bound",
    "a_seed_too_noisy",
    "one_seed",
  ],
)
def test_each_verdict_of_a_rise(rises, jitters, direction, minimum, verdict, decided):
  (cell,) = _judge_rise(rises, jitters, direction=direction, min_effect=minimum)
  assert (cell.verdict, cell.decided) == (verdict, decided)
  assert [d for d, _ in cell.pairs] == pytest.approx(rises, abs=1e-9)  # each seed's 4x - 1x
  if len(rises) > 1:  # the direction's test: equivalence for "within", of mean 0 for "above"
    tests = {"within": claims.equivalence_p, "above": lambda v, m: report.t_interval(v)[2]}
    assert cell.p == pytest.approx(tests[direction](rises, minimum))


def test_a_rise_is_paired_document_by_document():
  """Documents of very different difficulty (sd 0.5 nats) that each rise by 0.01: the rise's
  interval is as narrow as the documents' rises, not as wide as their losses."""
  (cell,) = _judge_rise([0.01, 0.01, 0.01], jitters=[0.0, 0.0, 0.0])
  assert all(ci == pytest.approx([0.01, 0.01]) for _, ci in cell.pairs)
  assert cell.agree() == 3 and cell.verdict == "reproduced"


def test_a_rise_claim_is_holm_adjusted_over_its_lengths():
  at = {2: [0.01, 0.0, -0.01], 4: [0.02, 0.035, 0.01]}
  rises = [{m: at[m][s] for m in at} for s in range(3)]
  cells = _judge_rise(rises, lengths=(2, 4))
  p = [claims.equivalence_p(at[m], 0.05) for m in (2, 4)]
  assert [c.p for c in cells] == pytest.approx(p)
  assert [c.holm for c in cells] == pytest.approx(report.holm(p))
  assert p[0] < p[1] and cells[0].holm == pytest.approx(2 * p[0])  # 2x: the smaller, times 2
  cells = _judge_rise(rises, lengths=(2, 4), direction="above", min_effect=0.001)
  p = [report.t_interval(at[m])[2] for m in (2, 4)]
  assert [c.holm for c in cells] == pytest.approx(report.holm(p))


def _two_rises(a, b, jitter_a=0.002, jitter_b=-0.002, lengths=(4,)):
  """si-s<seed> rising by a[seed], rope-s<seed> by b[seed]; si 0.2 nats worse at every length,
  which a difference of rises cancels."""
  return _rise_results(a, [jitter_a] * len(a), "si", lengths, level=0.2) + _rise_results(
    b, [jitter_b] * len(b), "rope", lengths
  )


def _judge_two(a, b, direction="below", min_effect=0.01, **kwargs):
  claim = report.Claim("si_less", "si", "rope", (4,), direction, min_effect, minus_length=1)
  return report.judge(_two_rises(a, b, **kwargs), [claim])


@pytest.mark.parametrize(
  "a, b, direction, verdict, decided",
  [
    (
      [0.01, 0.02, 0.0],
      [0.3, 0.35, 0.32],
      "below",
      "reproduced",
      "Holm t test, mean past the minimum, seeds agreeing 3/3",
    ),
    (
      [0.3, 0.35, 0.32],
      [0.01, 0.02, 0.0],
      "below",
      "not reproduced",
      "t interval excludes the minimum effect",
    ),
    (
      [0.30, 0.35, 0.32],
      [0.302, 0.348, 0.32],
      "within",
      "reproduced",
      "Holm equivalence t test, seeds within the bound 3/3",
    ),
    (
      [0.1, 0.4, 0.2],
      [0.2, 0.2, 0.2],
      "below",
      "underpowered",
      "t interval holds 0, MDE > minimum effect",
    ),
  ],
  ids=["rises_less", "rises_more", "rises_alike", "too_noisy"],
)
def test_each_verdict_of_a_difference_of_rises(a, b, direction, verdict, decided):
  (cell,) = _judge_two(a, b, direction)
  assert (cell.verdict, cell.decided) == (verdict, decided)
  assert [d for d, _ in cell.pairs] == pytest.approx([x - y for x, y in zip(a, b)], abs=1e-9)


def test_a_difference_of_rises_is_paired_document_by_document():
  """Each seed's interval is over the documents' own differences of differences: the two rows'
  jitters cancel where they match (zero width) and add where they oppose."""
  (same,) = _judge_two([0.1] * 3, [0.2] * 3, jitter_a=0.05, jitter_b=0.05)
  assert all(ci == pytest.approx([-0.1, -0.1]) for _, ci in same.pairs)
  (opposed,) = _judge_two([0.1] * 3, [0.2] * 3, jitter_a=0.05, jitter_b=-0.05)
  # per document -0.1 +- 0.1: the wider is the t interval over the 20 documents' differences of
  # differences, -0.1 +- t(0.975, 19) x 0.1 / sqrt(19) = 0.0480
  half = 2.093024 * 0.1 / math.sqrt(19)
  assert all(ci == pytest.approx([-0.1 - half, -0.1 + half], abs=1e-6) for _, ci in opposed.pairs)


def test_a_rise_needs_the_same_documents_at_both_lengths():
  results = _rise_results([0.01, 0.0])
  results[1]["lengths"]["64"]["per_document"]["ids"][0] = 99  # seed 1's 1x: another document
  with pytest.raises(ValueError) as error:
    report.judge(results, [_rise()])
  assert str(error.value) == (
    "claim 'flat': alibi-s1 at 256 tokens (4x) and 64 tokens (1x) cannot be paired: a length "
    "missing, no per-document losses, or different documents"
  )
  with pytest.raises(ValueError, match=r"^claim 'flat': no seed with xpos-s<seed>/none among"):
    report.judge(results, [report.Claim("flat", "xpos", None, (4,), "within", 0.05, "none", 1)])


def test_the_table_prints_rise_cells_and_says_what_they_are():
  results = _rise_results([0.01, -0.005, 0.0]) + _rise_results([0.3, 0.35, 0.4], stem="rope")
  declared = [
    _rise(),
    report.Claim("rope_rises", "rope", None, (4,), "above", 0.3, minus_length=1),
    report.Claim("less", "alibi", "rope", (4,), "below", 0.01, minus_length=1),
  ]
  table = report.claims_table(results, declared)
  assert [row_cells(line)[1] for line in table.splitlines()[-3:]] == [
    "-0.050 < alibi/none - 1x < +0.050",
    "rope/none - 1x > +0.300",
    "(alibi/none - 1x) - (rope/none - 1x) < -0.010",
  ]
  assert [row_cells(line)[8] for line in table.splitlines()[-3:]] == [
    "**reproduced**",
    "**reproduced**",
    "**reproduced**",
  ]
  assert claims.RISES_NOTE in table and claims.Within.note in table
  plain = report.claims_table(_results([-0.05, -0.06, -0.04]), [_claim()])
  assert claims.RISES_NOTE not in plain and claims.Within.note not in plain


@pytest.mark.parametrize(
  "fields, error",
  [
    ({"minus_length": 4}, "Claim('c').minus_length=4 is not allowed; allowed: None, or a"),
    ({"minus_length": 0}, "Claim('c').minus_length=0 is not allowed"),
    ({"baseline": None}, "Claim('c').baseline=None is not allowed; allowed: a row's name, or"),
    (
      {"direction": "within", "min_effect": 0.0},
      "Claim('c').min_effect=0.0 is not allowed; allowed: > 0 (nats/token) with \"within\"",
    ),
  ],
)
def test_a_bad_rise_claim_names_its_field_and_the_allowed(fields, error):
  declared = {"baseline": "rope", "lengths": (4,), "direction": "below", "min_effect": 0.01}
  with pytest.raises(ValueError) as raised:
    report.Claim("c", "alibi", **{**declared, **fields})
  assert str(raised.value).startswith(error)


def test_cli_judges_a_rise_claim_and_rejects_unpaired_lengths(tmp_path):
  for r in _rise_results([0.01, -0.005, 0.0]):
    save(tmp_path / "in" / f"{r['run']}.json", r)
  exp = _experiment(tmp_path, '[Claim("flat", "alibi", None, (4,), "within", 0.05, "none", 1)]')
  proc = _cli(tmp_path / "in", f"--out={tmp_path / 'out'}", f"--claims={exp}")
  assert proc.returncode == 0, proc.stderr
  table = report.claims_table(report.load(str(tmp_path / "in")), [_rise()])
  assert f"## Claims (pre-declared)\n\n{table}\n" in proc.stdout
  assert "**reproduced**" in table
  bad = _rise_results([0.01, -0.005, 0.0])[2]
  del bad["lengths"]["64"]["per_document"]  # seed 2's 1x: no per-document losses
  save(tmp_path / "in" / "alibi-s2.json", bad)
  proc = _cli(tmp_path / "in", f"--out={tmp_path / 'out2'}", f"--claims={exp}")
  assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == (
    "error: claim 'flat': alibi-s2 at 256 tokens (4x) and 64 tokens (1x) cannot be paired: a "
    "length missing, no per-document losses, or different documents"
  )
  assert not (tmp_path / "out2").exists()
