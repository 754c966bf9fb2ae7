"""`model.attention.impl=auto` never picks a kernel that cannot lower on the platform it runs on:
a whole multi-head GQA model, built as on that platform (jax.default_backend() reports it), lowers
its gradient for cpu, cuda (the Triton kernel) and tpu (the Mosaic one) here on CPU. `pallas`
where the kernel cannot lower is refused with the field named, before anything compiles."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from lcx.model import attention, decoder as model
from lcx.model.kernels import flash, impl
from tests.helpers import tiny_config

T = 256
# lowering platform -> what jax.default_backend() says there
PLATFORMS = {"cpu": "cpu", "cuda": "gpu", "tpu": "tpu"}


def _as_on(monkeypatch, platform: str) -> None:
  monkeypatch.setattr(jax, "default_backend", lambda: PLATFORMS[platform])
  monkeypatch.setattr(flash.jax, "default_backend", lambda: PLATFORMS[platform])


def _lowered_model_grad(cfg, platform: str) -> str:
  graphdef, params = nnx.split(model.Decoder(cfg, rngs=nnx.Rngs(0)), nnx.Param)
  tokens_BxT = jnp.zeros((2, T), jnp.int32)
  seg_BxT = jnp.ones((2, T), jnp.int32)

  def loss(params):
    logits = nnx.merge(graphdef, params)(tokens_BxT, attention.document_index(seg_BxT), seg_BxT)
    return logits.astype(jnp.float32).mean()

  return jax.jit(jax.grad(loss)).trace(params).lower(lowering_platforms=(platform,)).as_text()


def _gqa_config(pos: str):
  cfg = tiny_config(pos).model
  cfg.vocab_size, cfg.max_len, cfg.num_heads, cfg.num_kv_heads = 64, T, 4, 2
  return cfg


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
@pytest.mark.parametrize("pos", ["alibi", "rope"])
def test_auto_lowers_a_multi_head_gqa_model_on_every_platform(monkeypatch, platform, pos):
  _as_on(monkeypatch, platform)
  cfg = _gqa_config(pos)
  assert cfg.attention.impl == "auto"
  hlo = _lowered_model_grad(cfg, platform)
  assert ("__gpu$xla.gpu.triton" in hlo) == (platform == "cuda")  # the Triton kernel on a GPU
  # On a TPU, auto keeps XLA until a TPU device check has compiled the Mosaic kernel there
  # (impl=pallas runs it: test_pallas_runs_on_a_tpu_...).
  assert "tpu_custom_call" not in hlo


def test_pallas_runs_on_a_tpu_and_is_refused_only_for_a_blocked_scheme(monkeypatch):
  """impl=pallas on a TPU runs the Mosaic kernel (tests/model/kernels/test_mosaic.py lowers
  every scheme); a scheme whose bias it cannot lower (FIRE's MLP) is refused, field named."""
  _as_on(monkeypatch, "tpu")
  cfg = _gqa_config("alibi")
  cfg.attention.impl = "pallas"
  impl.check_impl(cfg)
  assert "tpu_custom_call" in _lowered_model_grad(cfg, "tpu")
  fire = _gqa_config("fire")
  fire.attention.impl = "pallas"
  with pytest.raises(ValueError, match=r"model.attention.impl='pallas'.*'fire' on a TPU"):
    impl.check_impl(fire)
  impl.check_impl(fire, "cpu")  # interpret mode runs any hook
