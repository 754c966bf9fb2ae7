"""The TPU flash kernel (lcx/model/kernels/mosaic.py). In interpret mode on CPU it equals the XLA
dense path in values and gradients: each scheme (the distance table and the hook), Self-Extend's
two branches, a sparse pattern, packed documents crossing block edges, GQA, the sink, FoX's prefix
sums. Lowered for TPU here on CPU (jax's Mosaic lowering, which applies the (8, 128) block rule),
every scheme's whole GQA model runs it under impl=auto exactly when the scheme declares no
`tpu_kernel_blocker`; a blocked one is refused under impl=pallas with the field named."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.model import attention, patterns, positions
from lcx.model.kernels import flash, impl, mosaic, reference
from lcx.model.positions import base, remaps
from tests.helpers import tiny_config
from tests.model.kernels.test_flash import DIMS, TOL, _compare, _inputs
from tests.model.kernels.test_platform_lowering import _as_on, _gqa_config, _lowered_model_grad

TPU = "tpu"
MOSAIC = "tpu_custom_call"  # a Mosaic kernel in the lowered program
KERNEL_SCHEMES = sorted(
  n for n in positions.SCHEMES if impl.unsupported(tiny_config(n).model, "cpu") is None
)


@pytest.mark.parametrize("name", ["nope", "rope", "alibi", "t5", "kerple_log", "fire"])
def test_a_scheme_in_the_tpu_kernel_equals_dense(name):
  """GQA, a learned sink, two documents a row (the second starts inside a block); a bias from
  the distance table (ALiBi, T5, KERPLE) or from the hook on each block (FIRE)."""
  _compare(name, platform=TPU)


@pytest.mark.parametrize("name", ["alibi", "t5"])
def test_positions_past_the_table_take_the_hook_in_the_tpu_kernel(name):
  _compare(name, inputs=_inputs(stretch=4), table=False, platform=TPU)


def test_self_extends_two_branches_merge_in_the_tpu_kernel():
  _compare("rope", remap="self_extend", fields={"window": 5, "group": 2}, platform=TPU)


def test_a_sliding_window_skips_and_masks_in_the_tpu_kernel():
  """The window's block range (`flash_plan._window`): key blocks before it run nothing."""
  cfg = patterns.default_config("sliding_window")
  cfg.window = 4
  _compare("alibi", pattern=patterns.build(cfg), platform=TPU)


def test_fox_prefix_sums_in_the_tpu_kernel_equal_the_reference():
  """c_i - c_j from the query and key blocks' rows; the gradient in c too (the dq kernel's row
  sums of dS, the dk/dv kernel's column sums), and in q, k, v and the sink."""
  scheme = positions.build(positions.default_config("nope"), DIMS, rngs=nnx.Rngs(0))
  remap_fn = remaps.build(remaps.default_config("none"), DIMS)
  x = _inputs(4)
  a_BxTxH = -jax.nn.softplus(jax.random.normal(jax.random.key(5), x["q"].shape[:3]))
  prefix_BxTxH = attention.document_cumsum(a_BxTxH, x["seg"])
  plan = attention.prepare_chunked(x["pos"], x["seg"], scheme=scheme, remap=remap_fn)

  def loss(fn, q, k, v, sink, prefix, **kw):
    args = ([(q, k)], v, plan.branches, x["pos"], x["seg"], plan.doc_BxT)
    out = fn(*args, scheme=scheme, sink_H=sink, prefix_BxSxH=prefix, **kw)
    return jnp.sum(out * x["w"])

  inputs = (x["q"], x["k"], x["v"], x["sink"], prefix_BxTxH)
  grad = jax.value_and_grad(loss, argnums=(1, 2, 3, 4, 5))
  want = jax.jit(lambda *a: grad(reference.attention_reference, *a))(*inputs)
  got = jax.jit(lambda *a: grad(mosaic.mosaic_attention, *a, block_q=16, block_k=8))(*inputs)
  for w, g in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
    assert np.abs(np.asarray(w)).max() > 0
    np.testing.assert_allclose(g, w, **TOL)


def _mosaic_calls(cfg) -> int:
  """Mosaic calls in the model's gradient lowered for TPU under impl=pallas (auto keeps XLA
  on a TPU until a TPU device check: impl.AUTO_PLATFORMS)."""
  cfg.attention.impl = "pallas"
  return _lowered_model_grad(cfg, TPU).count(MOSAIC)


@pytest.mark.parametrize("name", KERNEL_SCHEMES)
def test_every_kernel_scheme_runs_the_mosaic_kernel_on_a_tpu_unless_it_says_why_not(
  monkeypatch, name
):
  """A 2-layer GQA model's gradient, lowered for TPU: forward, dq and dk/dv are Mosaic calls
  in every layer (twice for a table scheme: the hook kernels positions past the table take)
  under impl=pallas; auto keeps XLA on a TPU until a TPU device check (impl.AUTO_PLATFORMS).
  A scheme with a `tpu_kernel_blocker` still fails to lower (else the blocker should go), and
  is refused under pallas."""
  _as_on(monkeypatch, TPU)
  cfg = _gqa_config(name)
  assert impl.resolve_impl(cfg) == "xla"
  blocker = base.tpu_kernel_blocker(name)
  if blocker is None:
    cfg.attention.impl = "pallas"
    assert impl.resolve_impl(cfg) == "pallas"
    impl.check_impl(cfg)
    calls = 3 * cfg.num_layers * (2 if positions.spec(name).cls.bias_of_distance else 1)
    assert _mosaic_calls(cfg) == calls
    return
  assert MOSAIC not in _lowered_model_grad(cfg, TPU)
  cfg.attention.impl = "pallas"
  with pytest.raises(ValueError, match=f"model.attention.impl='pallas'.*on a TPU.*{blocker[:20]}"):
    impl.check_impl(cfg)
  with pytest.raises(Exception):  # noqa: B017 (any lowering error: the blocker still holds)
    _lowered_model_grad(cfg, TPU)


def test_a_model_with_sink_temperature_and_window_lowers_for_tpu(monkeypatch):
  """A learned sink (SMEM, per head), the log-n temperature on q, a sliding window's block
  ranges in the index maps, packed documents: all in the Mosaic kernels."""
  _as_on(monkeypatch, TPU)
  cfg = _gqa_config("alibi")
  cfg.attention.sink, cfg.attention.temperature = "learned", "log_n"
  cfg.attention.pattern = patterns.default_config("sliding_window")
  cfg.attention.pattern.window = 64
  assert _mosaic_calls(cfg) == 3 * cfg.num_layers * 2


def test_the_gpu_kernel_does_not_lower_for_tpu(monkeypatch):
  """Why a TPU has its own kernel (`impl.KERNELS`): the Triton kernel's blocks, one head of a
  token-major array, break Mosaic's block rule for any model."""
  _as_on(monkeypatch, TPU)
  monkeypatch.setattr(impl, "KERNELS", {})
  cfg = _gqa_config("rope")
  cfg.attention.impl = "pallas"
  with pytest.raises(ValueError, match="Pallas TPU lowering"):
    _lowered_model_grad(cfg, TPU)


def test_tpu_blocks_are_at_least_a_lane_row_of_128(monkeypatch):
  """A key block's row (positions, segments) is a block's lane dimension: smaller blocks than
  128 do not lower, so on a TPU `block_size` 64 runs 128-token blocks (T = 256: two)."""
  _as_on(monkeypatch, TPU)
  seen = []
  real = mosaic._forward

  def spy(st, diff, nondiff):
    seen.append((st.block_q, st.block_k, diff[0][0].shape[1]))
    return real(st, diff, nondiff)

  monkeypatch.setattr(mosaic, "_forward", spy)
  cfg = _gqa_config("rope")
  cfg.attention.block_size = 64
  assert _mosaic_calls(cfg) > 0
  assert set(seen) == {(128, 128, 256)}
  assert flash.BLOCK >= mosaic.LANES


def test_a_table_past_tpu_table_half_gives_way_to_the_hook(monkeypatch):
  """Head h's whole table row is a VMEM block: past `TABLE_HALF` (here 128, below T = 256's
  256) only the hook kernels lower, three a layer, not six."""
  _as_on(monkeypatch, TPU)
  cfg = _gqa_config("alibi")
  monkeypatch.setattr(mosaic, "TABLE_HALF", 128)
  assert _mosaic_calls(cfg) == 3 * cfg.num_layers
