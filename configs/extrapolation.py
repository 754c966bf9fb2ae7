"""The CPU-sized "train short, test long" run of the reproduction experiments, in three regimes.

regime=bytes (default): the CPU pilot's shape: a 0.85M-parameter byte model (size=small: 4
layers, d=128) trained at L=64 for 600 steps of 32 rows (1.2M tokens, about a minute or two on
2 cores), evaluated at 1x..32x L. RoPE keeps base 10^4, so at L=64 11 of its 16 pairs turn less
than once inside L (Llama-2 at 4k: 18 of 64), and perplexity is capped near the byte unigram's.

regime=matched: where the papers' models sit, as far as a CPU allows. A SentencePiece tokenizer
(4096 pieces) trained locally on the data's train split (books: no download beyond the corpus),
L=256, 16 rows of 256 tokens per step (600 steps: 2.5M tokens; 1.84M parameters, most in the
4096-piece embeddings). Measured side by side on a loaded machine, a step's token costs 2.5-3x a
bytes-regime token (650-1040 against 2000-2500 tokens/s), so a run costs about 5x a bytes run: an
estimated 5-10 minutes on 2 idle cores, not yet measured idle. A rotary base matched to Llama-2 at
4k (`lcx.regime.matched_base`: 194.31 at L=256, so 4 of 16 pairs turn less than once inside L). What
can be matched at each L (lcx/regime.py): the fraction of pairs under one turn at any L; p-RoPE's
dropped pairs turning about 5 radians over L (Llama-2: 4.1) at any L; YaRN's unscaled pairs
(wavelength under L/32) not below L of about 201, and only 1 of 16 at L=256 (Llama-2: 21 of 64), so
YaRN stays close to PI here. `base_len`: the L the base is matched at (0: seq_len), e.g. a fine-tune
at s*L keeps its source's.

regime=context: the first subword regime in which the models measurably use their context,
found by experiments/context_probe (issue 59), one axis at a time from the matched regime's
shape: books, SentencePiece 1024 pieces, L=128, 16 rows a step, 2000 steps (4.1M tokens; 1.05M
parameters at size=small, 6-7 minutes a run on 2 cores), a rotary base fixed at 10^4 for every
scheme that has one, evaluated at 1..16x L on 100 windows at 16x (204800 tokens a length, from
the 7 held-out books). Measured there, seed 0: RoPE's loss rises +0.364 [+0.323, +0.407] nats
from 1x to 16x while ALiBi's moves -0.009 (the issue's target: RoPE >= +0.3, ALiBi within 0.05
of flat); with 4096 pieces and 600 steps RoPE rose only +0.08. `steps` overrides the 2000.

Usage: --config=configs/extrapolation.py:pos=alibi,data=books[,regime=matched|context]. `data` is
stdlib (Python's standard library) or books (public-domain plays and novels; 15% of the works
held out: 9 documents, of which evaluation resamples 7 and the LongRoPE search's split holds 2).
"""

import dataclasses
from typing import Callable

from lcx import errors, regime
from lcx.config import defaults


@dataclasses.dataclass(frozen=True)
class Regime:
  seq_len: int
  batch_size: int
  tokenizer: str
  vocab_size: int  # sentencepiece only
  base: Callable[[int], float] | None  # L -> the rotary base; None: the scheme's default
  multipliers: tuple[int, ...]
  steps: int = 600  # the default; the `steps` config argument overrides it
  windows: int = 0  # windows scored at the longest multiplier; 0: 32768 tokens a length


def fixed_base(base: float) -> Callable[[int], float]:
  """A rotary base that does not move with L (context: the probe's 10^4 at any seq_len)."""
  return lambda _length: base


REGIMES = {
  "bytes": Regime(64, 32, "byte", 0, None, (1, 2, 4, 8, 16, 32)),
  "matched": Regime(256, 16, "sentencepiece", 4096, regime.matched_base, (1, 2, 4, 8, 16)),
  "context": Regime(
    128, 16, "sentencepiece", 1024, fixed_base(1e4), (1, 2, 4, 8, 16), steps=2000, windows=100
  ),
}


def get_config(arg=None):
  arg = defaults.parse_arg(
    arg, pos="rope", data="books", steps=0, seq_len=0, size="small", regime="bytes", base_len=0
  )
  if arg.regime not in REGIMES:
    raise errors.not_allowed("config argument regime", arg.regime, REGIMES)
  r = REGIMES[arg.regime]
  config = defaults.get_config(f"pos={arg.pos},size={arg.size}")
  config.data.name = arg.data
  if arg.data == "books":
    config.data.validation_fraction = 0.15
  config.data.seq_len = arg.seq_len or r.seq_len
  config.data.batch_size = r.batch_size
  config.data.tokenizer = r.tokenizer
  if r.vocab_size:
    config.data.vocab_size = r.vocab_size
  if r.base is not None and "base" in config.model.position:
    config.model.position.base = r.base(arg.base_len or config.data.seq_len)
  config.train.steps = arg.steps or r.steps
  config.train.warmup_steps = 100
  config.train.log_every = 100
  config.train.checkpoint_every = 200
  config.eval.multipliers = r.multipliers
  config.eval.num_tokens = r.windows * r.multipliers[-1] * config.data.seq_len or 32768
  config.eval.batch_tokens = 32768
  return config
