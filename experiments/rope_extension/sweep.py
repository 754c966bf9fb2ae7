"""PI / YaRN / LongRoPE analog: one RoPE checkpoint trained at L, evaluated at 1x-16x L with every
training-free extension method (PI, NTK, dynamic NTK, YaRN, llama3, searched LongRoPE,
Self-Extend, ReRoPE) on long documents, then fine-tuned briefly at 4x L (PI, YaRN, and
LongRoPE with its searched factors), beside the controls the papers ran (issue 27 item 5): the
same fine-tune without scaling (PI Table 1's direct fine-tuning) and with NTK, continued training
at L for the fine-tune's tokens, and a model trained at 4x L from scratch (the upper bound).

`./launch.sh sweep experiments/rope_extension` (CPU, the bytes regime: L = 64),
`experiments/rope_extension:matched` (CPU, issue 27's regime-matched small scale: SentencePiece
on books, L = 256, the rotary base matched to Llama-2 at 4k, 600 steps; fine-tunes of 100 steps at
4 x L, the bytes regime's 1.6M fine-tune tokens) or `experiments/rope_extension:full` (GPU).
Claims (positions.md): no scaling explodes past L; PI needs fine-tuning; NTK, dynamic and YaRN
work without; YaRN is best after fine-tuning; searched LongRoPE beats PI and YaRN without; PI
extends the window faster than direct fine-tuning.
"""

from lcx import errors
from lcx.tools.sweep import Run

SCALE = 4  # the extension factor s: target length 4 x L


SEEDS = (0, 1, 2)  # issue 27: three seeds; seed 0's runs keep their first names (no suffix)


# arg -> (config regime, model size, L, base steps, fine-tune steps)
VARIANTS = {
  "": ("bytes", "small", 64, 1200, 200),
  "matched": ("matched", "small", 256, 600, 100),
  "full": ("bytes", "default", 256, 4000, 400),
}


# :full on lent GPUs, `--shard=i/3 --jobs=4`: a seed's runs need its base checkpoint, so a
# shard is a seed; its fine-tunes and search run side by side once the base has trained.
SHARDS, SHARD_JOBS = 3, 4


def get_runs(arg=""):
  if arg not in VARIANTS:
    raise errors.not_allowed("experiments/rope_extension:ARG", arg, [a or '""' for a in VARIANTS])
  runs = {}
  for seed in SEEDS:
    runs.update(_seed_runs(arg, seed))
  return runs


def _seed_runs(arg: str, seed: int) -> dict:
  """One seed's runs: the base RoPE run, its search, its training-free variants and the
  fine-tunes and controls from it; seed s > 0 names each run NAME-sS and trains with seed s."""
  regime, size, L, steps, ft_steps = VARIANTS[arg]
  lengths = tuple(L * m for m in (1, 2, 4, 8, 16))
  suffix, seeded = (f"-s{seed}", {"seed": seed}) if seed else ("", {})

  def name(run: str) -> str:
    return run + suffix

  rope = name("rope")

  def config(steps: int, seq_len: int) -> str:
    command = (
      f"configs/extrapolation.py:pos=rope,data=books,steps={steps},seq_len={seq_len},size={size}"
    )
    # matched: the rotary base stays the one matched at L (base_len), at every length trained
    return command + (f",regime=matched,base_len={L}" if regime == "matched" else "")

  config_L = config(steps, L)
  # Passkey retrieval through generation at 2x, 4x and 8x L (its prompt needs 97 tokens > L).
  evaluation = {
    "eval.lengths": lengths,
    "eval.documents": "long",
    "eval.protocol": "windows,sliding",
    "eval.passkey.lengths": (2 * L, 4 * L, 8 * L),
  }
  s = SCALE
  variants = ",".join(
    [
      "none",
      f"linear@{s}",
      f"ntk@{s}",
      f"dynamic@{s}",
      f"yarn@{s}",
      f"llama3@{s}",
      "longrope@{runs}/" + rope + "/longrope/factors.json",
      f"self_extend@{L // 2}/{s}",
      f"rerope@{L}",
    ]
  )
  search = name("longrope_search")
  runs = {
    rope: Run(config_L, {**seeded, "eval.variants": "none", **evaluation}),
    search: Run("", {"eval.longrope.target_len": s * L}, needs=(rope,), mode="longrope", on=rope),
    name("training_free"): Run(
      "",
      {"eval.variants": variants, **evaluation},
      needs=(rope, search),
      mode="eval",
      on=rope,
    ),
  }
  # A short fine-tune at s x L from the RoPE checkpoint, fresh optimizer (PI / YaRN recipe).
  ft_config = config(ft_steps, s * L)
  finetune = {**seeded, "train.init_from": "{runs}/" + rope, "train.warmup_steps": 20}
  # YaRN's ramp reads the pre-training length L, not the fine-tune's window s x L.
  yarn_length = {"model.position.scaling.original_max_position_embeddings": L}
  # direct: the same fine-tune without scaling (PI Table 1's control); ntk: NTK-aware scaling
  # fine-tuned like PI and YaRN.
  rope_type, factor = (
    "model.position.scaling.rope_type",
    {"model.position.scaling.factor": float(s)},
  )
  scalings = {
    "linear": {rope_type: "linear", **factor},
    "yarn": {rope_type: "yarn", **factor, **yarn_length},
    "direct": {rope_type: "default"},
    "ntk": {rope_type: "ntk", **factor},
  }
  for scaling_name, scaling in scalings.items():
    runs[name(f"{scaling_name}_finetuned")] = Run(
      ft_config,
      {**finetune, **scaling, "eval.variants": "none", **evaluation},
      needs=(rope,),
    )
  # LongRoPE: fine-tuned with the factors its search found (train.scaling_file).
  runs[name("longrope_finetuned")] = Run(
    ft_config,
    {
      **finetune,
      "train.scaling_file": "{runs}/" + rope + "/longrope/factors.json",
      "eval.variants": "none",
      **evaluation,
    },
    needs=(rope, search),
  )
  # Continued training at L for the tokens a fine-tune gets (s x the steps at L, the same rows
  # per step): "more training" without "longer training".
  runs[name("continued")] = Run(
    config(s * ft_steps, L), {**finetune, "eval.variants": "none", **evaluation}, needs=(rope,)
  )
  # The upper bound: trained at s x L from scratch on the base run's tokens plus a fine-tune's
  # (steps / s + ft_steps steps of the same rows), the base's rotary base and warmup.
  runs[name("long_trained")] = Run(
    config(steps // s + ft_steps, s * L), {**seeded, "eval.variants": "none", **evaluation}
  )
  return runs
