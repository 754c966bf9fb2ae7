"""Scale-invariant attention (Anson et al. 2025, 2505.17083) Table 1 analog: each row trained at
L in the regime-matched small scale (configs/extrapolation.py:regime=matched: SentencePiece 4096
on books, L = 256, rotary base 194.31), evaluated at 1x, 4x and 16x L, seeds 0-2.

Rows: RoPE, p-RoPE (p = 0.75), NoPE, ALiBi, LogN RoPE and LogN p-RoPE (temperature=log_n),
scale-invariant p-RoPE (temperature=scale_invariant, tau = 10; scale-invariant RoPE too in
`:full`); RoPE+NTK and RoPE+YaRN are evaluation variants of the RoPE runs: dynamic NTK
(`dynamic@1`, the paper's "Dynamic NTK interpolation": the base grows with the current length)
and YaRN at each length's factor (`yarn@4` is read at 4x, `yarn@16` at 16x).

`./launch.sh sweep experiments/scale_invariant` (CPU, 2 shared cores: 48 steps, far below the
regime's 600, so that 21 runs fit; README: what that changes: the models learn nothing),
`experiments/scale_invariant:bytes` (CPU: the bytes regime of experiments/schemes, L = 64, its
600 steps, where the models use their context; evaluated at 64, 256 and 1024 tokens; five rows
are that experiment's runs, FROM_SCHEMES) or
`experiments/scale_invariant:full` (GPU: the regime's 600 steps, 24 runs, `--shard=i/8`: shard
i holds row i's three seeds, so with JAX_COMPILATION_CACHE_DIR set seeds 1 and 2 reuse seed 0's
compiled programs).
"""

from lcx import errors
from lcx.tools.sweep import Run

# row stem -> (config pos, overrides): the trained rows of the paper's Table 1
SCHEMES = {
  "rope": ("rope", {}),
  "p_rope": ("p_rope", {}),
  "nope": ("nope", {}),
  "alibi": ("alibi", {}),
  "logn_rope": ("rope", {"model.attention.temperature": "log_n"}),
  "logn_p_rope": ("p_rope", {"model.attention.temperature": "log_n"}),
  "si_p_rope": ("p_rope", {"model.attention.temperature": "scale_invariant"}),
  "si_rope": ("rope", {"model.attention.temperature": "scale_invariant"}),
}
FULL_ONLY = ("si_rope",)  # not in the paper's table; the CPU sweep has no room for it
ROPE_VARIANTS = "none,dynamic@1,yarn@4,yarn@16"  # RoPE+NTK, RoPE+YaRN at 4x and 16x
SEEDS = (0, 1, 2)
# CPU: 48 steps, warmup 8 (the regime's warmup of 100 would outlast the run); GPU: the regime's.
QUICK_STEPS, QUICK_WARMUP = 48, 8


# arg -> (regime, steps, schedule overrides): "" the matched regime cut to fit the CPU;
# "bytes" the CPU regime in which 600 steps learn (experiments/schemes: RoPE perplexity 8.0 at L
# against a byte unigram's 26); "full" the matched regime's own schedule.
VARIANTS = {
  "": ("matched", QUICK_STEPS, {"train.warmup_steps": QUICK_WARMUP}),
  "bytes": ("bytes", 600, {}),
  "full": ("matched", 600, {}),
}
# :bytes: rows experiments/schemes trains with the same command (seed, config and overrides;
# tests/test_experiments.py checks it), read from its results instead of trained twice:
# this experiment's row -> the schemes row. RoPE is trained here too, for its NTK and YaRN
# evaluation variants, which need its checkpoint.
FROM_SCHEMES = {
  "p_rope": "p_rope",
  "nope": "nope",
  "alibi": "alibi",
  "logn_rope": "log_n",
  "si_p_rope": "scale_invariant",
}


SHARDS = 8  # :full on lent GPUs, `--shard=i/8` (ran on an H200: README)


def get_runs(arg=""):
  if arg not in VARIANTS:
    raise errors.not_allowed("experiments/scale_invariant:ARG", arg, [a or '""' for a in VARIANTS])
  full = arg == "full"
  regime, steps, schedule = VARIANTS[arg]
  runs = {}
  for seed in SEEDS:
    for stem, (pos, extra) in SCHEMES.items():
      if (stem in FULL_ONLY and not full) or (arg == "bytes" and stem in FROM_SCHEMES):
        continue
      runs[f"{stem}-s{seed}"] = Run(
        f"configs/extrapolation.py:pos={pos},data=books,regime={regime},steps={steps}",
        {
          "seed": seed,
          **schedule,
          **extra,
          "eval.multipliers": (1, 4, 16),
          "eval.variants": ROPE_VARIANTS if stem == "rope" else "none",
        },
      )
  return runs
