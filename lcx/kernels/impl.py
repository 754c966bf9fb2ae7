"""`model.attention.impl`: which attention implementation a model runs.

auto    the Pallas kernel on GPU and TPU, the XLA kernels (lcx.attention) on CPU; a model
        the kernel cannot run (CoPE's contextual hook, FoX's input hook, PaTH's Householders,
        stick-breaking attention) falls back to XLA
xla     lcx.attention's dense and chunked kernels, everywhere
pallas  `flash.flash_attention` for training and evaluation (interpret mode on CPU: exact,
        slow, for tests); generation's cached steps stay on the XLA path
"""

from __future__ import annotations

import functools

import jax

from lcx import attention, config, errors
from lcx.kernels import flash
from lcx.positions import base as positions_base

FIELD = "model.attention.impl"
ACCELERATORS = ("gpu", "cuda", "rocm", "tpu")  # jax.default_backend() names


# model.attention.impl's values and block_size's test, declared where lcx.config checks them.
IMPLS, is_block_size = config.IMPLS, config.is_block_size


def unsupported(model_cfg) -> str | None:
  """Why the Pallas kernel cannot run this model (a field and its value), or None."""
  if model_cfg.attention.kind != "softmax":
    return f"model.attention.kind={model_cfg.attention.kind!r}"
  if positions_base.is_contextual(model_cfg.position.name):
    return f"model.position.name={model_cfg.position.name!r} (a contextual hook)"
  if positions_base.has_householder(model_cfg.position.name):
    return f"model.position.name={model_cfg.position.name!r} (Householder transforms, PaTH)"
  if positions_base.reads_input(model_cfg.position.name):
    return f"model.position.name={model_cfg.position.name!r} (a bias from hidden states)"
  if model_cfg.attention.get("temperature") == "scale_invariant":
    return "model.attention.temperature='scale_invariant' (a (scale, shift) logit transform)"
  return None


def check_impl(model_cfg) -> None:
  """Raises ValueError naming the field for `pallas` with a model the kernel cannot run (the
  values themselves are checked with the other options, lcx.config.OPTIONS)."""
  impl = model_cfg.attention.get("impl", "auto")
  why = unsupported(model_cfg)
  if impl == "pallas" and why:
    raise errors.not_allowed(FIELD, impl, f"auto, xla (the Pallas kernel does not run {why})")


def resolve_impl(model_cfg, backend: str | None = None) -> str:
  """`xla` or `pallas`: what `auto` means on `backend` (default: jax's) for this model."""
  impl = model_cfg.attention.get("impl", "auto")
  if impl != "auto":
    return impl
  backend = jax.default_backend() if backend is None else backend
  return "pallas" if backend in ACCELERATORS and unsupported(model_cfg) is None else "xla"


def attend_flash(q_BxTxHxE, k_BxTxGxE, v_BxGxTxE, plan, *, scheme, sink_H=None, block=flash.BLOCK):
  """An `attention.Kernel.attend` over a chunked plan: rotate per branch, then the kernel."""
  if scheme.contextual is not None:
    raise ValueError(f"{FIELD}='pallas' cannot run a scheme with a contextual hook (CoPE)")
  return flash.flash_attention(
    attention._rotated(q_BxTxHxE, k_BxTxGxE, plan, scheme),
    v_BxGxTxE,
    plan.branches,
    plan.pos_BxT,
    plan.seg_BxT,
    plan.doc_BxT,
    scheme=scheme,
    pattern=plan.extras["pattern"],
    sink_H=sink_H,
    block_q=block,
    block_k=block,
  )


def flash_kernel(block: int = flash.BLOCK) -> attention.Kernel:
  """The Pallas kernel as an `attention.Kernel`: the chunked kernel's plan (positions only)."""
  return attention.Kernel(attention.prepare_chunked, functools.partial(attend_flash, block=block))
