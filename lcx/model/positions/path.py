"""PaTH attention (Yang et al. 2025, arXiv 2505.16381): positions as data-dependent Householder
transforms accumulated along the path from key to query.

Each token t gives, per kv head, a unit vector w_t and beta_t in (0, 2), hence
H_t = I - beta_t w_t w_t^T, and the logit of query i for key j <= i is
  z_ij = q_i^T H_i H_{i-1} ... H_{j+1} k_j / sqrt(E)      (the empty product, I, at j = i),
so only the Householders strictly after the key and up to the query act: within one packed
document always, since a document is a contiguous run and keys of other documents are masked.
beta = 0 is NoPE; beta = 2 makes every H_t a reflection (orthogonal: norms kept). No other
position signal (no rotation, no bias). As the reference model (flash-linear-attention,
`fla/layers/path_attn.py`, the defaults): w_t = L2-normalize(silu(shortconv(x_t W_1 W_2))),
a low-rank projection (d_model -> `rank`=32 -> kv heads x head_dim) then a causal depthwise
convolution over `conv_size`=3 tokens (not across documents), beta_t = 2 sigmoid(x_t W_b + b),
from the block's normalized input x, with parameters per layer. Initialization follows lcx's
(normal(0, 1/sqrt(fan_in)) weights, zero bias, so beta starts at 1).

Three forms of the same logits, cross-checked by the tests:
  `reference_logits`  the decoding recurrence, O(T^2 E), plain: keys carried forward in time,
                      each multiplied by every new H_t (what generation's KV cache does)
  `dense_logits`      the block (UT) form over blocks of `BLOCK` tokens, all T x T logits (the
                      dense kernel): inside a block a triangular solve gives every product of a
                      block's Householders; across blocks queries carry block products
  the chunked kernel  (lcx/model/attention.py `attend_chunked`) walks key blocks from the diagonal
                      outward with the same `block_terms`, carrying each query transformed by
                      the blocks passed so far: besides the kernel's own, every key at its
                      block's end and every block's product, O(T E + T E^2 / C), never T x T.
The UT form, for one block of C tokens, L the strictly lower part of W W^T (rows w_m): with
R_mj = w_m . k_j for m > j (0 else), A = (I + L diag(beta))^-1 R, one unit-triangular solve,
holds a_mj = w_m . (H_{m-1} ... H_{j+1} k_j), so H_i ... H_{j+1} k_j = k_j - sum_{j<m<=i}
beta_m a_mj w_m: O(C^2 (C + E)) per block and head, no C x C x E tensor. Cost per (query
block, key block) pair: C^2 E for the logits plus C E^2 for the carried queries, so
O(T^2 E + T^2 E^2 / C) in all (the chunked kernel: half of it, causality).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from lcx.model import cpu_tuned
from lcx.model.positions.base import Scheme, register

BLOCK = 64  # the dense kernel's block (the reference kernels' chunk)
EPS = 1e-6  # in the L2 normalization of w, as the reference's l2_norm


# --- The math, pure functions (q scaled by 1/sqrt(E) by the caller unless said) ---


def reference_logits(q_BxTxHxE, k_BxTxGxE, w_BxTxGxE, beta_BxTxG) -> jax.Array:
  """BxGxPxTxT logits q_i^T H_i ... H_{j+1} k_j / sqrt(E) for j <= i, 0 above the diagonal, by
  the recurrence generation uses: at step t every earlier key is multiplied by H_t, then k_t
  joins them unchanged, and query t reads them all. O(T^2 E) work, O(T E) carried."""
  b, t, h, e = q_BxTxHxE.shape
  g = k_BxTxGxE.shape[2]
  q_TxBxGxPxE = jnp.moveaxis(q_BxTxHxE.reshape(b, t, g, h // g, e), 1, 0) * e**-0.5

  def step(keys_BxSxGxE, inputs):
    i, q_BxGxPxE, k_BxGxE, w_BxGxE, beta_BxG = inputs
    along_BxSxG = jnp.einsum("bsge,bge->bsg", keys_BxSxGxE, w_BxGxE)
    keys_BxSxGxE = keys_BxSxGxE - (beta_BxG[:, None] * along_BxSxG)[..., None] * w_BxGxE[:, None]
    keys_BxSxGxE = jax.lax.dynamic_update_index_in_dim(keys_BxSxGxE, k_BxGxE, i, 1)
    row_BxGxPxS = jnp.einsum("bgpe,bsge->bgps", q_BxGxPxE, keys_BxSxGxE)
    return keys_BxSxGxE, jnp.where(_lead(jnp.arange(t) <= i, 4), row_BxGxPxS, 0.0)

  xs = (jnp.arange(t), q_TxBxGxPxE, *(jnp.moveaxis(a, 1, 0) for a in (k_BxTxGxE, w_BxTxGxE)))
  _, rows_TxBxGxPxS = jax.lax.scan(
    step, jnp.zeros_like(k_BxTxGxE), (*xs, jnp.moveaxis(beta_BxTxG, 1, 0))
  )
  return jnp.moveaxis(rows_TxBxGxPxS, 0, 3)


def _lead(x, ndim: int):
  """x with leading unit axes up to `ndim` (this project raises on implicit rank promotion)."""
  return x.reshape((1,) * (ndim - x.ndim) + x.shape)


def _substitute(n_CxC, rhs_CxK):
  """X with (I + N) X = rhs, N strictly lower (any leading axes): forward substitution, one
  row at a time, each from the rows solved before it."""
  c = n_CxC.shape[-1]

  def row(m, x_CxK):
    n_C = jax.lax.dynamic_index_in_dim(n_CxC, m, n_CxC.ndim - 2, keepdims=False)
    rhs_K = jax.lax.dynamic_index_in_dim(rhs_CxK, m, rhs_CxK.ndim - 2, keepdims=False)
    x_K = rhs_K - jnp.einsum("...j,...jk->...k", n_C, x_CxK, precision=jax.lax.Precision.HIGHEST)
    return jax.lax.dynamic_update_index_in_dim(x_CxK, x_K, m, x_CxK.ndim - 2)

  return jax.lax.fori_loop(0, c, row, jnp.zeros_like(rhs_CxK))


@jax.custom_vjp
def _unit_lower_solve(n_CxC, rhs_CxK):
  """(I + N)^-1 rhs for a strictly lower N. Not lax.linalg.triangular_solve: XLA:CPU's solver
  call made layout assignment give the elementwise fusion building its matrix a transposed
  layout, which the train step's YNNPACK fusions refuse at run time (lcx/run/train.py)."""
  return _substitute(n_CxC, rhs_CxK)


def _solve_fwd(n_CxC, rhs_CxK):
  x_CxK = _substitute(n_CxC, rhs_CxK)
  return x_CxK, (n_CxC, x_CxK)


def _solve_bwd(res, g_CxK):
  """d rhs = (I + N)^-T g, a backward substitution (the forward one on both axes reversed);
  d N = -(d rhs) X^T on the strictly lower part."""
  n_CxC, x_CxK = res
  flip_n = jnp.flip(jnp.swapaxes(n_CxC, -1, -2), (-1, -2))
  d_rhs = jnp.flip(_substitute(flip_n, jnp.flip(g_CxK, -2)), -2)
  c = n_CxC.shape[-1]
  lower = _lead(jnp.tril(jnp.ones((c, c), bool), -1), n_CxC.ndim)
  d_n = -jnp.einsum("...mk,...jk->...mj", d_rhs, x_CxK, precision=jax.lax.Precision.HIGHEST)
  return jnp.where(lower, d_n, 0.0), d_rhs


_unit_lower_solve.defvjp(_solve_fwd, _solve_bwd)
# forward mode (jax.jvp) runs the substitution itself: a custom_vjp has no forward rule
unit_lower_solve = cpu_tuned.forward_safe(_unit_lower_solve, _substitute)


def block_terms(q_BxGxPxNxCxE, k_BxGxNxCxE, w_BxGxNxCxE, beta_BxGxNxC):
  """For each block of C tokens (N blocks), from scaled q:
    local_BxGxPxNxCxC  the logits inside the block (0 above the diagonal),
    q_start            q_i^T H_i ... H_first: each query carried to the block's start,
    k_end              H_last ... H_{j+1} k_j: each key carried to the block's end,
    p_BxGxNxExE        H_last ... H_first as it acts on a row vector: q_row @ p.
  So a query i of block I and a key j of an earlier block J meet as
  q_start_i @ p_{I-1} @ ... @ p_{J+1} . k_end_j."""
  c, e = w_BxGxNxCxE.shape[-2:]
  lower = _lead(jnp.tril(jnp.ones((c, c), bool), -1), 5)
  causal = _lead(jnp.tril(jnp.ones((c, c), bool)), 6)
  hi = jax.lax.Precision.HIGHEST
  ww = jnp.einsum("bgnme,bgnse->bgnms", w_BxGxNxCxE, w_BxGxNxCxE, precision=hi)
  wk = jnp.einsum("bgnme,bgnje->bgnmj", w_BxGxNxCxE, k_BxGxNxCxE, precision=hi)
  solved = unit_lower_solve(
    jnp.where(lower, ww * beta_BxGxNxC[..., None, :], 0.0),
    jnp.concatenate([jnp.where(lower, wk, 0.0), w_BxGxNxCxE], -1),
  )
  a_BxGxNxCxC, mw_BxGxNxCxE = solved[..., :c], solved[..., c:]  # column j: a_mj; row m: a_m
  bw_BxGxNxCxE = beta_BxGxNxC[..., None] * w_BxGxNxCxE
  qw = jnp.einsum("bgpnie,bgnme->bgpnim", q_BxGxPxNxCxE, bw_BxGxNxCxE, precision=hi)
  qw = jnp.where(causal, qw, 0.0)  # beta_m q_i . w_m for m <= i
  qk = jnp.einsum("bgpnie,bgnje->bgpnij", q_BxGxPxNxCxE, k_BxGxNxCxE, precision=hi)
  local = qk - jnp.einsum("bgpnim,bgnmj->bgpnij", qw, a_BxGxNxCxC, precision=hi)
  local = jnp.where(causal, local, 0.0)
  q_start = q_BxGxPxNxCxE - jnp.einsum("bgpnim,bgnme->bgpnie", qw, mw_BxGxNxCxE, precision=hi)
  k_end = k_BxGxNxCxE - jnp.einsum("bgnmj,bgnme->bgnje", a_BxGxNxCxC, bw_BxGxNxCxE, precision=hi)
  p = _lead(jnp.eye(e), 5) - jnp.einsum(
    "bgnmd,bgnme->bgnde", bw_BxGxNxCxE, mw_BxGxNxCxE, precision=hi
  )
  return local, q_start, k_end, p


def blocked(x, c: int, axis: int):
  """x with `axis` (length T) padded to a multiple of c (edge values) and split into N x C."""
  t = x.shape[axis]
  n = -(-t // c)
  pads = [(0, 0)] * x.ndim
  pads[axis] = (0, n * c - t)
  x = jnp.pad(x, pads, mode="edge")
  return x.reshape(*x.shape[:axis], n, c, *x.shape[axis + 1 :])


def dense_logits(q_BxGxPxTxE, k_BxGxTxE, w_BxGxTxE, beta_BxGxT, block: int = BLOCK):
  """BxGxPxTxT float32 logits of scaled q (0 above the diagonal) in the block form: the
  diagonal blocks from `block_terms`, then, one block offset s at a time (a scan over s), every
  query block's carried q against the keys s blocks before it. O(T^2 E + T^2 E^2 / C)."""
  t = q_BxGxPxTxE.shape[-2]
  c = min(block, t)
  f32 = jnp.float32
  q, k = blocked(q_BxGxPxTxE.astype(f32), c, 3), blocked(k_BxGxTxE.astype(f32), c, 2)
  w, beta = blocked(w_BxGxTxE.astype(f32), c, 2), blocked(beta_BxGxT.astype(f32), c, 2)
  local, q_start, k_end, p = block_terms(q, k, w, beta)
  n = local.shape[3]

  def offset(q_carry, s):
    """Key block I - s for every query block I (rolled: blocks I < s read garbage, masked)."""
    k_s = jnp.roll(k_end, s, axis=2)
    band = jnp.einsum("bgpnie,bgnje->bgpnij", q_carry, k_s, precision=jax.lax.Precision.HIGHEST)
    q_carry = jnp.einsum(
      "bgpnie,bgnef->bgpnif", q_carry, jnp.roll(p, s, axis=2), precision=jax.lax.Precision.HIGHEST
    )
    return q_carry, band

  _, bands = jax.lax.scan(offset, q_start, jnp.arange(1, n))
  bands_SxBxGxPxNxCxC = jnp.concatenate([local[None], bands], 0)  # offset 0: the diagonal
  i_N, j_N = jnp.arange(n)[:, None], jnp.arange(n)[None, :]
  lookup = bands_SxBxGxPxNxCxC[jnp.clip(i_N - j_N, 0, n - 1), :, :, :, i_N]  # NxNxBxGxPxCxC
  lookup = jnp.where((i_N >= j_N)[:, :, None, None, None, None, None], lookup, 0.0)
  out = jnp.transpose(lookup, (2, 3, 4, 0, 5, 1, 6)).reshape(*local.shape[:3], n * c, n * c)
  return out[..., :t, :t]


def to_document_end(k_BxTxGxE, w_BxTxGxE, beta_BxTxG, seg_BxT) -> jax.Array:
  """Each key carried to the last token of its packed document, H_end ... H_{j+1} k_j: the
  KV cache generation starts from after a prefill. A reverse scan carrying the product
  H_end ... H_{j+1} (E x E per head), reset at each document's end: O(T E^2)."""
  e = k_BxTxGxE.shape[-1]
  last_BxT = jnp.concatenate(
    [seg_BxT[:, 1:] != seg_BxT[:, :-1], jnp.ones_like(seg_BxT[:, :1], bool)], axis=1
  )

  def step(prod_BxGxExE, inputs):
    k_BxGxE, w_BxGxE, beta_BxG, last_B = inputs
    prod_BxGxExE = jnp.where(last_B[:, None, None, None], _lead(jnp.eye(e), 4), prod_BxGxExE)
    out_BxGxE = jnp.einsum("bgde,bge->bgd", prod_BxGxExE, k_BxGxE)
    pw_BxGxE = jnp.einsum("bgde,bge->bgd", prod_BxGxExE, w_BxGxE)  # prod @ H_j for the next key
    prod_BxGxExE = prod_BxGxExE - (beta_BxG[..., None] * pw_BxGxE)[..., None] * w_BxGxE[:, :, None]
    return prod_BxGxExE, out_BxGxE

  b, _, g, _ = k_BxTxGxE.shape
  xs = tuple(jnp.moveaxis(a, 1, 0) for a in (k_BxTxGxE, w_BxTxGxE, beta_BxTxG, last_BxT))
  init = jnp.broadcast_to(jnp.eye(e), (b, g, e, e)).astype(k_BxTxGxE.dtype)
  _, out_TxBxGxE = jax.lax.scan(step, init, xs, reverse=True)
  return jnp.moveaxis(out_TxBxGxE, 0, 1)


def apply_householder(k_BxSxGxE, w_BxGxE, beta_BxG) -> jax.Array:
  """H k for every key of the cache: k - beta w (w . k) (a generation step's new token)."""
  along_BxSxG = jnp.einsum("bsge,bge->bsg", k_BxSxGxE.astype(jnp.float32), w_BxGxE)
  return k_BxSxGxE - ((beta_BxG[:, None] * along_BxSxG)[..., None] * w_BxGxE[:, None]).astype(
    k_BxSxGxE.dtype
  )


def short_conv(u_BxLxGxE, kernel_KxGxE, seg_BxL) -> jax.Array:
  """Causal depthwise convolution: sum over s < K of kernel[s] * u_{t-s}, only over tokens
  t - s >= 0 of t's own document."""
  out = u_BxLxGxE * kernel_KxGxE[None, :1]
  for s in range(1, kernel_KxGxE.shape[0]):
    shifted = jnp.pad(u_BxLxGxE, [(0, 0), (s, 0), (0, 0), (0, 0)])[:, : u_BxLxGxE.shape[1]]
    same_BxL = jnp.pad(seg_BxL, [(0, 0), (s, 0)], constant_values=-1)[:, : seg_BxL.shape[1]]
    same_BxL = same_BxL == seg_BxL
    out = out + jnp.where(same_BxL[:, :, None, None], shifted * kernel_KxGxE[None, s : s + 1], 0.0)
  return out


# --- The scheme: per-layer parameters and the `householder` hook ---


@register("path")  # fields and their checks: lcx/model/positions/fields.py
class PaTH(Scheme):
  """The Householder parameters of block 0; `others` holds blocks 1.. 's (one set per layer,
  as the reference: each attention layer has its own projections)."""

  def __init__(self, *, dims, rngs, rank, conv_size, layers=None):
    d, g, e = dims.d_model, dims.kv_heads, dims.head_dim

    def normal(shape, fan_in, axes):
      init = jax.random.normal(rngs.params(), shape, jnp.float32) * fan_in**-0.5
      return nnx.Param(init, logical_axes=axes)

    if rank:
      self.w_down = normal((d, rank), d, ("embed", None))
      self.w_up = normal((rank, g, e), rank, (None, "kv_heads", "head_dim"))
    else:
      self.w_down = None
      self.w_up = normal((d, g, e), d, ("embed", "kv_heads", "head_dim"))
    # PyTorch's Conv1d initialization (uniform in +-1/sqrt(fan_in), fan_in = K per channel).
    bound = max(conv_size, 1) ** -0.5
    self.conv_KxGxE = (
      nnx.Param(
        jax.random.uniform(rngs.params(), (conv_size, g, e), jnp.float32, -bound, bound),
        logical_axes=(None, "kv_heads", "head_dim"),
      )
      if conv_size
      else None
    )
    self.w_beta = normal((d, g), d, ("embed", "kv_heads"))
    self.b_beta = nnx.Param(jnp.zeros((g,), jnp.float32), logical_axes=("kv_heads",))
    self.history = max(conv_size - 1, 0)  # earlier tokens' projections a generation step reads
    layers = dims.num_layers if layers is None else layers
    self.others = nnx.List(
      [
        PaTH(dims=dims, rngs=rngs, rank=rank, conv_size=conv_size, layers=1)
        for _ in range(layers - 1)
      ]
    )

  def for_layer(self, layer):
    return self if layer == 0 else self.others[layer - 1]

  def project(self, x_BxLxD) -> jax.Array:
    """u_BxLxGxE = x W_1 W_2 (or x W), before the convolution, float32."""
    x = x_BxLxD.astype(jnp.float32)
    if self.w_down is not None:
      x = x @ self.w_down[...]
    return jnp.einsum("blr,rge->blge", x, self.w_up[...])

  def directions(self, u_BxLxGxE, seg_BxL) -> jax.Array:
    """Unit w_BxLxGxE from projections: normalize(silu(conv(u))), or normalize(u) unconvolved."""
    if self.conv_KxGxE is not None:
      u_BxLxGxE = jax.nn.silu(short_conv(u_BxLxGxE, self.conv_KxGxE[...], seg_BxL))
    norm = jnp.sqrt(jnp.sum(u_BxLxGxE * u_BxLxGxE, -1, keepdims=True) + EPS)
    return u_BxLxGxE / norm

  def betas(self, x_BxLxD) -> jax.Array:
    """beta_BxLxG = 2 sigmoid(x W_b + b), in (0, 2): negative eigenvalues allowed."""
    x = x_BxLxD.astype(jnp.float32)
    return 2 * jax.nn.sigmoid(x @ self.w_beta[...] + self.b_beta[...][None, None])

  def householder(self, x_BxLxD, seg_BxL):
    """(w_BxLxGxE, beta_BxLxG) of every token, from the block's normalized input."""
    return self.directions(self.project(x_BxLxD), seg_BxL), self.betas(x_BxLxD)


def cached_attention_inputs(scheme, cache, x_BxLxD, k_BxLxGxE, v_BxGxLxE, plan):
  """(keys, values, the kernel's keyword arguments) of a PaTH block that has a KV cache.

  Prefill (every slot at once): the kernel applies the Householders to the new keys; the cache
  keeps each key carried to its document's end (`to_document_end`) and every token's projection
  u. A step (one new token t): every cached key is multiplied by H_t, then k_t joins unchanged,
  so the cached keys are H_t ... H_{j+1} k_j and the step is plain attention (the reference's
  decoding). Its w_t reads the `history` projections before it from the cache."""
  n = x_BxLxD.shape[1]
  scheme = scheme.householder.__self__  # the PaTH layer itself, inside any BiasWrapper
  u_BxLxGxE = scheme.project(x_BxLxD)
  update = jax.lax.dynamic_update_slice_in_dim
  if n == cache.size:
    w_BxLxGxE = scheme.directions(u_BxLxGxE, plan.seg_BxT)
    beta_BxLxG = scheme.betas(x_BxLxD)
    cache.u[...] = update(cache.u[...], u_BxLxGxE, cache.history, axis=1)
    carried = to_document_end(k_BxLxGxE, w_BxLxGxE, beta_BxLxG, plan.seg_BxT)
    cache.update(carried, v_BxGxLxE, 0)
    return k_BxLxGxE, v_BxGxLxE, {"householder": (w_BxLxGxE, beta_BxLxG)}
  if n != 1:
    raise ValueError(f"a PaTH generation step takes one new token, not {n}")
  start = plan.start
  cache.u[...] = update(cache.u[...], u_BxLxGxE, start + cache.history, axis=1)
  window_BxKxGxE = jax.lax.dynamic_slice_in_dim(cache.u[...], start, cache.history + 1, axis=1)
  one_doc = jnp.ones(window_BxKxGxE.shape[:2], jnp.int32)  # slots before 0 hold zeros
  w_BxGxE = scheme.directions(window_BxKxGxE, one_doc)[:, -1]
  beta_BxG = scheme.betas(x_BxLxD)[:, 0]
  cache.k[...] = apply_householder(cache.k[...], w_BxGxE, beta_BxG)
  k_all, v_all = cache.update(k_BxLxGxE, v_BxGxLxE, start)
  return k_all, v_all, {}
