"""The flash kernel lowers for CUDA through Triton, checked on CPU (no GPU needed): jax lowers
the Pallas kernels to Triton IR in Python, where an op Triton lacks (a gather, a 3-D matmul)
fails. Every scheme with a `bias` lowers, forward and backward, exactly when it declares no
`gpu_kernel_blocker`; so `impl=auto` never picks a kernel that cannot compile on a GPU, and a
hook made Triton-friendly is told to drop its blocker. A whole model lowers too."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from lcx.model import attention, decoder as model, positions
from lcx.model.kernels import flash, impl
from lcx.model.positions import base, remaps
from tests.helpers import schemes_with, tiny_config

B, T, H, G, E = 1, 384, 4, 2, 64  # 3 blocks of 128 (not a power of two), GQA, Triton-sized E
DIMS = positions.Dims(d_model=H * E, num_heads=H, head_dim=E, max_len=T)


def _lowered_for_cuda(fn, *args) -> str:
  return jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


def _attention_grad_hlo(name: str, remap: str = "none", **fields) -> str:
  cfg = positions.default_config(name)
  for field, value in fields.items():
    cfg[field] = value
  scheme = positions.build(cfg, DIMS, rngs=nnx.Rngs(0))
  remap_fn = remaps.build(remaps.default_config(remap), DIMS)
  graphdef, state = nnx.split(scheme)
  pos_BxT = jnp.broadcast_to(jnp.arange(T), (B, T))
  seg_BxT = jnp.where(jnp.arange(T) < 200, 1, 2)[None]  # two documents

  def loss(q, k, v, sink_H, state):
    s = nnx.merge(graphdef, state)
    plan = attention.prepare_chunked(pos_BxT, seg_BxT, scheme=s, remap=remap_fn)
    out = flash.flash_attention(
      attention.rotate(q, k, plan, s),
      v,
      plan.branches,
      plan.pos_BxT,
      plan.seg_BxT,
      plan.doc_BxT,
      scheme=s,
      sink_H=sink_H,
      backend="gpu",
    )
    return out.astype(jnp.float32).sum()

  bf16 = functools.partial(jnp.ones, dtype=jnp.bfloat16)
  args = (bf16((B, T, H, E)), bf16((B, T, G, E)), bf16((B, G, T, E)), jnp.zeros((H,)), state)
  return _lowered_for_cuda(jax.grad(loss, argnums=(0, 1, 2, 3, 4)), *args)


@pytest.mark.parametrize("name", ["nope", *schemes_with("bias")])
def test_a_bias_lowers_to_triton_unless_the_scheme_says_why_not(name):
  blocker = base.gpu_kernel_blocker(name)
  if blocker is None:
    hlo = _attention_grad_hlo(name)
    assert hlo.count("__gpu$xla.gpu.triton") >= 3  # forward, dq, dk/dv: Triton, not Mosaic GPU
  else:
    with pytest.raises(Exception):  # noqa: B017 (any lowering error: the blocker still holds)
      _attention_grad_hlo(name)
    cfg = tiny_config(name).model
    assert impl.resolve_impl(cfg, "gpu") == "xla"
    assert impl.resolve_impl(cfg, "cpu") == "xla"
    cfg.attention.impl = "pallas"
    with pytest.raises(ValueError, match="model.attention.impl.*on a GPU"):
      impl.check_impl(cfg, "gpu")
    impl.check_impl(cfg, "cpu")  # interpret mode runs any hook


@pytest.mark.parametrize(
  "name, fields, message",
  [
    ("t5", {"num_buckets": 20}, "num_buckets=20 makes the bucket table 20 long"),
    ("sandwich", {"dim": 96}, "dim=96 makes its frequencies 48 long"),
  ],
)
def test_a_field_value_triton_cannot_lower_keeps_the_scheme_off_the_gpu_kernel(
  name, fields, message
):
  """Triton's arrays have power-of-two sizes: a T5 table or Sandwich frequencies of another
  size fail to lower, so the scheme's blocker names the field (auto: xla on a GPU; pallas: an
  error naming model.attention.impl and the field); the default values lower (above)."""
  with pytest.raises(ValueError, match="power of 2"):
    _attention_grad_hlo(name, **fields)
  cfg = tiny_config(name).model
  for field, value in fields.items():
    cfg.position[field] = value
  assert message in base.gpu_kernel_blocker(name, cfg.position)
  assert impl.resolve_impl(cfg, "gpu") == "xla"
  cfg.attention.impl = "pallas"
  with pytest.raises(ValueError, match=f"model.attention.impl.*on a GPU.*model.position.{message}"):
    impl.check_impl(cfg, "gpu")
  impl.check_impl(cfg, "cpu")  # interpret mode runs any size


def test_a_bidirectional_t5_table_lowers_to_triton():
  """Buckets for both signs of the distance: the lookup loops over those a block holds."""
  hlo = _attention_grad_hlo("t5", bidirectional=True)
  assert hlo.count("__gpu$xla.gpu.triton") >= 3


@pytest.mark.parametrize("name", ["rope", "t5", "sandwich"])
def test_a_two_branch_remap_lowers_to_triton(name):
  """Self-Extend's two (q, k) pairs, merged by their `use` masks inside the kernel; T5's
  lookup and Sandwich's dots on each branch's (grouped) positions."""
  assert _attention_grad_hlo(name, "self_extend").count("__gpu$xla.gpu.triton") >= 3


def test_a_whole_model_with_pallas_lowers_for_cuda(monkeypatch):
  """Sink, GQA and the log-n temperature around the kernel; the gradient of every parameter."""
  monkeypatch.setattr(flash.jax, "default_backend", lambda: "gpu")  # what impl=auto consults
  cfg = tiny_config("alibi").model
  cfg.vocab_size, cfg.max_len, cfg.num_kv_heads = 64, T, 1
  cfg.attention.sink, cfg.attention.temperature = "learned", "log_n"
  assert impl.resolve_impl(cfg) == "pallas"
  graphdef, params = nnx.split(model.Decoder(cfg, rngs=nnx.Rngs(0)), nnx.Param)
  tokens_BxT = jnp.zeros((2, T), jnp.int32)
  seg_BxT = jnp.ones((2, T), jnp.int32)

  def loss(params):
    logits = nnx.merge(graphdef, params)(tokens_BxT, attention.document_index(seg_BxT), seg_BxT)
    return logits.astype(jnp.float32).mean()

  assert "__gpu$xla.gpu.triton" in _lowered_for_cuda(jax.grad(loss), params)


TABLE_SCHEMES = sorted(n for n in schemes_with("bias") if positions.spec(n).cls.bias_of_distance)


@pytest.mark.parametrize("remap", ["none", "self_extend"])
@pytest.mark.parametrize("name", TABLE_SCHEMES)
def test_a_distance_table_lowers_to_triton(name, remap):
  """A distance-only bias goes in as a table the kernels index at q - k (a gather from head
  h's row, which Triton lowers as pointer offsets) and, in the dq kernel, the table's
  Jacobian: three table kernels beside the three hook kernels that positions past the table
  take (`lax.cond`), one branch or Self-Extend's two."""
  assert _attention_grad_hlo(name, remap).count("__gpu$xla.gpu.triton") == 6
