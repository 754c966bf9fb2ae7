"""One table of every registered position scheme and every model option (issue 27 item 4): each
row trained at L, evaluated with one protocol (windows over the document stream) at 1x, 4x and
16x L, seeds 0-2, so each row pairs with RoPE of the same seed on the same documents.

Scheme rows come from the registry (`lcx.model.positions.SCHEMES`): a scheme registered later is a
row here without editing this file. Option rows put one model option on the scheme its paper
used (RoPE unless OPTIONS says otherwise). FoX and PaTH are registered schemes, so they are
scheme rows.

`./launch.sh sweep experiments/schemes` (CPU: the bytes regime, L = 64, STEPS steps) or
`experiments/schemes:full` (GPU: the matched regime, L = 256, its 600 steps, `--shard=i/SHARDS`:
shard i holds rows i, i + SHARDS, ... with their three seeds; README: the time estimate) or
`experiments/schemes:context` (issue 59 item 2: the regime in which the models use their context,
L = 128, its 2000 steps, scored at 1-16x L on 100 windows a length; CPU, 6-7 minutes a run on 2
cores, or on a lent GPU `--shard=i/CONTEXT_SHARDS`, a row's three seeds a shard). Its rows that
experiments/context_table trains with the same command are read from that experiment's results
(FROM_CONTEXT_TABLE), not trained twice.
"""

from configs import extrapolation
from lcx import errors
from lcx.model import positions
from lcx.tools.report.claims import Claim
from lcx.tools.sweep import Run

SEEDS = (0, 1, 2)
# CPU rows: the bytes regime's 600 steps (RoPE: perplexity 8.0 at L against a byte unigram's
# ~20; one run and its evaluation 249 CPU-seconds, 2-4 minutes on 2 idle cores: README).
# GPU rows: the matched regime's 600.
STEPS = FULL_STEPS = 600
MULTIPLIERS = (1, 4, 16)
# :full on a lent H100 (README: the basis): SHARDS shards, each within SHARD_LIMIT_S from a fresh
# machine: SETUP_S once (wheels, Python, the first JAX start), a row's seed 0 RUN_S (compiles),
# seeds 1-2 CACHED_RUN_S each (the compilation cache holds seed 0's programs).
SHARDS = 13
SHARD_LIMIT_S, SETUP_S, RUN_S, CACHED_RUN_S = 480, 90, 90, 45
# :context: this row -> the experiments/context_table row trained with the same command (config,
# seed and overrides, the regime's own lengths; tests/test_experiments.py checks it). T5 there has
# its buckets end at L/2 (its README: the paper's end below L), so the table's T5 row is that one.
FROM_CONTEXT_TABLE = {
  "rope": "rope",
  "alibi": "alibi",
  "sinusoidal": "sinusoidal",
  "nope": "nope",
  "t5": "t5",
  "kerple_log": "kerple_log",
  "fire": "fire",
  "scale_invariant": "si_p_rope",
}
CONTEXT_SHARDS = 17  # a row's three seeds a shard: 60 + 3 x 85 s by tests/test_experiments.py

# Claims, judged by `./launch.sh report experiments/schemes[/full]/results
# --claims=experiments/schemes` (the rules: lcx/tools/report/claims.py). They restate claims the
# README fixed before any result (each row beats RoPE past L: ALiBi, KERPLE-power and PaTH at
# 16x, the longest length, PoSE at 4x, inside its 16x target); the minimum effect was added on
# 2026-12-02, after both regimes ran: 0.01 nats/token (1% perplexity), a seventh of RoPE's own
# rise from 1x to 16x in the matched regime (+0.068 when declared). A win past L smaller than
# that would not change which scheme to use.
CLAIMS = [
  Claim("alibi_16x", "alibi", "rope", (16,), "below", 0.01),
  Claim("kerple_power_16x", "kerple_power", "rope", (16,), "below", 0.01),
  Claim("path_16x", "path", "rope", (16,), "below", 0.01),
  Claim("pose_4x", "pose", "rope", (4,), "below", 0.01),
]
# :context's, declared on 2026-12-02 at 15:00 UTC before any run of it: the same four, with the
# minimum effect the context regime's own: 0.05 nats, the tolerance within which it counts a
# curve as flat (experiments/context_table's ALiBi claims; RoPE rose +0.429 there from 1x to
# 16x, about nine times it). Judge with `--claims=experiments/schemes:context` on this
# variant's results together with context_table's RoPE (README: the command).
CLAIMS_CONTEXT = [
  Claim("alibi_16x", "alibi", "rope", (16,), "below", 0.05),
  Claim("kerple_power_16x", "kerple_power", "rope", (16,), "below", 0.05),
  Claim("path_16x", "path", "rope", (16,), "below", 0.05),
  Claim("pose_4x", "pose", "rope", (4,), "below", 0.05),
]


def _scheme_overrides(seq_len: int) -> dict[str, dict]:
  """What a registered scheme needs to be scored past L at all (the rest: registry defaults)."""
  return {"learned": {"model.position.max_len_policy": "clamp"}}  # past L: the last embedding


def _options(seq_len: int) -> dict[str, tuple[str, dict]]:
  """Row -> (scheme, overrides): each model option on its paper's scheme."""
  return {
    # Tan et al. 2024 train stick-breaking with no position encoding.
    "stick_breaking": ("nope", {"model.attention.kind": "stick_breaking"}),
    "ssmax": ("rope", {"model.attention.temperature": "ssmax"}),
    "log_n": ("rope", {"model.attention.temperature": "log_n"}),
    "qk_norm": ("rope", {"model.qk_norm": True}),
    "sink": ("rope", {"model.attention.sink": "learned"}),
    "gate": ("rope", {"model.attention.gate": "elementwise"}),
    "irope": ("rope", {"model.nope_every": 4}),  # Llama 4: every 4th block NoPE
    # Yang et al. 2025: NoPE blocks attend to everything, RoPE blocks to a window (here L/2).
    "rnope_swa": ("rope", {"model.nope_every": 4, "model.position_window": seq_len // 2}),
    "pose": ("rope", {"train.pose_target": MULTIPLIERS[-1] * seq_len}),  # the longest eval
    # Anson et al. 2025 use scale-invariant attention with p-RoPE.
    "scale_invariant": ("p_rope", {"model.attention.temperature": "scale_invariant"}),
  }


def rows(seq_len: int) -> dict[str, tuple[str, dict]]:
  """Row -> (scheme, overrides): RoPE first (the baseline), then the options (no other
  experiment trains them at this protocol, while alibi_table has 9 of the schemes), then every
  other registered scheme in registry order, so a sweep stopped early has the rows new here."""
  special = _scheme_overrides(seq_len)
  schemes = {name: (name, special.get(name, {})) for name in positions.SCHEMES}
  return {"rope": schemes.pop("rope"), **_options(seq_len), **schemes}


# arg -> (regime, steps: None for the regime's own, overrides, rows read from elsewhere):
# :context takes the regime's steps and lengths (its defaults, so the regime stays their one
# source), the command context_table's runs have, and reads FROM_CONTEXT_TABLE's rows from it.
VARIANTS = {
  "": ("bytes", STEPS, {"eval.multipliers": MULTIPLIERS}, ()),
  "full": ("matched", FULL_STEPS, {"eval.multipliers": MULTIPLIERS}, ()),
  "context": ("context", None, {}, tuple(FROM_CONTEXT_TABLE)),
}


def get_runs(arg=""):
  if arg not in VARIANTS:
    raise errors.not_allowed("experiments/schemes:ARG", arg, [a or '""' for a in VARIANTS])
  regime, steps, lengths, elsewhere = VARIANTS[arg]
  schedule = f",steps={steps}" if steps else ""
  runs = {}
  for seed in SEEDS:  # seed 0 of every row first, so a stopped sweep has whole seeds
    for row, (pos, extra) in rows(extrapolation.REGIMES[regime].seq_len).items():
      if row in elsewhere:
        continue
      runs[f"{row}-s{seed}"] = Run(
        f"configs/extrapolation.py:pos={pos},data=books,regime={regime}{schedule}",
        {"seed": seed, **extra, **lengths, "eval.variants": "none"},
        # On lent GPUs: seeds 1-2 wait for seed 0, which keeps a row's seeds on one shard
        # (lcx.tools.sweep shards by `needs`), where they reuse its compiled programs.
        needs=(f"{row}-s0",) if arg and seed else (),
      )
  return runs
