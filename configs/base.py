"""The default experiment: a 4-layer d=256 byte-level decoder on the Python standard library.

Usage: --config=configs/base.py[:pos=alibi,size=tiny] then --config.section.field=value.
`pos` picks the position scheme (its config sub-dict comes with every field and default),
`size` the model: tiny | small | default | large. Every field is in lcx/config/defaults.py.
"""

from lcx.config import defaults


def get_config(arg=None):
  return defaults.get_config(arg)
