"""The decoder: pre-norm (RMSNorm) causal transformer with a pluggable position scheme.

Positions and segment ids are explicit inputs: packed documents restart at position 0 and never
attend across documents, and remaps/extension methods act on positions before any hook.
Every parameter carries logical axis names that `lcx.run.sharding` maps onto the mesh.

Per-layer position schedule: with `model.nope_every=k` every k-th block (block i with
(i + 1) % k == 0) gets no position signal (identity hooks, no remap: Llama 4's iRoPE, SmolLM3),
and with `model.position_window=W` the blocks that do get it attend only to the last W keys
(RNoPE-SWA); the NoPE blocks keep the full context. Each kind of block has its own plan.

Generation (`lcx.tools.generate`) gives every layer a KV cache (`init_cache`) of unrotated keys and
values, fills it with a forward pass over the whole cache, then runs `decode` steps: the
positions, remaps, biases, masks and rotations go through the same attention code as training.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

from lcx.model import attention, cpu_tuned, gating, kernels, patterns, positions, temperature
from lcx.model.model_config import ModelConfig
from lcx.model.positions import path, randomized, remaps

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}  # keys: lcx.model.options.DTYPES
# What model.remat=matmuls keeps of a block for the backward: its matmuls' outputs, named where
# they are computed (checkpoint_name), cheap to keep and costly to recompute; the elementwise
# steps between them (norms, rotations, temperature, gates, activations) run again. The
# attention's T x T logits are no kept matmul: the backward recomputes them, as the Pallas
# kernel's own backward does.
KEPT = (
  "q_proj",
  "k_proj",
  "v_proj",
  attention.OUT,
  attention.LSE,
  "out_proj",
  "mlp_in",
  "mlp_gate",
)
# model.remat -> the jax.checkpoint policy of each block, or None: no checkpoint
# (lcx/model/options.py REMATS)
REMAT_POLICIES = {
  "none": None,
  "block": jax.checkpoint_policies.nothing_saveable,
  "matmuls": jax.checkpoint_policies.save_only_these_names(*KEPT),
}


def is_variable(x) -> bool:
  """Leaf test for pytrees of model state: an nnx Variable (a parameter with logical axes)."""
  return isinstance(x, nnx.Variable)


def _param(rngs, shape, fan_in, axes, scale=1.0):
  """A normal(0, scale/sqrt(fan_in)) parameter with its logical axis names."""
  init = jax.random.normal(rngs.params(), shape, jnp.float32) * (scale / fan_in**0.5)
  return nnx.Param(init, logical_axes=axes)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _rms_norm_tuned(x, scale_D, eps):
  """x / rms(x) * scale over the last axis (size D, any leading axes), with a hand-written
  backward.

  Why by hand: XLA:CSE merges the forward's and autodiff's broadcasts of `scale` and of
  1/rms into one, and XLA:CPU's YNNPACK fusion only absorbs a broadcast all of whose users it
  holds, so a shared one is written out at full size every step and read back. The backward
  here works on rows (N x D, another shape: nothing to merge) and needs each broadcast once:
  default train step 0.97x, with QK-norm 0.92x (interleaved A/Bs, 2-core CPU).
  """
  return _rms_norm_fwd(x, scale_D, eps)[0]


def _rms_norm_fwd(x, scale_D, eps):
  r = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)
  scale = scale_D.reshape((1,) * (x.ndim - 1) + scale_D.shape)  # any leading axes
  return x * r * scale, (x, r, scale_D)


def _rms_norm_bwd(eps, res, g):
  """On rows: dx = r * gs - x * r^3 * mean(x * gs), gs = g * scale; dscale = sum of g x r."""
  del eps
  x, r, scale_D = res
  d = x.shape[-1]
  x_NxD, g_NxD, r_N = x.reshape(-1, d), g.reshape(-1, d), r.reshape(-1)
  gs_NxD = g_NxD * scale_D[None]
  m_N = jnp.mean(x_NxD * gs_NxD, axis=-1)
  dx_NxD = r_N[:, None] * gs_NxD - x_NxD * (r_N**3 * m_N)[:, None]
  dscale_D = jnp.einsum("n,nd->d", r_N, g_NxD * x_NxD)  # a matvec: no broadcast of r
  return dx_NxD.reshape(x.shape), dscale_D


_rms_norm_tuned.defvjp(_rms_norm_fwd, _rms_norm_bwd)


def _rms_norm_plain(x, scale_D, eps):
  """x / rms(x) * scale, plain jnp: the reference of `_rms_norm_tuned`."""
  return _rms_norm_fwd(x, scale_D, eps)[0]


rms_norm = cpu_tuned.choose(_rms_norm_tuned, _rms_norm_plain)  # the seam (lcx/model/cpu_tuned.py)


class RMSNorm(nnx.Module):
  """Over the last axis (size `dim`, logical axis `axis`) with a learned scale from 1."""

  def __init__(self, dim, eps, axis="embed"):
    self.scale = nnx.Param(jnp.ones((dim,), jnp.float32), logical_axes=(axis,))
    self.eps = eps

  def __call__(self, x_BxLxD):
    x = rms_norm(x_BxLxD.astype(jnp.float32), self.scale[...], float(self.eps))
    return x.astype(x_BxLxD.dtype)


class HeadsRMSNorm(nnx.Module):
  """Over the last two axes (heads x head_dim) at once, a learned scale from 1 per feature:
  QK-norm as OLMo 2 and the DroPE reference normalize q and k (`model.qk_norm_over=heads`)."""

  def __init__(self, heads, dim, eps, axis="heads"):
    self.scale = nnx.Param(jnp.ones((heads, dim), jnp.float32), logical_axes=(axis, "head_dim"))
    self.eps = eps

  def __call__(self, x_BxLxHxE):
    b, n, h, e = x_BxLxHxE.shape
    x_BxLxF = x_BxLxHxE.astype(jnp.float32).reshape(b, n, h * e)
    x_BxLxF = rms_norm(x_BxLxF, self.scale[...].reshape(h * e), float(self.eps))
    return x_BxLxF.reshape(b, n, h, e).astype(x_BxLxHxE.dtype)


class KVCache(nnx.Module):
  """One layer's keys and values for generation: `size` slots, token i in slot i.

  Keys are kept unrotated: a rotary scheme rotates the new query and every cached key at each
  step with the current length, so a length-dependent scaling (dynamic, longrope) sees one
  consistent set of frequencies, never keys rotated at an older length.

  `inputs`, for a scheme with a `from_input` hook (FoX), keeps each token's quantity a per head
  (float32, `num_heads` > 0), so a step's keys get the same prefix sums c as in a forward pass.
  With PaTH (`history` not None) the keys are those carried through the Householders since
  (lcx/model/positions/path.py) and `u` keeps every token's projection, after `history` zero slots:
  a step's convolution reads the ones before it.
  """

  def __init__(
    self,
    batch: int,
    size: int,
    num_kv_heads: int,
    head_dim: int,
    dtype,
    num_heads: int = 0,
    history=None,
  ):
    self.k = nnx.Cache(jnp.zeros((batch, size, num_kv_heads, head_dim), dtype))
    self.v = nnx.Cache(jnp.zeros((batch, num_kv_heads, size, head_dim), dtype))
    self.inputs = (
      nnx.Cache(jnp.zeros((batch, size, num_heads), jnp.float32)) if num_heads else nnx.data(None)
    )
    self.history = history
    self.u = (
      None
      if history is None
      else nnx.Cache(jnp.zeros((batch, history + size, num_kv_heads, head_dim), jnp.float32))
    )

  @property
  def size(self) -> int:
    return self.k[...].shape[1]

  def update(self, k_BxNxGxE, v_BxGxNxE, start):
    """Writes N tokens' keys and values at slots start..start+N-1; returns every slot's."""
    update = jax.lax.dynamic_update_slice_in_dim
    self.k[...] = update(self.k[...], k_BxNxGxE.astype(self.k[...].dtype), start, axis=1)
    self.v[...] = update(self.v[...], v_BxGxNxE.astype(self.v[...].dtype), start, axis=2)
    return self.k[...], self.v[...]

  def update_inputs(self, a_BxNxH, start):
    """Writes N tokens' `from_input` quantities at slots start..; returns every slot's."""
    update = jax.lax.dynamic_update_slice_in_dim
    self.inputs[...] = update(self.inputs[...], a_BxNxH.astype(jnp.float32), start, axis=1)
    return self.inputs[...]


def _projected(name, spec, x, w):
  """The einsum `spec` of x and w, named `name` (one of KEPT: model.remat=matmuls keeps it)."""
  return checkpoint_name(jnp.einsum(spec, x, w), name)


class Attention(nnx.Module):
  def __init__(self, cfg: ModelConfig, *, rngs):
    d, h, g, k = cfg.d_model, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    self.wq = _param(rngs, (d, h, k), d, ("embed", "heads", "head_dim"))
    self.wk = _param(rngs, (d, g, k), d, ("embed", "kv_heads", "head_dim"))
    self.wv = _param(rngs, (d, g, k), d, ("embed", "kv_heads", "head_dim"))
    self.wo = _param(rngs, (h, k, d), h * k, ("heads", "head_dim", "embed"))
    self.cache = nnx.data(None)  # a KVCache while generating (Decoder.init_cache)
    # QK-norm as Qwen 3 and Gemma 3: q and k RMS-normalized per head, one learned scale over
    # head_dim each, before any position hook, so logits stay bounded at any length; or as OLMo 2
    # and the DroPE reference (qk_norm_over=heads): across all heads at once, a scale over heads
    # x head_dim.
    if not cfg.qk_norm:
      self.q_norm, self.k_norm = None, None
    elif cfg.qk_norm_over == "heads":
      self.q_norm = HeadsRMSNorm(h, k, cfg.norm_eps, "heads")
      self.k_norm = HeadsRMSNorm(g, k, cfg.norm_eps, "kv_heads")
    else:
      self.q_norm, self.k_norm = (
        RMSNorm(k, cfg.norm_eps, "head_dim"),
        RMSNorm(k, cfg.norm_eps, "head_dim"),
      )
    # Logit temperature (lcx/model/temperature.py): SSMax's learned s per head, or None.
    self.temperature, self.train_len = cfg.attention.temperature, cfg.max_len
    self.beta_c = float(cfg.attention.beta_c)
    self.ssmax_keys = cfg.attention.ssmax_n == "keys"  # n: the keys seen, or position + 1
    self.ssmax_H = (
      None
      if self.temperature != "ssmax"
      else nnx.Param(
        jnp.full((h,), temperature.ssmax_init(cfg.max_len), jnp.float32), logical_axes=("heads",)
      )
    )
    # Gated attention (lcx/model/gating.py): W_g of the sigmoid gate on each head's output, or None.
    self.gate = cfg.attention.gate
    self.wg = (
      None
      if self.gate == "none"
      else _param(
        rngs,
        gating.shape(self.gate, d, h, k),
        d,
        ("embed", "heads", *gating.GATES[self.gate].per_head),
      )
    )
    # Attention sink (gpt-oss): a learned logit per head in every softmax denominator, from 0.
    self.sink_H = (
      None
      if cfg.attention.sink == "none"
      else nnx.Param(jnp.zeros((h,), jnp.float32), logical_axes=("heads",))
    )
    # Stick-breaking's remainder vector per head (lcx/model/stick_breaking.py), from 0, or None.
    self.remainder_HxE = (
      nnx.Param(jnp.zeros((h, k), jnp.float32), logical_axes=("heads", "head_dim"))
      if cfg.attention.kind == "stick_breaking" and cfg.attention.remainder_bias
      else None
    )

  def __call__(self, x_BxLxD, *, scheme, kernel, plan, q_pos_BxL, nope=False):
    """`q_pos_BxL`: the queries' true positions (the temperature reads them); `nope`: the
    block carries no position signal (the llama4 temperature reads it)."""
    dt = x_BxLxD.dtype
    q_BxLxHxE = _projected("q_proj", "bld,dhk->blhk", x_BxLxD, self.wq[...].astype(dt))
    k_BxLxGxE = _projected("k_proj", "bld,dgk->blgk", x_BxLxD, self.wk[...].astype(dt))
    if self.q_norm is not None:
      q_BxLxHxE, k_BxLxGxE = self.q_norm(q_BxLxHxE), self.k_norm(k_BxLxGxE)
    q_BxLxHxE = temperature.scale_queries(
      q_BxLxHxE,
      temperature.query_factor(
        self.temperature,
        q_pos_BxL,
        plan.len_BxT,
        train_len=self.train_len,
        ssmax_H=None if self.ssmax_H is None else self.ssmax_H[...],
        beta_c=self.beta_c,
        keys_BxL=(
          temperature.visible_keys(plan) if self.ssmax_H is not None and self.ssmax_keys else None
        ),
        nope=nope,
      ),
    )
    v_BxGxLxE = _projected("v_proj", "bld,dgk->bglk", x_BxLxD, self.wv[...].astype(dt))
    path_kwargs = {}  # PaTH's Householders from this block's input, for the kernel
    if scheme.householder is not None and self.cache is not None:
      k_BxLxGxE, v_BxGxLxE, path_kwargs = path.cached_attention_inputs(
        scheme, self.cache, x_BxLxD, k_BxLxGxE, v_BxGxLxE, plan
      )
    elif scheme.householder is not None:
      path_kwargs = {"householder": scheme.householder(x_BxLxD, plan.seg_BxT)}
    elif self.cache is not None:  # generating: the new tokens join the cache; attend to it all
      k_BxLxGxE, v_BxGxLxE = self.cache.update(k_BxLxGxE, v_BxGxLxE, plan.start)
    options = {} if self.remainder_HxE is None else {"remainder_HxE": self.remainder_HxE[...]}
    if scheme.from_input is not None:  # FoX: a bias from this block's own hidden states
      options["prefix_BxSxH"] = self._prefix_sums(scheme, x_BxLxD, q_pos_BxL, plan)
    out_BxHxLxE = kernel.attend(
      q_BxLxHxE,
      k_BxLxGxE,
      v_BxGxLxE,
      plan,
      scheme=scheme,
      sink_H=None if self.sink_H is None else self.sink_H[...],
      **options,
      **path_kwargs,
    )
    if self.wg is not None:
      out_BxHxLxE = gating.apply(self.gate, out_BxHxLxE, x_BxLxD, self.wg[...])
    return _projected("out_proj", "bhlk,hkd->bld", out_BxHxLxE, self.wo[...].astype(dt))

  def _prefix_sums(self, scheme, x_BxLxD, q_pos_BxL, plan):
    """c_BxSxH over the plan's keys: per document, the prefix sums of the scheme's `from_input`
    quantities, the new tokens' from x and, while generating, the cached tokens' before them
    (the queries are keys plan.start..; a step's keys, the cache's slots, are one document)."""
    seg_BxL = jax.lax.dynamic_slice_in_dim(plan.seg_BxT, plan.start, x_BxLxD.shape[1], axis=1)
    a_BxSxH = scheme.from_input(x_BxLxD, q_pos_BxL, seg_BxL).astype(jnp.float32)
    if self.cache is not None:  # every slot's
      a_BxSxH = self.cache.update_inputs(a_BxSxH, plan.start)
    return attention.document_cumsum(a_BxSxH, plan.seg_BxT)


# tanh-approximate GELU as x * sigmoid(x * (A + B x^2)): 0.5 (1 + tanh(z)) = sigmoid(2z).
_GELU_A = 2 * (2 / math.pi) ** 0.5
_GELU_B = _GELU_A * 0.044715


def _gelu_plain(x):
  """tanh-approximate GELU in its sigmoid form, plain jnp: the reference of `_gelu_tuned`."""
  return x * jax.nn.sigmoid(x * (_GELU_A + _GELU_B * x * x))


@jax.custom_vjp
def _gelu_tuned(x):
  """tanh-approximate GELU (jax.nn.gelu's default), with a hand-written derivative.

  Autodiff keeps several B x L x F intermediates of the formula for the backward pass, and
  XLA:CPU materializes a full-size broadcast of each constant in it; this backward reads only x
  and recomputes the sigmoid (6% faster default train step than autodiff, interleaved A/B),
  and the sigmoid form, with fewer constants than 0.5 x (1 + tanh(..)), another 6%.
  """
  return _gelu_plain(x)


def _gelu_fwd(x):
  return _gelu_plain(x), x


def _gelu_bwd(x, g):
  s = jax.nn.sigmoid(x * (_GELU_A + _GELU_B * x * x))
  return (g * (s + x * s * (1 - s) * (_GELU_A + 3 * _GELU_B * x * x)),)


_gelu_tuned.defvjp(_gelu_fwd, _gelu_bwd)
gelu = cpu_tuned.choose(_gelu_tuned, _gelu_plain)  # the seam (lcx/model/cpu_tuned.py)


class MLP(nnx.Module):
  """GELU (`w_in` -> gelu -> `w_out`) or SwiGLU (`silu(w_gate) * w_in` -> `w_out`)."""

  def __init__(self, cfg: ModelConfig, *, rngs):
    d, f = cfg.d_model, cfg.mlp_dim
    self.swiglu = cfg.mlp == "swiglu"
    self.w_in = _param(rngs, (d, f), d, ("embed", "mlp"))
    self.w_gate = _param(rngs, (d, f), d, ("embed", "mlp")) if self.swiglu else None
    self.w_out = _param(rngs, (f, d), f, ("mlp", "embed"))

  def __call__(self, x_BxLxD):
    dt = x_BxLxD.dtype
    h_BxLxF = checkpoint_name(x_BxLxD @ self.w_in[...].astype(dt), "mlp_in")  # KEPT
    if self.swiglu:
      gate_BxLxF = checkpoint_name(x_BxLxD @ self.w_gate[...].astype(dt), "mlp_gate")
      h_BxLxF = h_BxLxF * jax.nn.silu(gate_BxLxF)
    else:
      h_BxLxF = gelu(h_BxLxF)
    return h_BxLxF @ self.w_out[...].astype(dt)


class Block(nnx.Module):
  def __init__(self, cfg: ModelConfig, *, rngs):
    self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
    self.attn = Attention(cfg, rngs=rngs)
    self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
    self.mlp = MLP(cfg, rngs=rngs)

  def __call__(self, x_BxLxD, *, scheme, kernel, plan, q_pos_BxL, nope=False):
    """Pre-norm attention, then the MLP, each added to the residual (Attention: the rest)."""
    attended_BxLxD = self.attn(
      self.attn_norm(x_BxLxD),
      scheme=scheme,
      kernel=kernel,
      plan=plan,
      q_pos_BxL=q_pos_BxL,
      nope=nope,
    )
    x_BxLxD = x_BxLxD + attended_BxLxD
    return x_BxLxD + self.mlp(self.mlp_norm(x_BxLxD))


class Decoder(nnx.Module):
  """tokens_BxL, positions_BxL, segments_BxL -> float32 logits_BxLxV.

  `cfg`: a ModelConfig, or a `config.model` ConfigDict, read into one first (ModelConfig.of)."""

  def __init__(self, cfg: ModelConfig | ml_collections.ConfigDict, *, rngs: nnx.Rngs):
    cfg = ModelConfig.of(cfg)
    self.dtype = DTYPES[cfg.dtype]
    self.embed = nnx.Param(
      jax.random.normal(rngs.params(), (cfg.vocab_size, cfg.d_model)),
      logical_axes=("vocab", "embed"),
    )
    self.position = positions.build(cfg.position, positions.Dims.of(cfg), rngs=rngs)
    remaps.check_scheme(cfg.remap, cfg.position.name)
    self.remap = remaps.build(
      remaps.for_temperature(cfg.remap, cfg.attention.temperature), positions.Dims.of(cfg)
    )
    self.pattern = patterns.build(cfg.attention.pattern)
    self.nope_every = cfg.nope_every
    self.nope_scheme = cfg.position.name == "nope"  # every block is NoPE (llama4 temperature)
    # The NoPE blocks' hooks (identity) and remap (none); the positioned blocks' window.
    self.identity = positions.Scheme()
    self.no_remap = remaps.build(remaps.default_config("none"), positions.Dims.of(cfg))
    window = (
      functools.partial(patterns.sliding_window, window=cfg.position_window)
      if cfg.position_window
      else None
    )
    self.positioned_pattern = patterns.intersect(self.pattern, window)
    self.blocks = nnx.List([Block(cfg, rngs=rngs) for _ in range(cfg.num_layers)])
    self.remat_policy = REMAT_POLICIES[cfg.remat]  # what each block recomputes in the backward
    self.final_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
    self.head = (
      None
      if cfg.tie_embeddings
      else _param(rngs, (cfg.d_model, cfg.vocab_size), cfg.d_model, ("embed", "vocab"))
    )
    self.chunk_size = cfg.attention.chunk_size
    # SSMax counting the keys each query sees: once per forward pass, in the plans.
    attn = cfg.attention
    self.count_keys = attn.temperature == "ssmax" and attn.ssmax_n == "keys"
    # Scale-invariant attention's tau, or None: it wraps each block's scheme (layer_scheme).
    self.si_tau = float(attn.si_tau) if attn.temperature == "scale_invariant" else None
    self.attention_kind = (
      cfg.attention.kind
    )  # softmax | stick_breaking (lcx/model/stick_breaking.py)
    # xla | pallas: `model.attention.impl` with auto resolved on this backend (lcx/model/kernels).
    self.attention_impl = kernels.resolve_impl(cfg)
    self.block_size = cfg.attention.block_size

  def __call__(self, tokens_BxL, pos_BxL, seg_BxL, *, kernel: str = "dense", distances_L=None):
    """With a KV cache, L must be its size: every slot is (re)written (generation's prefill).
    `distances_L`: randomized training's distances for a distance-only bias (offset k reads
    as distance D[k]: positions.randomized.RandomDistances), or None."""
    size = self.cache_size()
    if size is not None and tokens_BxL.shape[1] != size:
      raise ValueError(
        f"a model with a KV cache of {size} slots runs all of them at once "
        f"(prefill) or `decode` steps, not {tokens_BxL.shape[1]} tokens"
      )
    kernel = self.kernel(kernel)
    # Position-only work (remap branches, mask, biases) once, shared by every layer.
    plans = self.plans(functools.partial(kernel.prepare, pos_BxL, seg_BxL), distances_L)
    return self.forward(tokens_BxL, pos_BxL, kernel, plans)

  def kernel(self, name: str) -> attention.Kernel:
    """The kernel `name` (dense | chunked) running this model's `model.attention.kind`; with
    impl pallas, the Pallas kernel for both (a KV cache keeps the XLA path)."""
    if self.attention_impl == "pallas" and self.cache_size() is None:
      return kernels.flash_kernel(self.block_size)
    return kernels.get_kernel(name, self.chunk_size, self.attention_kind)

  def has_positions(self, layer: int) -> bool:
    """Whether block `layer` (from 0) gets the position signal: all but every nope_every-th."""
    return not (self.nope_every and (layer + 1) % self.nope_every == 0)

  def plans(self, prepare, distances_L=None) -> tuple[attention.Plan, attention.Plan | None]:
    """(the positioned blocks' plan, the NoPE blocks' plan or None when there are none).

    `prepare` is a kernel's prepare with the positions bound; it gets scheme, remap, pattern.
    `distances_L` (randomized distances, or None) rides in the positioned plan's extras.
    """
    scheme = self._tempered(self.position, distances_L)
    identity = self._tempered(self.identity)
    plan = prepare(scheme=scheme, remap=self.remap, pattern=self.positioned_pattern)
    if distances_L is not None:
      plan = dataclasses.replace(plan, extras={**plan.extras, "distances_L": distances_L})
    if all(self.has_positions(i) for i in range(len(self.blocks))):
      return self._counted(plan), None
    nope_plan = prepare(scheme=identity, remap=self.no_remap, pattern=self.pattern)
    return self._counted(plan), self._counted(nope_plan)

  def _counted(self, plan):
    """`plan` with each query's visible keys (SSMax's n) when they are read."""
    if not self.count_keys:
      return plan
    return dataclasses.replace(
      plan, extras={**plan.extras, "keys_BxQ": temperature.visible_keys(plan)}
    )

  def _tempered(self, scheme, distances_L=None):
    """`scheme` reading randomized distances (a distance-only bias, given `distances_L`),
    inside scale-invariant attention's logit transform when it is on."""
    if distances_L is not None and scheme.bias_of_distance:
      scheme = randomized.RandomDistances(scheme, distances_L)
    return scheme if self.si_tau is None else temperature.ScaleInvariant(scheme, self.si_tau)

  def layer_scheme(self, layer: int, distances_L=None):
    """The scheme block `layer` attends with: its own (CoPE's per-layer tables) or, in a NoPE
    block of the per-layer schedule, the identity; with randomized distances and
    scale-invariant attention around it."""
    if self.has_positions(layer):
      return self._tempered(self.position.for_layer(layer), distances_L)
    return self._tempered(self.identity)

  def layer_inputs(self, layer: int, plans) -> dict:
    """The scheme and plan block `layer` attends with (its keyword arguments but the kernel)."""
    plan, nope_plan = plans
    if self.has_positions(layer):
      scheme = self.layer_scheme(layer, plan.extras.get("distances_L"))
      return {"scheme": scheme, "plan": plan, "nope": self.nope_scheme}
    return {"scheme": self.layer_scheme(layer), "plan": nope_plan, "nope": True}

  def init_cache(self, batch: int, size: int) -> None:
    """Gives every layer an empty KV cache of `size` token slots (lcx.tools.generate)."""
    history = self.position.history if self.position.householder is not None else None
    for i, block in enumerate(self.blocks):
      _, g, k = block.attn.wk[...].shape
      inputs = self.layer_scheme(i).from_input is not None  # FoX: each token's log gates too
      h = block.attn.wq[...].shape[1] if inputs else 0
      block.attn.cache = KVCache(batch, size, g, k, self.dtype, num_heads=h, history=history)

  def cache_size(self) -> int | None:
    cache = self.blocks[0].attn.cache
    return None if cache is None else cache.size

  def decode(self, tokens_BxN, start):
    """Logits (float32 BxNxV) of the tokens at start..start+N-1 of one document per row, from
    the KV cache, which holds tokens 0..start-1 (and which they join).

    Positions are token indices; remaps, biases, patterns and rotations see exactly what a
    forward pass over tokens 0..start+N-1 gives them (`attention.prepare_step`).
    """
    b, n = tokens_BxN.shape
    kernel = self.kernel("dense")
    plans = self.plans(functools.partial(attention.prepare_step, start, n, self.cache_size(), b))
    pos_BxN = jnp.broadcast_to(start + jnp.arange(n), (b, n))
    return self.forward(tokens_BxN, pos_BxN, kernel, plans)

  def forward(self, tokens_BxL, pos_BxL, kernel, plans):
    """Embeddings, blocks and head, for queries at the true positions `pos_BxL`, through a
    `Kernel` object and its `plans` (`Decoder.plans`; analysis passes a kernel that records
    q and k)."""
    plan = plans[0]
    x_BxLxD = jnp.take(self.embed[...], tokens_BxL, axis=0)
    # Absolute schemes embed a one-branch remap's positions (remaps.check_scheme refuses the
    # several-branch remaps with them).
    embed_pos_BxL = plan.branches[0].q_pos if len(plan.branches) == 1 else pos_BxL
    x_BxLxD = self.position.embed(x_BxLxD, embed_pos_BxL).astype(self.dtype)
    for i, block in enumerate(self.blocks):
      inputs = self.layer_inputs(i, plans)

      def apply(block, x_BxLxD):
        return block(x_BxLxD, kernel=kernel, q_pos_BxL=pos_BxL, **inputs)  # noqa: B023 (called now)

      # model.remat=block: the backward pass keeps only each block's input and runs the block
      # again; =matmuls: its input and KEPT, and runs the rest again (values unchanged:
      # tests/model/test_model.py)
      policy = self.remat_policy
      x_BxLxD = (apply if policy is None else nnx.remat(apply, policy=policy))(block, x_BxLxD)
    x_BxLxD = self.final_norm(x_BxLxD)
    if self.head is None:
      head_DxV = self.embed[...].T * x_BxLxD.shape[-1] ** -0.5
    else:
      head_DxV = self.head[...]
    return jnp.einsum(
      "bld,dv->blv", x_BxLxD, head_DxV.astype(self.dtype), preferred_element_type=jnp.float32
    )


def abstract(model_cfg):
  """(graphdef, parameters) of a Decoder traced abstractly: shapes, dtypes and logical axes,
  nothing allocated. The one trace prepare, the mesh check and evaluation variants share."""
  return nnx.split(nnx.eval_shape(lambda: Decoder(model_cfg, rngs=nnx.Rngs(0))), nnx.Param)


def check_config(config, train_len: int) -> None:
  """The config checks that need the model's code, after lcx.config.checks's declared ones (its
  `check_fields` runs both): a scheme's hooks against the attention kind and the per-layer
  schedule, its checks against the dimensions and the training length, the remap's, the
  kernels'. `train_len`: lcx.config.train_length (the positions a learned table must cover).
  ValueError naming the field."""
  m = config.model
  if m.attention.kind == "stick_breaking" and positions.base.is_contextual(m.position.name):
    raise ValueError(  # the stick-breaking kernels call no contextual hook: CoPE would be lost
      f"model.position.name={m.position.name!r} is not allowed with "
      "model.attention.kind='stick_breaking': its positions come from softmax logits; "
      "allowed: a scheme without a contextual hook"
    )
  if m.attention.kind == "stick_breaking" and positions.base.reads_input(m.position.name):
    raise ValueError(  # the stick-breaking kernels take no prefix sums: the gates would be lost
      f"model.position.name={m.position.name!r} is not allowed with "
      "model.attention.kind='stick_breaking', whose kernels add no bias from hidden states; "
      "allowed: a scheme without an input hook (from_input)"
    )
  if m.attention.kind == "stick_breaking" and positions.base.has_householder(m.position.name):
    raise ValueError(  # the stick-breaking kernels apply no Householders: PaTH would be lost
      f"model.position.name={m.position.name!r} is not allowed with "
      "model.attention.kind='stick_breaking' (its kernels apply no Householder transforms); "
      "allowed: a scheme without a householder hook"
    )
  dims = positions.Dims.of(m)
  positions.validate(m.position, dims)
  if m.nope_every and positions.base.adds_embedding(m.position.name):
    raise ValueError(
      f"model.nope_every={m.nope_every} is not allowed with model.position.name="
      f"{m.position.name!r}, which embeds positions once at the input (no "
      "block's hooks carry them); allowed: 0"
    )
  if m.nope_every > m.num_layers:  # (i + 1) % k == 0 for no block i: the schedule does nothing
    raise ValueError(
      f"model.nope_every={m.nope_every} leaves no NoPE block among model.num_layers="
      f"{m.num_layers}; allowed: 0 (off) or at most {m.num_layers}"
    )
  # A learned table must cover the training windows, and the sampled positions if randomized.
  positions.check_eval_length(
    m.position,
    dims,
    max(train_len, config.train.random_positions, config.train.pose_target),
  )
  remaps.validate(m.remap)
  kernels.check_impl(m)
