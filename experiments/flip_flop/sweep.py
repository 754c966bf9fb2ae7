"""PaTH's Table 1 (Yang et al. 2025, arXiv 2505.16381): flip-flop language modelling (Liu et al.
2023) error rates on the read bits, 1 layer, 2 heads, 64 dimensions, trained on FFL(0.8) at 512
tokens and tested on it, on the sparse FFL(0.98) and on the dense FFL(0.1) mix
(`configs/flip_flop.py`). Rows: RoPE, stick-breaking (no position encoding, as Tan et al.'s),
NoPE, ALiBi, FoX and PaTH, 3 seeds each.

`./launch.sh sweep experiments/flip_flop` (CPU: 400 steps of 8 sequences, 256 test sequences per
mix) or `experiments/flip_flop:full` (the paper's 10000 steps of 16, 2048 test sequences per mix;
on lent GPUs one share each with `--shard=i/n`). `experiments/flip_flop:matched_base` runs the
CPU table's RoPE rows again with the rotary base matched at L (issue 27's regime:
`lcx.regime.matched_base(513)` = 521.89, so 4 of the 16 pairs turn less than once inside the
513 positions, as 18 of 64 do in Llama-2 at 4k; base 10^4 leaves 8), the one row the base
moves. A scheme lcx does not register fails its rows with the config's error line
(`model.position.name='fox' is not allowed; ...`): no row is left out.
Published error rates (ID / sparse / dense): RoPE 6.9 / 40.3 / 0.01 %, stick-breaking
9.6 / 38.9 / 0 %, FoX 8.3 / 36.3 / 0 %, PaTH 0 / 0.0001 / 0 %.
"""

from lcx import errors, regime
from lcx.data import tasks
from lcx.tools.sweep import Run

SCHEMES = {  # label -> (configs/flip_flop.py pos, overrides)
  "rope": ("rope", {}),
  "stick_breaking": ("nope", {"model.attention.kind": "stick_breaking"}),
  "nope": ("nope", {}),
  "alibi": ("alibi", {}),
  "fox": ("fox", {}),  # lcx registers it once branch `fox` is merged
  "path": ("path", {}),  # likewise branch `path`
}
SIZES = {  # arg -> (steps, warmup, batch, test sequences per mix)
  "": (400, 50, 8, 256),
  "matched_base": (400, 50, 8, 256),
  "full": (10000, 200, 16, 2048),
}
L = tasks.document_tokens("flip_flop", 256) - 1  # configs/flip_flop.py's seq_len
MATCHED = {"model.position.base": regime.matched_base(L)}


SHARDS = 18  # :full on lent GPUs, `--shard=i/18`, a run each (README: the estimate)


def get_runs(arg=""):
  if arg not in SIZES:
    raise errors.not_allowed("experiments/flip_flop:ARG", arg, ['""', "matched_base", "full"])
  steps, warmup, batch, examples = SIZES[arg]
  runs = {}
  for seed in (0, 1, 2):  # seed-major: a sweep cut short still has every row's first seeds
    for label, (pos, extra) in SCHEMES.items():
      if arg == "matched_base":
        if label != "rope":
          continue
        extra = {**extra, **MATCHED}
      runs[f"{label}-s{seed}"] = Run(
        f"configs/flip_flop.py:pos={pos},steps={steps}",
        {
          "seed": seed,
          **extra,
          "data.batch_size": batch,
          "data.task_eval_examples": examples,
          "train.warmup_steps": warmup,
          "train.log_every": 50,
          "train.checkpoint_every": min(steps, 1000),
        },
      )
  return runs
