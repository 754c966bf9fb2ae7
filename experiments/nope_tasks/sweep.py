"""NoPE paper analog (Kazemnejad et al. 2023): every scheme on every synthetic task, trained on
sizes U(1, L), tested to 4x L; exact match per size bucket, ranked across tasks.

`./launch.sh sweep experiments/nope_tasks` (CPU: 3 seeds, tiny models) or
`experiments/nope_tasks:full` (3 seeds, the small model, longer training).
`experiments/nope_tasks:matched_base` trains the CPU table's two RoPE rows again with the rotary
base matched at each task's L (issue 27's regime, `lcx.regime.matched_base`), named
`rope_matched` and `rope_randomized_matched`, and randomized RoPE at the base matched at the
1024 positions it draws from (`rope_randomized_matched_range`), so one report over both results
folders ranks them beside every other row.
Published mean reciprocal rank: NoPE 0.69 > T5 0.55 > ALiBi 0.50 > RoPE 0.33 > APE 0.22.
"""

from lcx import errors, regime
from lcx.data import tasks
from lcx.tools.sweep import Run

SCHEMES = {
  "nope": ("nope", {}),
  "t5": ("t5", {"model.position.max_distance": 32}),
  "alibi": ("alibi", {}),
  "rope": ("rope", {}),
  "sinusoidal": ("sinusoidal", {}),  # APE
  "learned": ("learned", {"model.position.max_len_policy": "clamp"}),  # APE
  "fire": ("fire", {}),
  "rope_randomized": ("rope", {"train.random_positions": 1024}),
}
# The 13 tasks of the paper's suite and lcx's analogs of it, named: a task registered later (the
# needle, flip-flop, MQAR and Chomsky-hierarchy tasks have their own experiments) does not join
# this table unrun.
TASKS = (
  "copy",
  "reverse",
  "sort",
  "addition",
  "parity",
  "associative_recall",
  "passkey",
  "induction",
  "polynomial",
  "summation",
  "lego",
  "scan",
  "pcfg",
)
MAX_SIZE = {"scan": 4, "pcfg": 4, "lego": 8, "associative_recall": 8, "passkey": 8}  # long tasks


SHARDS = 78  # :full on lent GPUs, `--shard=i/78` (README: the estimate)


def _schemes(arg: str, seq_len: int) -> dict:
  """The rows: every scheme, or (matched_base) the rotary ones at the base matched at L, and
  randomized RoPE once more at the base matched at the range its positions are drawn from
  (`_matched_range`): it sees positions up to train.random_positions, not up to L."""
  if arg != "matched_base":
    return SCHEMES

  def at(length: int) -> dict:
    return {"model.position.base": regime.matched_base(length)}

  rows = {}
  for label, (pos, extra) in SCHEMES.items():
    if pos != "rope":
      continue
    rows[f"{label}_matched"] = (pos, {**extra, **at(seq_len)})
    if "train.random_positions" in extra:
      rows[f"{label}_matched_range"] = (pos, {**extra, **at(extra["train.random_positions"])})
  return rows


def get_runs(arg=""):
  if arg not in ("", "matched_base", "full"):
    raise errors.not_allowed("experiments/nope_tasks:ARG", arg, ['""', "matched_base", "full"])
  full = arg == "full"
  size, steps = ("small", 3000) if full else ("tiny", 800)
  seeds = (0, 1, 2)
  runs = {}
  for task in TASKS:
    max_len = MAX_SIZE.get(task, 16)
    seq_len = tasks.document_tokens(task, max_len)
    for label, (pos, extra) in _schemes(arg, seq_len).items():
      for seed in seeds:
        runs[f"{task}-{label}-s{seed}"] = Run(
          f"configs/base.py:pos={pos},size={size}",
          {
            "seed": seed,
            **extra,
            "data.name": "task",
            "data.task": task,
            "data.task_min_len": 1,
            "data.task_max_len": max_len,
            "data.seq_len": seq_len,
            "data.task_eval_factor": 4,
            "data.task_eval_examples": 256,
            "data.batch_size": 32,
            "train.steps": steps,
            "train.warmup_steps": 50,
            "train.lr": 3e-3,
            "train.log_every": 100,
            "train.checkpoint_every": 400,
          },
        )
  return runs
