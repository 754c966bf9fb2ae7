"""A restored model, and q and k of every layer as its own blocks hand them to the kernel
(`qk`, with an input hook's prefix sums and PaTH's Householders): what the maps and the
rotary bands are computed from."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from lcx.model import attention, positions
from lcx.model.decoder import Decoder
from lcx.run import checkpoint

# --- A restored model. ---


@dataclasses.dataclass(eq=False)
class Model:
  """A decoder with restored parameters and the config it was built from (eval-time fields
  such as scaling or remap may differ from training: see `load`)."""

  config: ml_collections.ConfigDict
  decoder: Decoder
  step: int | None = None
  workdir: str | None = None
  _programs: dict = dataclasses.field(default_factory=dict, repr=False)

  @property
  def train_len(self) -> int:
    return self.config.model.max_len

  def program(self, key, make):
    """A jitted function cached per key (one compile per key and shape)."""
    if key not in self._programs:
      self._programs[key] = make()
    return self._programs[key]


def with_params(config: ml_collections.ConfigDict, params: dict) -> Decoder:
  """A Decoder for `config.model` holding `params` (nested dicts of arrays, as
  `lcx.run.checkpoint.restore_params` returns them; list indices may be strings)."""
  graphdef, state = nnx.split(
    nnx.eval_shape(lambda: Decoder(config.model, rngs=nnx.Rngs(0))), nnx.Param
  )

  def fill(abstract, given, where):
    if isinstance(abstract, dict):
      missing = [k for k in abstract if k not in given and str(k) not in given]
      if missing:
        raise ValueError(
          f"params{where}: no entry {missing[0]!r}; the checkpoint does not "
          "match the config's model"
        )
      return {
        k: fill(v, given[k] if k in given else given[str(k)], f"{where}.{k}")
        for k, v in abstract.items()
      }
    value = jnp.asarray(given)
    if value.shape != abstract.shape:
      raise ValueError(
        f"params{where}: shape {value.shape}, the config's model has {abstract.shape}"
      )
    return value.astype(abstract.dtype)

  nnx.replace_by_pure_dict(state, fill(nnx.to_pure_dict(state), params, ""))
  return nnx.merge(graphdef, state)


def load(workdir: str, step: int | None = None, variant: str | dict | None = None) -> Model:
  """The run's model at `step` (None: the latest), parameters only, on the default device.

  `variant`: eval-time changes as `eval.variants` names them ("yarn@4", "self_extend@64/4") or
  a dict of dotted overrides ({"model.position.scaling": {...}}); trained fields are refused.
  """
  from lcx.config import run_config, variants  # the evaluation's own variant parsing

  config = run_config.run_config(workdir)
  if variant:
    changes = (
      variants.overrides(variant, config.eval.named_variants)
      if isinstance(variant, str)
      else variant
    )
    config = variants.apply(config, changes)
  params, meta = checkpoint.restore_params(workdir, step)
  return Model(config, with_params(config, params), meta["step"], workdir)


# --- q and k of every layer, as the blocks hand them to the kernel. ---


def inputs(tokens_BxT, pos_BxT=None, seg_BxT=None):
  """Tokens, positions and segment ids as B x T arrays (positions 0..T-1 and one document per
  row unless given): the inputs `qk` and `attention_maps` share."""
  tokens_BxT = np.asarray(tokens_BxT, np.int32)
  if tokens_BxT.ndim == 1:
    tokens_BxT = tokens_BxT[None]
  shape = tokens_BxT.shape
  pos = np.broadcast_to(np.arange(shape[1], dtype=np.int32), shape) if pos_BxT is None else pos_BxT
  seg = np.ones(shape, np.int32) if seg_BxT is None else seg_BxT
  pos, seg = np.asarray(pos), np.asarray(seg, np.int32)
  if pos.shape != shape or seg.shape != shape:
    raise ValueError(f"positions {pos.shape} and segments {seg.shape} must match tokens {shape}")
  return tokens_BxT, pos, seg


def _recording(kernel: attention.Kernel, record: list) -> attention.Kernel:
  """`kernel` whose attend also keeps the (q, k) it is given, the model's own projections, and
  the prefix sums of an input hook (FoX's gates from the block's hidden states) or None, and
  PaTH's (w, beta) or None."""

  def attend(q_BxTxHxK, k_BxTxGxK, v_BxGxTxK, plan, **options):
    record.append((q_BxTxHxK, k_BxTxGxK, options.get("prefix_BxSxH"), options.get("householder")))
    return kernel.attend(q_BxTxHxK, k_BxTxGxK, v_BxGxTxK, plan, **options)

  return attention.Kernel(kernel.prepare, attend)


def _forward(decoder: Decoder, tokens_BxT, pos_BxT, seg_BxT, kernel_name: str):
  """Decoder.__call__ with a recording kernel: ([(q, k) per layer], logits_BxTxV)."""
  kernel = decoder.kernel(kernel_name)
  plans = decoder.plans(functools.partial(kernel.prepare, pos_BxT, seg_BxT))
  record = []
  logits = decoder.forward(tokens_BxT, pos_BxT, _recording(kernel, record), plans)
  return record, logits


def _check_length(model: Model, length: int) -> None:
  m = model.config.model
  positions.check_eval_length(m.position, positions.Dims.of(m), length)


@dataclasses.dataclass(frozen=True)
class QK:
  """Per layer N: q_NxBxTxHxK and k_NxBxTxGxK before the scheme's rotation (float32), and the
  inputs' positions and segment ids; `prefix` N x B x T x H: an input hook's prefix sums c
  (FoX; 0 in a block without the hook), or None for a scheme without one; with PaTH, its
  w_NxBxTxGxK and beta_NxBxTxG (beta 0, no transform, in a NoPE block of the per-layer
  schedule), else None."""

  q: np.ndarray
  k: np.ndarray
  pos: np.ndarray
  seg: np.ndarray
  prefix: np.ndarray | None = None
  w: np.ndarray | None = None
  beta: np.ndarray | None = None

  def householder(self, layer: int):
    """(w, beta) of `layer` for `attention.logits`, or None."""
    return None if self.w is None else (self.w[layer], self.beta[layer])


def qk(model: Model, tokens_BxT, pos_BxT=None, seg_BxT=None, *, with_logits=False):
  """q and k of every layer for a batch (positions default to 0..T-1, one document per row).

  The forward pass uses the chunked kernel from `eval.chunked_from` tokens, as evaluation
  does. Returns a `QK`, and the model's logits_BxTxV too when `with_logits`.
  """
  tokens_BxT, pos_BxT, seg_BxT = inputs(tokens_BxT, pos_BxT, seg_BxT)
  _check_length(model, tokens_BxT.shape[1])
  kernel = "chunked" if tokens_BxT.shape[1] >= model.config.eval.chunked_from else "dense"
  graphdef, state = nnx.split(model.decoder)

  def make():
    def run(state, tokens, pos, seg):
      record, logits = _forward(nnx.merge(graphdef, state), tokens, pos, seg, kernel)
      q = jnp.stack([q.astype(jnp.float32) for q, *_ in record])
      k = jnp.stack([k.astype(jnp.float32) for _, k, *_ in record])
      prefix = None
      if any(c is not None for _, _, c, _ in record):  # a NoPE block of the schedule: c = 0
        zero = jnp.zeros(q.shape[1:4], jnp.float32)
        prefix = jnp.stack([zero if c is None else c for _, _, c, _ in record])
      if all(hh is None for *_, hh in record):
        return q, k, prefix, None, None, logits
      none = (jnp.zeros(k.shape[1:]), jnp.zeros(k.shape[1:-1]))  # beta = 0: H = I
      w, beta = (jnp.stack(x) for x in zip(*[none if hh is None else hh for *_, hh in record]))
      return q, k, prefix, w, beta, logits

    return jax.jit(run)

  program = model.program(("qk", kernel), make)
  q, k, prefix, w, beta, logits = program(state, tokens_BxT, pos_BxT, seg_BxT)
  prefix = None if prefix is None else np.asarray(prefix)
  w, beta = (None, None) if w is None else (np.asarray(w), np.asarray(beta))
  out = QK(np.asarray(q), np.asarray(k), pos_BxT, seg_BxT, prefix, w, beta)
  return (out, np.asarray(logits)) if with_logits else out
