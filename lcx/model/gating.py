"""Gated attention (Qiu et al. 2025, 2505.06708): the attention output of each head times a
sigmoid gate computed from the block's (normalized) input, before the output projection.

The paper's best variant (G1: after the attention, elementwise, head-specific, multiplicative,
sigmoid) is `elementwise`: one gate per head and feature, sigmoid(x W_g), W_g of shape
d_model x heads x head_dim (Qwen3-Next's shape). `headwise` is its cheaper variant, one gate
per head (W_g d_model x heads). The gate lets a head output (near) nothing, so it no longer
needs a sink token to park its attention on; it is input-dependent and sparse. Trained field
`model.attention.gate`: none | elementwise | headwise.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from lcx.model import options


@dataclasses.dataclass(frozen=True)
class Gate:
  """`per_head`: the gate's shape per head, () or (head_dim,) as `head_dim` (resolved in
  `shape`); `equation`: x_BxLxD, W_g -> gate logits BxHxL(xE)."""

  per_head: tuple[str, ...]
  equation: str


GATES = {
  "elementwise": Gate(("head_dim",), "bld,dhk->bhlk"),
  "headwise": Gate((), "bld,dh->bhl"),
}
KINDS = options.GATES  # ("none", *GATES), declared where the field is checked before jax


def shape(kind: str, d_model: int, num_heads: int, head_dim: int) -> tuple[int, ...]:
  """W_g's shape; its logical axes are ("embed", "heads", *per_head)."""
  return (d_model, num_heads, *(head_dim for _ in GATES[kind].per_head))


def apply(kind: str, out_BxHxLxE: jax.Array, x_BxLxD: jax.Array, w_g) -> jax.Array:
  """out times sigmoid(x W_g), in float32, cast back to out's dtype."""
  logits = jnp.einsum(GATES[kind].equation, x_BxLxD, w_g.astype(x_BxLxD.dtype))
  gate = jax.nn.sigmoid(logits.astype(jnp.float32))
  gate_BxHxLxE = gate if gate.ndim == 4 else gate[..., None]
  return (out_BxHxLxE.astype(jnp.float32) * gate_BxHxLxE).astype(out_BxHxLxE.dtype)
