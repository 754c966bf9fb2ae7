"""The core comparisons in the context regime (issue 59 items 2 and 7): the ALiBi paper's Table 2
rows (sinusoidal, RoPE, T5, ALiBi) with NoPE, KERPLE (log) and FIRE, and scale-invariant
attention's Table 1 rows (RoPE, LogN + p-RoPE with its log-n scaling trained, scale-invariant
p-RoPE), each trained at L and scored at 1..16x L, seeds 0-2, in configs/extrapolation.py's
regime=context: the first subword regime in which the models use their context
(experiments/context_probe: RoPE +0.364 nats from 1x to 16x, ALiBi -0.009, seed 0).

`./launch.sh sweep experiments/context_table` (CPU: 27 runs of the regime's 2000 steps, 6-7
minutes each on 2 cores; seed 0 of every row first, then seed 1, then seed 2, the rows the
claims compare first, so a sweep stopped and resumed across sessions has whole seeds) or
`experiments/context_table:full` (GPU: the default-size model, 4000 steps, `--shard=i/SHARDS`:
shard i holds row i's three seeds, which reuse seed 0's compiled programs) or
`experiments/context_table:matched_base` (CPU: the SI paper's three rows at the rotary base
matched to Llama-2, 9 runs, claims `CLAIMS_MATCHED_BASE`).
"""

from lcx import errors, regime
from lcx.tools.report.claims import Claim
from lcx.tools.sweep import Run

SEEDS = (0, 1, 2)
# row -> (config pos, overrides), in the order a stopped sweep should have them: the rows the
# claims compare, then the ALiBi paper's other rows and the later schemes.
ROWS = {
  "rope": ("rope", {}),
  "alibi": ("alibi", {}),
  "sinusoidal": ("sinusoidal", {}),
  # The SI paper's LogN baseline is trained with its scaling (its own network at 1x, 3.256 to
  # RoPE's 3.261); lcx's `log_n` is 1 inside L, so the trained form is SSMax's s_h ln n (s learned
  # per head, started at 1 / ln L): every query inside L sees it too.
  "trained_logn_p_rope": ("p_rope", {"model.attention.temperature": "ssmax"}),
  "si_p_rope": ("p_rope", {"model.attention.temperature": "scale_invariant"}),
  "nope": ("nope", {}),
  # The paper's T5 buckets end below L (its 128 at L = 512), so every bucket trains many times:
  # half of L = 128, as alibi_table:matched's 128 at L = 256.
  "t5": ("t5", {"model.position.max_distance": 64}),
  "kerple_log": ("kerple_log", {}),
  "fire": ("fire", {}),
}
# :matched_base: the SI paper's rows again with the rotary base matched to Llama-2 at 4k
# (lcx.regime.matched_base(128) = 72.55), where p-RoPE's 4 dropped pairs turn 2.3-5.1 rad over L
# (at 10^4: 0.128 rad, so p-RoPE is nearly RoPE; the README's caveat). Added 2026-12-02 07:45 UTC,
# before any run of it; CPU, the regime's 2000 steps; results in matched_base/results/.
MATCHED_BASE_ROWS = ("rope", "trained_logn_p_rope", "si_p_rope")
# :full on one lent GPU: the default model (the probe's :full size) for twice the steps.
FULL_SIZE, FULL_STEPS = "default", 4000
SHARDS = 9  # :full: one row's three seeds a shard, 60 + 3 x 125 s by tests/test_experiments.py

# Claims, judged by `./launch.sh report experiments/context_table/results
# --claims=experiments/context_table` (the rules: lcx/tools/report/claims.py), declared on
# 2026-12-02 before any run of this experiment, each in every seed at 16x L.
# The first four compare two rows of the same seed. The ALiBi paper's: ALiBi below RoPE and below
# sinusoidal at 16x, by at least 0.05 nats, the tolerance within which the regime's target counts
# a curve as flat (a gap smaller than that would not tell an extrapolating scheme from a rising
# one; the probe's RoPE rose seven times it). The SI paper's: scale-invariant p-RoPE below LogN +
# p-RoPE (published -0.070 at 16x) and below RoPE (-2.0), by at least 0.01 nats (1% perplexity,
# experiments/schemes' minimum: the paper's LogN margin is seven times it).
# The other five, added 2026-12-02 at 04:20 UTC when the engine learned rises (`minus_length`),
# still before any run, judge each row's own 16x - 1x on the same documents: the papers' shapes,
# which the first four judge only through the gap at 16x. The ALiBi paper's: ALiBi flat, its
# 16x - 1x within +-0.05 (the same tolerance); RoPE and sinusoidal rising by at least 0.3 nats
# (the probe's RoPE: +0.364 at seed 0; published at 10.8x: +0.765 and +2.484). The SI paper's:
# scale-invariant p-RoPE's 16x - 1x below LogN + p-RoPE's and RoPE's (published +0.003 against
# +0.061 and +2.0) by at least 0.01 nats, a difference of differences per seed and per document.
# The claims :matched_base judges too (its list, below): the SI paper's four and RoPE's rise.
SI_GAPS = [
  Claim("si_below_trained_logn_16x", "si_p_rope", "trained_logn_p_rope", (16,), "below", 0.01),
  Claim("si_below_rope_16x", "si_p_rope", "rope", (16,), "below", 0.01),
]
SI_RISES = [
  Claim(
    "si_rises_less_than_trained_logn_16x",
    "si_p_rope",
    "trained_logn_p_rope",
    (16,),
    "below",
    0.01,
    minus_length=1,
  ),
  Claim("si_rises_less_than_rope_16x", "si_p_rope", "rope", (16,), "below", 0.01, minus_length=1),
]
ROPE_RISES = Claim("rope_rises_16x", "rope", None, (16,), "above", 0.3, minus_length=1)
CLAIMS = [
  Claim("alibi_below_rope_16x", "alibi", "rope", (16,), "below", 0.05),
  Claim("alibi_below_sinusoidal_16x", "alibi", "sinusoidal", (16,), "below", 0.05),
  *SI_GAPS,
  Claim("alibi_flat_16x", "alibi", None, (16,), "within", 0.05, minus_length=1),
  ROPE_RISES,
  Claim("sinusoidal_rises_16x", "sinusoidal", None, (16,), "above", 0.3, minus_length=1),
  *SI_RISES,
]
# :matched_base's (its rows only; declared with them, before any run): the four SI claims as
# above, and RoPE's rise, which says whether this base keeps the regime's premise (the models
# use their context past L) that the SI claims are read against.
CLAIMS_MATCHED_BASE = [*SI_GAPS, *SI_RISES, ROPE_RISES]


def get_runs(arg=""):
  if arg not in ("", "full", "matched_base"):
    raise errors.not_allowed("experiments/context_table:ARG", arg, ['""', "full", "matched_base"])
  full = arg == "full"
  # CPU: the regime's own steps and size (its defaults, so the regime stays their one source).
  schedule = f",steps={FULL_STEPS},size={FULL_SIZE}" if full else ""
  rows = {r: ROWS[r] for r in MATCHED_BASE_ROWS} if arg == "matched_base" else ROWS
  base = {"model.position.base": regime.matched_base(128)} if arg == "matched_base" else {}
  runs = {}
  for seed in SEEDS:  # seed 0 of every row first, so a stopped sweep has whole seeds
    for row, (pos, extra) in rows.items():
      runs[f"{row}-s{seed}"] = Run(
        f"configs/extrapolation.py:pos={pos},data=books,regime=context{schedule}",
        {"seed": seed, **extra, **base, "eval.variants": "none"},
        # :full: seeds 1-2 wait for seed 0, which keeps a row's seeds on one shard (lcx.tools.sweep
        # shards by `needs`), where they reuse its compiled programs.
        needs=(f"{row}-s0",) if full and seed else (),
      )
  return runs
