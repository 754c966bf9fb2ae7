"""The CPU-sized "train short, test long" run of the reproduction experiments.

The CPU pilot's shape: a 0.85M-parameter byte model (size=small: 4
layers, d=128) trained at L=64 for 600 steps of 32 rows (1.2M tokens, about a minute or two on
2 cores), evaluated at 1x..32x L. Usage: --config=configs/extrapolation.py:pos=alibi,data=books
`data` is stdlib (Python's standard library) or books (public-domain plays and novels; 15% of
the works held out, so the intervals have ~12 documents to resample).
"""

from lcx import defaults


def get_config(arg=None):
  arg = defaults.parse_arg(arg, pos="rope", data="books", steps=600, seq_len=64, size="small")
  config = defaults.get_config(f"pos={arg.pos},size={arg.size}")
  config.data.name = arg.data
  if arg.data == "books":
    config.data.validation_fraction = 0.15
  config.data.seq_len = arg.seq_len
  config.data.batch_size = 32
  config.train.steps = arg.steps
  config.train.warmup_steps = 100
  config.train.log_every = 100
  config.train.checkpoint_every = 200
  config.eval.multipliers = (1, 2, 4, 8, 16, 32)
  config.eval.num_tokens = 32768
  config.eval.batch_tokens = 32768
  return config
