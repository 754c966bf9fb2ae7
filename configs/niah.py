"""Needle retrieval past the training length: a byte model trained on the NIAH mix (RULER's
multi-key, multi-query and multi-value variants, `lcx/data/tasks/retrieval.py`), tested on
each variant.

Training documents hold 1..max_len filler sentences (max_len=8: up to 207 tokens) with two
needles; evaluation draws up to 4x as many (buckets 1-8, 9-16, 17-32 sentences). Variants
`multikey`, `multiquery` and `multivalue` test one NIAH variant each; for a rotary scheme also
`multikey_yarn` ... (YaRN with factor `yarn`, training-free), and for any scheme
`multikey_beta_fit` ... (DroPE's temperature with C fitted per task, `beta@fit`; not evaluated
unless eval.variants names them). Usage:
--config=configs/niah.py:pos=rope,size=small
"""

from lcx.config import defaults
from lcx.data import tasks

NIAH = ("multikey", "multiquery", "multivalue")


def get_config(arg=None):
  arg = defaults.parse_arg(arg, pos="rope", size="small", steps=1500, max_len=8, yarn=4.0)
  config = defaults.get_config(f"pos={arg.pos},size={arg.size}")
  config.data.update(
    name="task",
    task="niah",
    task_min_len=1,
    task_max_len=arg.max_len,
    task_eval_factor=4,
    task_eval_examples=384,
    batch_size=32,
  )
  config.data.seq_len = tasks.document_tokens("niah", arg.max_len)
  config.train.update(
    steps=arg.steps, warmup_steps=100, lr=3e-3, log_every=100, checkpoint_every=500
  )
  named = {kind: {"data": {"task": f"niah_{kind}"}} for kind in NIAH}
  if "scaling" in config.model.position:  # a rotary scheme
    yarn = {"rope_type": "yarn", "factor": float(arg.yarn)}
    for kind in NIAH:
      named[f"{kind}_yarn"] = {**named[kind], "model": {"position": {"scaling": yarn}}}
  evaluated = list(named)
  for kind in NIAH:  # DroPE's temperature fitted per task (beta@fit), for the variants that ask
    named[f"{kind}_beta_fit"] = {**named[kind], "eval": {"beta_fit": {"fitted": True}}}
  config.eval.named_variants = named
  config.eval.variants = ",".join(evaluated)
  return config
