"""The position-scheme plug-in: a registry of schemes, each an NNX module with six hooks.

A scheme touches the model in at most six places, each the identity unless it overrides it:
  embed(x_BxLxD, pos_BxL)                     additive absolute schemes (sinusoidal, learned)
  rotate(q_BxLxHxE, k_BxLxGxE, q_pos, k_pos, q_len_BxL=, k_len_BxL=)
                                              the rotary family (RoPE, p-RoPE, xPos, + scaling);
                                              *_len: each token's sequence length (None: L)
  bias(q_pos_BxQ, k_pos_BxS) -> BxHxQxS       attention-logit biases (ALiBi, T5, FIRE);
                                              `kernel_bias` restates it for the GPU flash
                                              kernel where needed (no gather: T5)
  contextual(q_BxGxPxQxE, logits_BxGxPxQxS, mask_BxQxS, carry) -> (extra_BxGxPxQxS, carry)
                                              logits from q and the logits themselves (CoPE);
                                              None (the default) when the scheme has none
  from_input(x_BxLxD, pos_BxL, seg_BxL) -> a_BxLxH
                                              a per-token, per-head float32 quantity from each
                                              block's own (normalized) input; logit (i, j) gets
                                              c_i - c_j, c the prefix sum of a within each
                                              document (FoX's log forget gates); None (the
                                              default) when the scheme has none
  householder(x_BxLxD, seg_BxL) -> (w_BxLxGxE, beta_BxLxG)
                                              PaTH: transforms from each layer's input, between
                                              query and key; None (the default) otherwise
Positions are always explicit inputs (int or float), so a bias is a function of positions, never
a stored (T, T) matrix: the chunked attention kernel evaluates it block by block at any length.
A contextual hook reads no positions; the chunked kernel calls it once per key block, nearest
block first, threading `carry` (see `Scheme.contextual`). An input hook reads the hidden
states, so its c is computed per block and handed to the kernels beside q, k and v: the chunked
kernel adds c_q - c_k block by block, never a (T, T) matrix (see `Scheme.from_input`).
One scheme instance serves all layers (learned schemes hold one set of parameters), unless its
`for_layer(i)` returns another for block i (CoPE's per-layer tables).
Shape letters (E head dim, S key length, R rotary pairs, ...): lcx/model/attention.py's docstring.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Callable

import jax
import ml_collections
from flax import nnx

from lcx.model.positions import fields
from lcx.model.positions.registry import Registry

PREFIX = "model.position"


@dataclasses.dataclass(frozen=True)
class Dims:
  """Model dimensions a scheme may need; `max_len` is the training length L."""

  d_model: int
  num_heads: int
  head_dim: int
  max_len: int
  num_layers: int = 1
  num_kv_heads: int | None = None  # None: num_heads (no GQA)

  @property
  def kv_heads(self) -> int:
    return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

  @classmethod
  def of(cls, model_cfg) -> "Dims":
    """The dimensions of a model config (a ModelConfig, or the `config.model` ConfigDict)."""
    return cls(
      model_cfg.d_model,
      model_cfg.num_heads,
      model_cfg.head_dim,
      model_cfg.max_len,
      model_cfg.num_layers,
      model_cfg.num_kv_heads,
    )


class Scheme(nnx.Module):
  """Base class: every hook is the identity. Subclasses override what they change."""

  def embed(self, x_BxLxD: jax.Array, pos_BxL: jax.Array) -> jax.Array:
    del pos_BxL
    return x_BxLxD

  def for_layer(self, layer: int) -> "Scheme":
    """The scheme block `layer` (from 0) attends with: itself, unless the scheme keeps
    parameters per layer (CoPE's default, one table per layer as the paper)."""
    del layer
    return self

  def rotate(self, q_BxLxHxE, k_BxLxGxE, q_pos_BxL, k_pos_BxL, *, q_len_BxL=None, k_len_BxL=None):
    del q_pos_BxL, k_pos_BxL, q_len_BxL, k_len_BxL
    return q_BxLxHxE, k_BxLxGxE

  def bias(self, q_pos_BxQ: jax.Array, k_pos_BxS: jax.Array) -> jax.Array | None:
    """Additive logit bias, BxHxQxS (or broadcastable), or None when the scheme has none."""
    del q_pos_BxQ, k_pos_BxS
    return None

  def kernel_bias(self, q_pos_1xQ: jax.Array, k_pos_1xS: jax.Array) -> jax.Array | None:
    """`bias` on one block of one batch row, as the flash kernel evaluates it (a GPU kernel
    lowers through Triton: elementwise ops, reductions, loops and 2-D dots, no gather, no
    batched matmul). The same values as `bias`, which stays the dense path's reference; a
    scheme overrides this only to compute them in that form (T5, Sandwich)."""
    return self.bias(q_pos_1xQ, k_pos_1xS)

  # True where `bias` is a function of the distance i - j alone (ALiBi, T5, KERPLE, Sandwich):
  # randomized training then samples distances, as Ruoss et al. (lcx/model/positions/randomized.py),
  # and the flash kernel reads the bias from a table of H x distances computed once per call
  # (`bias(d, 0)` for every d; lcx/model/kernels/flash_tables.py), not from the hook on every block.
  # Every parameter must have a "heads" axis (head h's bias from head h's entries), else the
  # kernel keeps calling the hook.
  bias_of_distance = False

  # Why the GPU (Triton) flash kernel cannot evaluate this scheme's `kernel_bias` on a block, or
  # None when it can. Triton lowers no gather and only 2-D matmuls; interpret mode (CPU) runs any
  # hook. `model.attention.impl=auto` then keeps the XLA path on a GPU; tests/model/kernels checks
  # every scheme's `bias` lowers for CUDA exactly when this is None.
  gpu_kernel_blocker: str | None = None
  # Why the TPU (Mosaic) flash kernel cannot evaluate this scheme's `kernel_bias` or its
  # parameter gradient on a block, or None when it can (lcx/model/kernels/mosaic.py). Mosaic
  # lowers a matmul contracting one axis; tests/model/kernels/test_mosaic.py lowers every
  # scheme's model for TPU on CPU, exactly when this is None.
  tpu_kernel_blocker: str | None = None
  # Why `impl=auto` keeps the XLA path on a GPU although the kernel runs the scheme there (a
  # measurement: the kernel was slower), or None. `impl=pallas` still runs the kernel.
  gpu_auto_xla: str | None = None

  @classmethod
  def gpu_kernel_blocker_of(cls, cfg) -> str | None:
    """`gpu_kernel_blocker`, or why these field values (`model.position.*`) keep the kernel off
    a GPU: Triton's arrays have power-of-two sizes (T5's table rows, Sandwich's frequencies)."""
    del cfg
    return cls.gpu_kernel_blocker

  # Names of per-head Python tuples (H floats, ALiBi's slopes) that `bias` reads only as an
  # array (`jnp.asarray`): the flash kernel hands each (batch, head) program its head's entry
  # in their place, so it evaluates one head's bias, as it does with parameters that have a
  # "heads" logical axis. Tuples, not state: `nnx.split(model, nnx.Param)`, checkpoints and
  # parameter counts see none of them.
  head_constants: tuple[str, ...] = ()

  # contextual(q_BxGxPxQxE, logits_BxGxPxQxS, mask_BxQxS, carry) -> (extra_BxGxPxQxS, carry):
  # float32 logits added before the softmax that depend on q and on the logits themselves, not
  # on positions (CoPE counts gates). A method in a subclass; None here, so the kernels do no
  # extra work (and compile the same programs) for every other scheme. q is scaled like the
  # logits (by 1/sqrt(E)); logits are q.k plus the scheme's bias, unmasked; the keys S are
  # consecutive. `carry` is None at a query block's first call, then what the previous call
  # returned: the dense kernel makes one call over all keys, the chunked kernel one per key
  # block from the diagonal outward (nearest keys first), so a carry can sum over the nearer keys.
  contextual = None

  # from_input(x_BxLxD, pos_BxL, seg_BxL) -> a_BxLxH: a float32 quantity per token and head
  # computed from the hidden state each block attends from (its normalized input: x differs per
  # block, so a scheme with parameters keeps one set per block through `for_layer`), with the
  # tokens' positions and segment ids (packed documents). Logit (i, j) then gets c_i - c_j,
  # c_BxLxH the prefix sum of a restarting at every document (`attention.document_cumsum`):
  # sum_{l=j+1..i} a_l, FoX's sum of log forget gates. The kernels need only c per token (the
  # chunked one takes a block of queries' and a block of keys'), and a KV cache keeps every
  # token's a (`model.KVCache`), so a generation step sees the same c as the full forward pass.
  # None here, so no kernel does extra work (or compiles other programs) for any other scheme.
  from_input = None

  # householder(x_BxLxD, seg_BxL) -> (w_BxLxGxE, beta_BxLxG): PaTH's per-token Householder
  # transforms H_t = I - beta_t w_t w_t^T from the block's normalized input, which the kernels
  # apply between each query and its keys (lcx/model/positions/path.py). None: no such transforms.
  householder = None


@dataclasses.dataclass(frozen=True)
class Spec:
  """A registered scheme: its class, its config fields with defaults, and optional checks.

  `check(cfg, dims)` validates field values; `check_length(cfg, dims, seq_len)` says whether the
  scheme can be evaluated on windows of `seq_len` tokens (static: positions are traced in jit).
  """

  cls: type[Scheme]
  defaults: dict
  check: Callable[[ml_collections.ConfigDict, Dims], None] | None = None
  check_length: Callable[[ml_collections.ConfigDict, Dims, int], None] | None = None


def _load_schemes() -> None:
  """Every scheme module registered (lcx.model.positions imports them on first use)."""
  import lcx.model.positions

  lcx.model.positions._load()


SCHEMES = Registry(PREFIX, "scheme", Spec, declared=fields.SCHEMES, load=_load_schemes)
register = SCHEMES.register  # class decorator: register(name, check=, check_length=)
spec = SCHEMES.entry
default_config = SCHEMES.default_config
validate = SCHEMES.validate  # validate(cfg, dims): raises ValueError naming the field


def adds_embedding(name: str) -> bool:
  """Whether the scheme adds absolute position embeddings (overrides the `embed` hook)."""
  return spec(name).cls.embed is not Scheme.embed


def is_contextual(name: str) -> bool:
  """Whether the scheme has a `contextual` hook (its positions come from the logits)."""
  return spec(name).cls.contextual is not None


def reads_input(name: str) -> bool:
  """Whether the scheme has a `from_input` hook (a bias from each block's hidden states)."""
  return spec(name).cls.from_input is not None


def gpu_kernel_blocker(name: str, cfg=None) -> str | None:
  """Why the GPU flash kernel cannot run the scheme's `kernel_bias`: its class's
  `gpu_kernel_blocker`, or with `cfg` (a `model.position` section) its field values'
  (`Scheme.gpu_kernel_blocker_of`)."""
  cls = spec(name).cls
  return cls.gpu_kernel_blocker if cfg is None else cls.gpu_kernel_blocker_of(cfg)


def tpu_kernel_blocker(name: str, cfg=None) -> str | None:
  """Why the TPU flash kernel cannot run the scheme (its class's `tpu_kernel_blocker`); `cfg`
  (a `model.position` section) as `gpu_kernel_blocker`'s, no field value blocks one yet."""
  del cfg
  return spec(name).cls.tpu_kernel_blocker


def power_of_two_blocker(cfg, field: str, size: int, what: str) -> str | None:
  """Why `cfg[field]` keeps the kernel off a GPU: it makes `what` `size` long, not a power of
  two as Triton's arrays are; or None."""
  if size >= 1 and size & (size - 1) == 0:
    return None
  return f"{PREFIX}.{field}={cfg[field]!r} makes {what} {size} long, not a power of two (Triton)"


def has_householder(name: str) -> bool:
  """Whether the scheme has a `householder` hook (PaTH: its positions come from the inputs)."""
  return spec(name).cls.householder is not None


def check_eval_length(cfg: ml_collections.ConfigDict, dims: Dims, seq_len: int) -> None:
  """Raises ValueError if the scheme cannot be evaluated on windows of `seq_len` tokens.

  Call it with the static window length before compiling an evaluation: inside jit positions
  are traced, so a learned table cannot raise there (it yields NaN instead, see absolute.py).
  """
  validate(cfg, dims)
  s = spec(cfg.name)
  if s.check_length is not None:
    s.check_length(cfg, dims, seq_len)


def build(cfg: ml_collections.ConfigDict, dims: Dims, *, rngs: nnx.Rngs) -> Scheme:
  s, fields = SCHEMES.resolve(cfg, dims)
  return s.cls(dims=dims, rngs=rngs, **fields)


class BiasWrapper:
  """A scheme whose `bias` a subclass changes while every other hook is `inner`'s
  (randomized.RandomDistances, temperature.ScaleInvariant): built per forward pass around the
  model's schemes, no parameters of its own."""

  bias_of_distance = False  # a wrapper that keeps it so says (randomized.RandomDistances)

  def __init__(self, inner):
    self.inner = inner
    self.contextual = inner.contextual
    self.from_input = inner.from_input
    self.householder = inner.householder

  def embed(self, x_BxLxD, pos_BxL):
    return self.inner.embed(x_BxLxD, pos_BxL)

  def rotate(self, q_BxLxHxE, k_BxLxGxE, q_pos_BxL, k_pos_BxL, **lengths):
    return self.inner.rotate(q_BxLxHxE, k_BxLxGxE, q_pos_BxL, k_pos_BxL, **lengths)

  def kernel_bias(self, q_pos_1xQ, k_pos_1xS):
    """The wrapper's own `bias`: what it changes holds in the flash kernel too."""
    return self.bias(q_pos_1xQ, k_pos_1xS)


def unwrapped(scheme) -> tuple[Scheme, Callable[[Scheme], object]]:
  """(the nnx Scheme inside any BiasWrappers, a function that puts another copy of it back
  inside the same wrappers). The flash kernel splits and rebuilds the Scheme (its parameters
  are kernel inputs); a wrapper is a plain object that nnx cannot split."""
  if not isinstance(scheme, BiasWrapper):
    return scheme, lambda module: module
  module, rewrap = unwrapped(scheme.inner)

  def wrap(inner):
    outer = copy.copy(scheme)
    outer.inner = rewrap(inner)
    return outer

  return module, wrap
