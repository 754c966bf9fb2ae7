"""NoPE (Kazemnejad 2023): no positional signal at all; the causal mask alone carries order."""

from lcx.model.positions.base import Scheme, register


@register("nope")
class NoPE(Scheme):
  def __init__(self, *, dims, rngs):
    del dims, rngs
