"""FoX, the Forgetting Transformer (Lin et al. 2025, arXiv 2503.02130).

Each block computes a forget gate per token t and head h from its own normalized input x_t (the
hidden state it attends from), f_t = sigmoid(w_h . x_t + b_h), and logit (i, j) gets
  sum_{l=j+1..i} log f_l = c_i - c_j,   c the prefix sum of log f within each document,
so a key fades by the gates of the tokens that came after it: a data-dependent ALiBi, and the
only position signal (FoX is NoPE plus the gate, the reference's default: `use_rope=False`).
The `from_input` hook returns log f; the kernels add c_i - c_j block by block, never a T x T
table, and a KV cache keeps every token's log f (lcx/model/positions/base.py, lcx/model/decoder.py).

As the reference (zhixuan-lin/forgetting-transformer, `fgate_type="full"`): one linear map per
block from d_model to one logit per head, with a bias; the bias starts at 0 (`bias_init`: every
gate 1/2 at init), log f is taken in float32 (log-sigmoid). Its weights start as every other
projection of the model: lcx draws normal(0, 1/sqrt(d_model)), the reference its
initializer_range 0.02 for every linear map (`weight_std=0.02` gives that here).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from lcx.model.positions.base import Scheme, register


@register("fox")  # fields and their checks: lcx/model/positions/fields.py
class FoX(Scheme):
  """The forget gate's weights w_DxH and bias b_H. This instance is block 0's; `others` holds
  blocks 1.. 's (each block gates its own hidden states, as the reference)."""

  def __init__(self, *, dims, rngs, bias_init, weight_std):
    d, h = dims.d_model, dims.num_heads
    std = d**-0.5 if weight_std is None else weight_std
    self.w_DxH = nnx.Param(
      std * jax.random.normal(rngs.params(), (d, h), jnp.float32), logical_axes=("embed", "heads")
    )
    self.b_H = nnx.Param(jnp.full((h,), bias_init, jnp.float32), logical_axes=("heads",))
    one = dataclasses.replace(dims, num_layers=1)
    self.others = nnx.List(
      [
        FoX(dims=one, rngs=rngs, bias_init=bias_init, weight_std=weight_std)
        for _ in range(dims.num_layers - 1)
      ]
    )

  def for_layer(self, layer):
    return self if layer == 0 else self.others[layer - 1]

  def from_input(self, x_BxLxD, pos_BxL, seg_BxL):
    """log f_BxLxH = log sigmoid(x . w + b), float32."""
    del pos_BxL, seg_BxL  # the gates' prefix sums restart per document in the kernels' caller
    logits_BxLxH = jnp.einsum(
      "bld,dh->blh",
      x_BxLxD,
      self.w_DxH[...].astype(x_BxLxD.dtype),
      preferred_element_type=jnp.float32,
    )
    return jax.nn.log_sigmoid(logits_BxLxH + self.b_H[...][None, None])
