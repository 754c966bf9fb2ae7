"""Flip-flop language modelling (Liu et al. 2023) at PaTH's Table 1 size: 1 layer, 2 heads,
64 dimensions, trained on FFL(p_i=0.8) sequences of the paper's 512 tokens (256 instructions),
tested on the training mix (`none`) and on the sparse (p_i=0.98) and dense (p_i=0.1) mixes
(variants `sparse`, `dense`). The figure is `error_rate` on the read bits. `factor` > 1 also
tests longer sequences (up to factor x 256 instructions). Usage:
--config=configs/flip_flop.py:pos=rope
"""

from lcx.config import defaults
from lcx.data import tasks


def get_config(arg=None):
  arg = defaults.parse_arg(arg, pos="rope", steps=10000, length=256, factor=1)
  config = defaults.get_config(f"pos={arg.pos},size=tiny")
  config.model.update(num_layers=1, num_heads=2, num_kv_heads=2, head_dim=32)
  config.data.update(
    name="task",
    task="flip_flop",
    task_min_len=arg.length,
    task_max_len=arg.length,
    task_eval_factor=arg.factor,
    task_eval_examples=512,
    batch_size=16,
  )
  config.data.seq_len = tasks.document_tokens("flip_flop", arg.length) - 1
  config.train.update(
    steps=arg.steps, warmup_steps=200, lr=3e-3, log_every=100, checkpoint_every=1000
  )
  named = {
    "sparse": {"data": {"task": "flip_flop_sparse"}},
    "dense": {"data": {"task": "flip_flop_dense"}},
  }
  config.eval.named_variants = named
  config.eval.variants = "none," + ",".join(named)
  return config
