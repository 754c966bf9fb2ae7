"""The config's defaults, built from the fields' records (lcx/config/fields.py): a 4-layer d=256
byte-level decoder on the Python standard library. `configs/base.py:pos=alibi,size=tiny` is
`get_config("pos=alibi,size=tiny")`; the package builds its own configs here (never from the
top-level `configs/`), so an installed lcx works from any directory. `pos` picks the position
scheme, so its config sub-dict comes with every field and default; `size` sets the widths.
"""

import ml_collections

from lcx import errors
from lcx.config import fields
from lcx.model import patterns
from lcx.model.positions import fields as position_fields  # the schemes' and remaps'

# Sections picked whole by name, replaced by that name's fields and defaults: on the command line
# (`--config.model.remap.name=X`, lcx.cli.select_sections) and by a variant (lcx.config.variants).
SECTIONS = {
  "model.remap": position_fields.remap_config,
  "model.attention.pattern": patterns.default_config,
}

SIZES = {  # d_model, num_layers, num_heads, mlp_dim
  "tiny": (64, 2, 4, 256),
  "small": (128, 4, 4, 512),
  "default": (256, 4, 4, 1024),
  "large": (512, 8, 8, 2048),
}


def parse_arg(arg, **defaults):
  """'pos=alibi,size=small' -> ConfigDict over `defaults`; unknown keys fail loudly."""
  out = ml_collections.ConfigDict(defaults)
  for kv in filter(None, (arg or "").split(",")):
    key, _, value = kv.partition("=")
    if key not in defaults:
      raise errors.unknown_field(f"config argument {key}", defaults)
    out[key] = type(defaults[key])(value)
  return out


def get_config(arg=None):
  """The defaults, every field's from its record (lcx/config/fields.py's CONFIG), with the size
  preset and the position scheme of `arg` ('pos=alibi,size=small') on top."""
  arg = parse_arg(arg, pos="rope", size="default")
  if arg.size not in SIZES:
    raise errors.not_allowed("config argument size", arg.size, SIZES)
  d_model, num_layers, num_heads, mlp_dim = SIZES[arg.size]
  config = fields.CONFIG.to_config()
  m = config.model
  m.d_model, m.num_layers, m.num_heads, m.num_kv_heads = d_model, num_layers, num_heads, num_heads
  m.head_dim, m.mlp_dim = d_model // num_heads, mlp_dim
  m.max_len = config.data.get_ref("seq_len")  # the training length L follows data.seq_len
  m.position = position_fields.default_config(arg.pos)
  return config


def quickstart_config(arg=None):
  """A 0.8M-parameter byte model (the CPU pilot's shape) trained at L=64 for a few minutes on
  2 CPU cores; `pos` picks the scheme, `steps` the training steps, `size` the model (the
  notebooks' tests train tiny ones)."""
  arg = parse_arg(arg, pos="rope", steps=300, size="small")
  config = get_config(f"pos={arg.pos},size={arg.size}")
  config.data.seq_len = 64
  config.data.batch_size = 32
  config.train.steps = arg.steps
  config.train.warmup_steps = 50
  config.train.log_every = 50
  config.train.checkpoint_every = 100
  config.eval.num_tokens = 32768
  return config
