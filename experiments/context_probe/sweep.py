"""Context probe (issue 59 item 1): find, by measurement, the cheapest subword regime in which
the models lean on their context, so that "train short, test long" can show the papers' effect.

The target: RoPE's loss rises at least 0.3 nats from 1x to 16x L while ALiBi stays within 0.05
of flat. Each run is RoPE or ALiBi with a SentencePiece tokenizer, seed 0, moving one axis at a time
from a cheap start (L = 128, 600 steps of 16 rows, size small, RoPE base 10^4, books, 4096
pieces): the corpus (the Python standard library's source, code, whose models copy from their
context and whose held-out split holds hundreds of windows at 16x where books' 7 documents hold
21), the vocabulary (1024 pieces), the steps (2000), L (256), the rotary base (matched to
Llama-2's proportions) and the model size (default). Every run scores 1x..16x L on 100
windows a length where the held-out split has them (fewer are reported, never hidden), records
loss by position inside L, and scores 1x and 16x every 200 steps during training, so the
report shows how 16x - 1x grows as training goes on.

`./launch.sh sweep experiments/context_probe` (CPU; resumable: cheapest runs first), or
`experiments/context_probe:full` (GPU: the default model, L = 256, 4000 steps, on books and on code,
RoPE at both bases and ALiBi; `--shard=i/SHARDS`, each within a lent GPU's 8 minutes by
tests/test_experiments.py's estimate).
"""

from typing import NamedTuple

from lcx import errors, regime
from lcx.tools.sweep import Run

MULTIPLIERS = (1, 2, 4, 8, 16)
WINDOWS = 100  # windows scored at every length (issue 59 item 3), where the split holds them
ROPE_BASE = 10000.0


class Row(NamedTuple):
  pos: str
  seq_len: int = 128
  steps: int = 600
  size: str = "small"
  base: float | str | None = ROPE_BASE  # a rotary base, "matched" (Llama-2's proportions), None
  data: str = "books"  # books | stdlib (the Python standard library's source: code)
  vocab: int | None = None  # SentencePiece pieces; None: the matched regime's 4096
  seed: int = 0


# Cheapest first; a row's name says what moved from the first (RoPE, base 10^4, L = 128, books,
# 4096 pieces, 600 steps, size small).
ROWS = {
  "rope-b1e4-L128": Row("rope"),
  "alibi-L128": Row("alibi", base=None),
  "rope-b1e4-L128-stdlib": Row("rope", data="stdlib"),
  "alibi-L128-stdlib": Row("alibi", base=None, data="stdlib"),
  "rope-b1e4-L128-v1024-2000": Row("rope", vocab=1024, steps=2000),
  "alibi-L128-v1024-2000": Row("alibi", base=None, vocab=1024, steps=2000),
  # The first row to meet the target, at seeds 1 and 2 (the target is a mean of three seeds).
  **{
    f"{name}-s{seed}": Row(pos, base=base, vocab=1024, steps=2000, seed=seed)
    for seed in (1, 2)
    for name, pos, base in (
      ("rope-b1e4-L128-v1024-2000", "rope", ROPE_BASE),
      ("alibi-L128-v1024-2000", "alibi", None),
    )
  },
  "rope-b1e4-L128-stdlib-2000": Row("rope", data="stdlib", steps=2000),
  "alibi-L128-stdlib-2000": Row("alibi", base=None, data="stdlib", steps=2000),
  "rope-b1e4-L256": Row("rope", seq_len=256),
  "alibi-L256": Row("alibi", seq_len=256, base=None),
  "rope-matched-L128": Row("rope", base="matched"),
  "rope-b1e4-L128-default": Row("rope", size="default"),
  "alibi-L128-default": Row("alibi", size="default", base=None),
}


# :full, one lent GPU: the CPU's axes at the size the papers' curves need more steps for.
FULL_ROWS = {
  f"{name}-{data}": Row(pos, seq_len=256, steps=4000, size="default", base=base, data=data)
  for data in ("books", "stdlib")
  for name, pos, base in (
    ("rope-b1e4", "rope", ROPE_BASE),
    ("rope-matched", "rope", "matched"),
    ("alibi", "alibi", None),
  )
}
SHARDS = 3  # :full: 2 runs a shard, about 310 s each by the estimate in tests/test_experiments.py


def get_runs(arg=""):
  if arg not in ("", "full"):
    raise errors.not_allowed("experiments/context_probe:ARG", arg, ['""', "full"])
  runs = {}
  for name, row in (FULL_ROWS if arg == "full" else ROWS).items():
    overrides = {
      "seed": row.seed,
      "eval.multipliers": MULTIPLIERS,
      "eval.variants": "none",
      "eval.num_tokens": WINDOWS * MULTIPLIERS[-1] * row.seq_len,
      "eval.batch_tokens": MULTIPLIERS[-1] * row.seq_len * 4,
      "train.eval_every": 200,
      "eval.during_train": (1, 16),
      "eval.during_train_tokens": 8 * 16 * row.seq_len,
    }
    if row.vocab is not None:
      overrides["data.vocab_size"] = row.vocab
    if row.base == "matched":
      overrides["model.position.base"] = regime.matched_base(row.seq_len)
    elif row.base is not None:
      overrides["model.position.base"] = row.base
    runs[name] = Run(
      f"configs/extrapolation.py:pos={row.pos},data={row.data},regime=matched,steps={row.steps},"
      f"seq_len={row.seq_len},size={row.size}",
      overrides,
    )
  return runs
