"""`model.attention.impl`: which attention implementation a model runs.

auto    the Pallas kernel on a GPU, the XLA kernels (lcx.model.attention) on CPU and TPU; a
        model the kernel cannot run (CoPE's contextual hook, PaTH's Householders,
        stick-breaking attention, a scheme's platform blocker: `SCHEME_BLOCKERS`) falls back
        to XLA. On a TPU `auto` waits for a device check: the Mosaic kernel lowers through
        jax's Mosaic lowering on CPU (tests), but Mosaic's own compiler runs only on a TPU, and
        a default that may not compile is what issue 58 item 1 removed
xla     lcx.model.attention's dense and chunked kernels, everywhere
pallas  the platform's Pallas kernel (`KERNELS`: `mosaic.mosaic_attention` on a TPU, whose
        blocks Mosaic accepts; `flash.flash_attention`, through Triton, elsewhere) for
        training and evaluation (interpret mode on CPU: exact, slow, for tests); generation's
        cached steps stay on the XLA path. Refused with a model the kernel cannot run there

The XLA kernels of each `model.attention.kind` (`get_kernel`): softmax (lcx.model.attention) and
stick-breaking (lcx.model.stick_breaking, built on lcx.model.attention's logits), which share the
plans. Chosen here, above both modules, so neither imports the other's user.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

from lcx import errors
from lcx.model import attention, cpu_tuned, options, stick_breaking
from lcx.model.kernels import flash, mosaic
from lcx.model.positions import base as positions_base

FIELD = "model.attention.impl"
GPUS = flash.GPUS  # backends where the kernel lowers through Triton
# jax.default_backend() names where auto may pick a kernel: where it has compiled and been
# measured (experiments/bench's device checks). "tpu" joins once a TPU device check has run.
AUTO_PLATFORMS = GPUS
# Platforms with a Pallas kernel of their own (head-major blocks, which Mosaic accepts; the
# Triton kernel's, one head of a token-major array, it refuses); elsewhere flash.flash_attention.
KERNELS = {"tpu": mosaic.mosaic_attention}
# Per platform: why a scheme's bias keeps its kernel off it (the scheme's declared blocker) and
# the platform's name in the message (tests/model/kernels/test_triton_lowering.py and
# test_mosaic.py lower every scheme for each on CPU).
SCHEME_BLOCKERS = {
  **{gpu: (positions_base.gpu_kernel_blocker, "a GPU") for gpu in GPUS},
  "tpu": (positions_base.tpu_kernel_blocker, "a TPU"),
}


class Attends(NamedTuple):
  """A `model.attention.kind`'s attend functions, one per plan (`attention.Kernel.attend`)."""

  dense: Callable[..., jax.Array]
  chunked: Callable[..., jax.Array]  # takes chunk_size=


ATTENDS = {
  "softmax": Attends(attention.attend_dense, attention.attend_chunked),
  "stick_breaking": Attends(stick_breaking.attend_dense, stick_breaking.attend_chunked),
}


def _named(attend: Callable[..., jax.Array]) -> Callable[..., jax.Array]:
  """`attend` with its output named `attention.OUT`, which model.remat=matmuls keeps (the
  Pallas kernel names its own, inside its custom_vjp, where its backward reads it)."""

  @functools.wraps(attend)
  def call(*args, **kwargs):
    return checkpoint_name(attend(*args, **kwargs), attention.OUT)

  return call


def get_kernel(name: str, chunk_size: int, kind: str = "softmax") -> attention.Kernel:
  """The XLA kernel `name` (dense | chunked) running attention `kind`."""
  if kind not in ATTENDS:
    raise errors.not_allowed("model.attention.kind", kind, options.KINDS)
  attends = ATTENDS[kind]
  kernels = {
    "dense": attention.Kernel(attention.prepare_dense, _named(attends.dense)),
    "chunked": attention.Kernel(
      attention.prepare_chunked, _named(functools.partial(attends.chunked, chunk_size=chunk_size))
    ),
  }
  if name not in kernels:
    raise errors.not_allowed("kernel", name, sorted(kernels))
  return kernels[name]


def unsupported(model_cfg, backend: str | None = None) -> str | None:
  """Why the Pallas kernel cannot run this model on `backend` (default: jax's), a field and its
  value, or None."""
  if model_cfg.attention.kind != "softmax":
    return f"model.attention.kind={model_cfg.attention.kind!r}"
  if positions_base.is_contextual(model_cfg.position.name):
    return f"model.position.name={model_cfg.position.name!r} (a contextual hook)"
  if positions_base.has_householder(model_cfg.position.name):
    return f"model.position.name={model_cfg.position.name!r} (Householder transforms, PaTH)"
  if model_cfg.attention.temperature == "scale_invariant":
    return "model.attention.temperature='scale_invariant' (a (scale, shift) logit transform)"
  backend = jax.default_backend() if backend is None else backend
  if backend not in SCHEME_BLOCKERS:  # interpret mode (CPU) runs any hook
    return None
  blocker_of, where = SCHEME_BLOCKERS[backend]
  name = model_cfg.position.name
  blocker = blocker_of(name, model_cfg.position)
  return f"model.position.name={name!r} on {where} ({blocker})" if blocker else None


def check_impl(model_cfg, backend: str | None = None) -> None:
  """Raises ValueError naming the field for `pallas` with a model the kernel cannot run (the
  values themselves by its record, lcx.model.options.ATTENTION)."""
  impl = model_cfg.attention.impl
  why = unsupported(model_cfg, backend)
  if impl == "pallas" and why:
    raise errors.not_allowed(FIELD, impl, f"auto, xla (the Pallas kernel does not run {why})")


def resolve_impl(model_cfg, backend: str | None = None) -> str:
  """`xla` or `pallas`: what `auto` means on `backend` (default: jax's) for this model."""
  impl = model_cfg.attention.impl
  if impl != "auto":
    return impl
  backend = jax.default_backend() if backend is None else backend
  if backend in GPUS and positions_base.spec(model_cfg.position.name).cls.gpu_auto_xla:
    return "xla"  # the kernel runs it, but was measured slower there
  runs = backend in AUTO_PLATFORMS and unsupported(model_cfg, backend) is None
  return "pallas" if runs else "xla"


def attend_flash(
  q_BxTxHxE,
  k_BxTxGxE,
  v_BxGxTxE,
  plan,
  *,
  scheme,
  sink_H=None,
  prefix_BxSxH=None,
  block=flash.BLOCK,
  platform=None,
):
  """An `attention.Kernel.attend` over a chunked plan: rotate per branch, then the kernel
  (`prefix_BxSxH`: an input hook's prefix sums, FoX's, read by the kernel); under forward mode
  (jax.jvp), which the kernel's custom_vjp has no rule for, the XLA dense kernel on the same
  positions (the chunked one's loop bounds are traced: no reverse mode, which a Hessian's
  inner gradient needs)."""
  if scheme.contextual is not None:
    raise ValueError(f"{FIELD}='pallas' cannot run a scheme with a contextual hook (CoPE)")
  params = nnx.state(positions_base.unwrapped(scheme)[0])  # a bias's, the kernel's inputs too
  if cpu_tuned.forward_mode(q_BxTxHxE, k_BxTxGxE, v_BxGxTxE, sink_H, prefix_BxSxH, params):
    dense = attention.densify(plan, scheme)
    return attention.attend_dense(
      q_BxTxHxE,
      k_BxTxGxE,
      v_BxGxTxE,
      dense,
      scheme=scheme,
      sink_H=sink_H,
      prefix_BxSxH=prefix_BxSxH,
    )
  run = KERNELS.get(platform or jax.default_backend(), flash.flash_attention)
  return run(
    attention.rotate(q_BxTxHxE, k_BxTxGxE, plan, scheme),
    v_BxGxTxE,
    plan.branches,
    plan.pos_BxT,
    plan.seg_BxT,
    plan.doc_BxT,
    scheme=scheme,
    pattern=plan.extras["pattern"],
    sink_H=sink_H,
    prefix_BxSxH=prefix_BxSxH,
    block_q=block,
    block_k=block,
  )


def flash_kernel(block: int = flash.BLOCK, platform: str | None = None) -> attention.Kernel:
  """The Pallas kernel as an `attention.Kernel`: the chunked kernel's plan (positions only).
  `platform`: whose kernel (`KERNELS`; default jax's backend), in interpret mode on CPU."""
  attend = functools.partial(attend_flash, block=block, platform=platform)
  return attention.Kernel(attention.prepare_chunked, attend)
