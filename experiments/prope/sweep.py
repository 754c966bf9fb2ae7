"""p-RoPE analog (Barbero et al. 2024): keep the fraction p of RoPE's highest frequencies,
p in {0, 0.25, 0.5, 0.75, 1} (p=0 is NoPE, p=1 is RoPE), perplexity within and past L.

`./launch.sh sweep experiments/prope` (CPU: the bytes regime, L = 64, base 10^4, where the
pairs p-RoPE drops turn under 0.07 rad over L and so carry no position either way),
`experiments/prope:matched_base` (CPU: the same model and data with the rotary base matched to
Llama-2 at 4k, `lcx.regime.matched_base(64)` = 27.09, where the dropped quarter turns about 5
rad over L, as in the paper's regime: issue 27's "p-RoPE tested where its dropped pairs carry
position"; results in experiments/prope/matched_base/) or `experiments/prope:full` (one GPU host).
Published (2B models, Wiki perplexity): NoPE 4.86, RoPE 4.46, 0.75-RoPE 4.44, 0.25-RoPE 4.53.
"""

from lcx import errors, regime
from lcx.tools.sweep import Run

PS = (0.0, 0.25, 0.5, 0.75, 1.0)
SEEDS = (0, 1, 2)  # issue 27: three seeds behind every claim (CPU: 15 runs, ~40-60 minutes)
CPU_LEN = 64
# arg -> (size, seq_len, steps, overrides)
VARIANTS = {
  "": ("small", CPU_LEN, 600, {}),
  "matched_base": ("small", CPU_LEN, 600, {"model.position.base": regime.matched_base(CPU_LEN)}),
  "full": ("default", 256, 4000, {}),
}


SHARDS = 5  # :full on lent GPUs, `--shard=i/5` (README: the estimate)


def get_runs(arg=""):
  if arg not in VARIANTS:
    raise errors.not_allowed("experiments/prope:ARG", arg, [a or '""' for a in VARIANTS])
  size, seq_len, steps, extra = VARIANTS[arg]
  runs = {}
  for seed in SEEDS:
    for p in PS:
      config = (
        f"configs/extrapolation.py:pos=p_rope,data=books,steps={steps},"
        f"seq_len={seq_len},size={size}"
      )
      runs[f"p{p:g}-s{seed}"] = Run(
        config,
        {
          "seed": seed,
          "model.position.p": p,
          **extra,
          "eval.multipliers": (1, 2, 4, 8),
          "eval.variants": "none",
        },
      )
  return runs
