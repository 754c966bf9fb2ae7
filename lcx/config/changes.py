"""What a resumed run may change, one kind for every config field (lcx/run/resume.py applies it
and records what changed). Declared below lcx.run, without jax, because the config checks read
it: `train.allow_changes` may name only the SCHEDULE fields."""

from __future__ import annotations

FIXED, SCHEDULE, FREE = "fixed", "schedule", "free"

# Field or section -> kind. A field takes the kind of the longest entry that covers it; one no
# entry covers (a section added to lcx later) is FIXED until it is listed here.
KINDS = {
  "seed": FIXED,  # parameter init and sampled positions
  "data": FIXED,  # the corpus, tokenizer, vocabulary, rows, batch, order and splits
  "data.data_dir": FREE,  # where the datasets are cached, not what they hold
  "data.task_eval_factor": FREE,
  "data.task_eval_examples": FREE,
  "data.task_eval_depths": FREE,
  "model": FIXED,  # shape, position scheme (its scaling and remap too: training uses them)
  "model.attention.chunk_size": FREE,  # how the kernel computes, not what
  "model.attention.impl": FREE,
  "model.attention.block_size": FREE,
  "model.remat": FREE,
  "train": FIXED,  # AdamW's b1, b2, weight decay, clipping; sampled positions; init_from
  "train.steps": SCHEDULE,
  "train.lr": SCHEDULE,
  "train.min_lr": SCHEDULE,
  "train.warmup_steps": SCHEDULE,
  "train.decay": SCHEDULE,
  "train.stop_after": FREE,
  "train.resume_step": FREE,
  "train.allow_changes": FREE,
  "train.log_every": FREE,
  "train.trackers": FREE,
  "train.wandb_project": FREE,
  "train.checkpoint_every": FREE,
  "train.keep_checkpoints": FREE,
  "train.eval_every": FREE,
  "train.scaling_file": FREE,  # read into model.position.scaling, which is compared
  "eval": FREE,
  "mesh": FREE,
  "sharding": FREE,
}
SCHEDULE_FIELDS = tuple(field for field, kind in KINDS.items() if kind == SCHEDULE)


def kind(field: str) -> str:
  """The kind of a dotted field: its longest covering entry in KINDS, else FIXED."""
  parts = field.split(".")
  for n in range(len(parts), 0, -1):
    found = KINDS.get(".".join(parts[:n]))
    if found:
      return found
  return FIXED
