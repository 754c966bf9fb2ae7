"""p-RoPE analog (Barbero et al. 2024): keep the fraction p of RoPE's highest frequencies,
p in {0, 0.25, 0.5, 0.75, 1} (p=0 is NoPE, p=1 is RoPE), perplexity within and past L.

`./launch.sh sweep experiments/prope` (CPU) or `experiments/prope:full` (one GPU host).
Published (2B models, Wiki perplexity): NoPE 4.86, RoPE 4.46, 0.75-RoPE 4.44, 0.25-RoPE 4.53.
"""

from lcx.tools.sweep import Run

PS = (0.0, 0.25, 0.5, 0.75, 1.0)


def get_runs(arg=""):
  full = arg == "full"
  size, seq_len, steps = ("default", 256, 4000) if full else ("small", 64, 600)
  seeds = (0, 1, 2)  # issue 27: three seeds behind every claim (CPU: 15 runs, ~40 minutes)
  runs = {}
  for seed in seeds:
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
          "eval.multipliers": (1, 2, 4, 8),
          "eval.variants": "none",
        },
      )
  return runs
