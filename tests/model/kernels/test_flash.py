"""The Pallas flash kernel (interpret mode on CPU) equals the XLA dense path, values and
gradients, float32: every registered bias scheme, remap and sparse pattern (the registries are
iterated, so a new entry is covered untouched), the sink, GQA, packed documents crossing block
edges, lengths that are not a multiple of the block, and a whole model with impl=pallas."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.model import attention, decoder as model, patterns, positions, temperature
from lcx.model.kernels import flash, impl, reference
from lcx.model.positions import biases, remaps
from tests.helpers import equations, schemes_with, tiny_config

B, T, H, G, E = 2, 21, 4, 2, 8  # GQA (2 query heads per kv head); T pads to 24 with 8-blocks
BLOCK = 8
SPLIT = 10  # the second document starts inside the second block
DIMS = positions.Dims(d_model=H * E, num_heads=H, head_dim=E, max_len=16)
TOL = dict(rtol=2e-5, atol=2e-5)


def _perturbed(scheme, key):
  """The scheme with every parameter moved off its init (T5's zeros give no bias at all)."""
  graphdef, state = nnx.split(scheme)
  leaves, treedef = jax.tree.flatten(state)
  keys = jax.random.split(key, max(len(leaves), 1))
  moved = [
    x * (1 + 0.2 * jax.random.uniform(k, x.shape, minval=-1, maxval=1))
    + jnp.where(x == 0, 0.3 * jax.random.normal(k, x.shape), 0.0)
    for x, k in zip(leaves, keys)
  ]
  return graphdef, jax.tree.unflatten(treedef, moved)


def _inputs(seed=0, split=SPLIT, stretch=1):
  """q, k, v, the sink, the loss weights; two documents per row (`split`: the second's first
  token; T: one), positions their in-document indices times `stretch`."""
  k = jax.random.split(jax.random.key(seed), 5)
  seg_BxT = jnp.broadcast_to((jnp.arange(T) >= split).astype(jnp.int32) + 1, (B, T))
  return {
    "q": jax.random.normal(k[0], (B, T, H, E)),
    "k": jax.random.normal(k[1], (B, T, G, E)),
    "v": jax.random.normal(k[2], (B, G, T, E)),
    "sink": jax.random.normal(k[3], (H,)),
    "w": jax.random.normal(k[4], (B, H, T, E)),  # the loss's weights on the output
    "pos": attention.document_index(seg_BxT) * stretch,
    "seg": seg_BxT,
  }


def _compare(
  scheme_name,
  *,
  remap="none",
  pattern=None,
  sink=True,
  fields=None,
  scheme_fields=None,
  inputs=None,
  table=None,
  platform=None,
):
  """attend_flash == attend_dense in value and in every gradient (q, k, v, sink, parameters).
  `table`: whether the kernels must read a distance table (True) or call the hook (False)
  on these positions (`flash._distance_table`, `flash._in_table`); None: either. `platform`:
  whose kernel (`impl.KERNELS`: "tpu", the Mosaic one), default this one."""
  cfg = positions.default_config(scheme_name)
  for field, value in (scheme_fields or {}).items():
    cfg[field] = value
  scheme = positions.build(cfg, DIMS, rngs=nnx.Rngs(0))
  graphdef, state = _perturbed(scheme, jax.random.key(1))
  remap_cfg = remaps.default_config(remap)
  for field, value in (fields or {}).items():
    remap_cfg[field] = value
  remap_fn = remaps.build(remap_cfg, DIMS)
  x = _inputs() if inputs is None else inputs
  if table is not None:
    branches = remap_fn.branches(x["pos"], x["pos"])
    half = 32  # T = 21 pads to 24; the table covers distances -32 .. 31
    found = flash._distance_table(scheme, half, H) is not None and flash._int_positions(branches)
    assert bool(found and flash._in_table(branches, half)) == table

  def run(kernel, q, k, v, sink_H, state):
    s = nnx.merge(graphdef, state)
    plan = kernel.prepare(x["pos"], x["seg"], scheme=s, remap=remap_fn, pattern=pattern)
    out_BxHxTxE = kernel.attend(q, k, v, plan, scheme=s, sink_H=sink_H if sink else None)
    return out_BxHxTxE, jnp.sum(out_BxHxTxE * x["w"])

  results = []
  for kernel in (impl.get_kernel("dense", 512), impl.flash_kernel(BLOCK, platform)):

    def loss(*args, kernel=kernel):
      out_BxHxTxE, value = run(kernel, *args)
      return value, out_BxHxTxE

    (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4), has_aux=True))(
      x["q"], x["k"], x["v"], x["sink"], state
    )
    results.append((out, grads))
  (want, want_grads), (got, got_grads) = results
  np.testing.assert_allclose(got, want, **TOL)
  for w, g in zip(jax.tree.leaves(want_grads), jax.tree.leaves(got_grads)):
    assert np.abs(np.asarray(w)).max() > 0 or not sink  # a gradient that is there
    np.testing.assert_allclose(g, w, **TOL)


@pytest.mark.parametrize("name", schemes_with("bias"))
def test_every_bias_scheme_in_the_kernel_equals_dense(name):
  _compare(name)


# T5 with 8 buckets up to distance 6: the rows' positions (0-20, reset at the second document)
# reach past max_distance, so blocks span a few buckets, one bucket or the last alone.
SHORT_T5 = {"num_buckets": 8, "max_distance": 6}


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("remap", ["none", "self_extend", "compress"])
def test_t5_in_the_kernel_past_max_distance_equals_dense(remap, bidirectional):
  """T5's gather-free lookup over the buckets each block holds, on positions that are not an
  arange: packed documents (positions reset), Self-Extend's grouped positions (two branches),
  compress's fractional ones; causal and bidirectional tables."""
  fields = {"self_extend": {"window": 5, "group": 2}, "compress": {"start": 6}}.get(remap)
  _compare(
    "t5", remap=remap, fields=fields, scheme_fields={**SHORT_T5, "bidirectional": bidirectional}
  )


def _t5(bidirectional, heads=H, **fields):
  cfg = positions.default_config("t5")
  cfg.bidirectional = bidirectional
  for field, value in fields.items():
    cfg[field] = value
  dims = positions.Dims(d_model=heads * E, num_heads=heads, head_dim=E, max_len=16)
  scheme = positions.build(cfg, dims, rngs=nnx.Rngs(0))
  return _perturbed(scheme, jax.random.key(2))


@pytest.mark.parametrize("bidirectional", [False, True])
def test_t5_kernel_bias_is_the_table_lookup_without_a_gather(bidirectional):
  """kernel_bias == bias exactly (the same table entries), the table's gradient too, on
  fractional positions up to 5x max_distance; and its program holds no gather."""
  graphdef, state = _t5(bidirectional)
  rng = np.random.default_rng(0)
  q_pos_1xQ = jnp.asarray(rng.uniform(0, 640, (1, 16)), jnp.float32)
  k_pos_1xS = jnp.asarray(rng.uniform(0, 640, (1, 32)), jnp.float32)
  w_1xHxQxS = jax.random.normal(jax.random.key(0), (1, H, 16, 32))

  def loss(state, hook):
    bias = getattr(nnx.merge(graphdef, state), hook)(q_pos_1xQ, k_pos_1xS)
    return jnp.sum(bias * w_1xHxQxS), bias

  (_, want), want_grad = jax.value_and_grad(loss, has_aux=True)(state, "bias")
  (_, got), got_grad = jax.jit(jax.value_and_grad(loss, has_aux=True), static_argnums=1)(
    state, "kernel_bias"
  )
  np.testing.assert_array_equal(got, want)
  (want_g,), (got_g,) = jax.tree.leaves(want_grad), jax.tree.leaves(got_grad)
  assert np.count_nonzero(np.asarray(want_g)) > H  # several buckets hit
  np.testing.assert_allclose(got_g, want_g, rtol=1e-6, atol=1e-6)
  scheme = nnx.merge(graphdef, state)
  jaxpr = str(jax.make_jaxpr(jax.grad(lambda s: loss(s, "kernel_bias")[0]))(state))
  assert "gather" not in jaxpr and "scatter" not in jaxpr
  assert "while" in str(jax.make_jaxpr(scheme.kernel_bias)(q_pos_1xQ, k_pos_1xS))


def test_t5_lookup_of_a_far_block_is_the_last_bucket():
  """A block whose distances all reach past max_distance holds one bucket: the loop over the
  buckets present runs no step, and the bias is the last bucket's entry, its gradient there."""
  graphdef, state = _t5(False, heads=1)
  table_NxH = jax.tree.leaves(state)[0]
  bucket_1xQxS = jnp.full((1, 4, 8), table_NxH.shape[0] - 1, jnp.int32)
  lo, hi = biases._bucket_range(bucket_1xQxS)
  assert int(lo) == int(hi) == table_NxH.shape[0] - 1
  got = biases.table_lookup(table_NxH, bucket_1xQxS)
  np.testing.assert_array_equal(got, jnp.full((1, 1, 4, 8), table_NxH[-1, 0]))
  grad = jax.grad(lambda t: biases.table_lookup(t, bucket_1xQxS).sum())(table_NxH)
  np.testing.assert_array_equal(grad[:, 0], jnp.zeros(table_NxH.shape[0]).at[-1].set(32.0))


@pytest.mark.parametrize("top", [64, 4096])
def test_sandwich_kernel_bias_is_as_accurate_as_the_dense_float32_product(top):
  """The kernel's split bfloat16 dots (`split_dot`) against the exact float64 bias: no further
  from it than the dense path's float32 einsum (Precision.HIGHEST) plus 2e-5, and within 5e-5
  of the dense path, at positions up to 4096 (fractional); the dense path's own error is
  3e-4 at 4096 (angles rounded in float32)."""
  scheme = positions.build(positions.default_config("sandwich"), DIMS, rngs=nnx.Rngs(0))
  rng = np.random.default_rng(top)
  q_pos_1xQ = jnp.asarray(np.sort(rng.uniform(0, top, (1, 128))), jnp.float32)
  k_pos_1xS = jnp.asarray(np.sort(rng.uniform(0, top, (1, 128))), jnp.float32)
  d_QxS = np.asarray(q_pos_1xQ, np.float64)[0][:, None] - np.asarray(k_pos_1xS, np.float64)[0]
  freqs = biases.sandwich_frequencies(scheme.dim, scheme.base)
  inner_QxS = np.cos(d_QxS[..., None] * freqs).sum(-1)
  exact_HxQxS = np.asarray(scheme.scales_H)[:, None, None] * (inner_QxS - scheme.dim / 2)
  dense_HxQxS = np.asarray(scheme.bias(q_pos_1xQ, k_pos_1xS))[0]
  kernel_HxQxS = np.asarray(jax.jit(scheme.kernel_bias)(q_pos_1xQ, k_pos_1xS))[0]
  dense_err = np.abs(dense_HxQxS - exact_HxQxS).max()
  assert np.abs(kernel_HxQxS - exact_HxQxS).max() <= dense_err + 2e-5
  np.testing.assert_allclose(kernel_HxQxS, dense_HxQxS, rtol=0, atol=5e-5)
  jaxpr = jax.make_jaxpr(scheme.kernel_bias)(q_pos_1xQ, k_pos_1xS)
  dots = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "dot_general"]
  assert len(dots) == 12 and all(e.outvars[0].aval.ndim == 2 for e in dots)  # 2-D, Triton's


@pytest.mark.parametrize(
  "name, heads",
  [("kerple_log", 1), ("kerple_power", 1), ("t5", 1), ("alibi", 1), ("sandwich", 1), ("fire", H)],
)
def test_a_program_evaluates_the_bias_of_its_own_head_only(name, heads):
  """Parameters with a heads axis (KERPLE's r1, r2, T5's table) and declared per-head tuples
  (ALiBi's slopes, Sandwich's scales) go into the traced hook as one head's slice, so each
  (b, h, block) program's bias is 1 x Q x S, not H x Q x S (H times the work); parameters
  without a heads axis (FIRE's MLP) keep all H heads, of which `_head_bias` takes the
  program's."""
  scheme = positions.build(positions.default_config(name), DIMS, rngs=nnx.Rngs(0))
  jaxpr, _ = flash._traced_bias(scheme, BLOCK, 2 * BLOCK)
  assert [v.aval.shape for v in jaxpr.outvars] == [(1, heads, BLOCK, 2 * BLOCK)]
  params = jax.tree.leaves(nnx.state(scheme))
  traced = [v.aval.size for v in jaxpr.invars[: len(params)]]
  assert sum(traced) * (H if heads == 1 else 1) == sum(x.size for x in params)
  head_consts = jaxpr.invars[len(params) : -2]
  assert [v.aval.shape for v in head_consts] == [(1,)] * len(scheme.head_constants)


def _small(cfg_fields):
  """Remap fields scaled to T = 21: windows of 5, groups of 2, a sink of 2, start 6."""
  sizes = {"window": 5, "group": 2, "sink": 2, "start": 6, "chunk_size": 6, "local_window": 2}
  return {f: sizes[f] for f in cfg_fields if f in sizes}


@pytest.mark.parametrize("name", [n for n in remaps.REMAPS if n != "none"])
def test_every_remap_with_rope_equals_dense(name):
  """Several-branch remaps (Self-Extend, ReRoPE) merge their branches inside the kernel."""
  _compare("rope", remap=name, sink=False, fields=_small(remaps.default_config(name).keys()))


@pytest.mark.parametrize("name", [n for n in patterns.PATTERNS if n != "dense"])
def test_every_sparse_pattern_equals_dense(name):
  cfg = patterns.default_config(name)
  for field in cfg.keys():
    if field != "name":
      cfg[field] = {"stride": 3, "sink": 2}.get(field, 4)
  _compare("alibi", pattern=patterns.build(cfg))


def test_reference_equals_the_dense_path_and_the_kernel():
  """The plain-jnp reference beside the kernel is the dense path restated, and the kernel
  with other block shapes (16 x 8) still equals it."""
  scheme = positions.build(positions.default_config("alibi"), DIMS, rngs=nnx.Rngs(0))
  remap_fn = remaps.build(remaps.default_config("none"), DIMS)
  x = _inputs(3)
  plan = attention.prepare_chunked(x["pos"], x["seg"], scheme=scheme, remap=remap_fn)
  args = ([(x["q"], x["k"])], x["v"], plan.branches, x["pos"], x["seg"], plan.doc_BxT)
  kw = dict(scheme=scheme, sink_H=x["sink"])
  want = attention.dense(
    x["q"],
    x["k"],
    jnp.swapaxes(x["v"], 1, 2),
    x["pos"],
    x["seg"],
    scheme=scheme,
    remap=remap_fn,
    sink_H=x["sink"],
  )
  ref = reference.attention_reference(*args, **kw)
  np.testing.assert_allclose(ref, jnp.swapaxes(want, 1, 2), **TOL)
  got = jax.jit(lambda: flash.flash_attention(*args, block_q=16, block_k=8, **kw))()
  np.testing.assert_allclose(got, ref, **TOL)


def _model_loss(cfg_model, impl_name, tokens, pos, seg):
  cfg_model.attention.impl = impl_name
  m = model.Decoder(cfg_model, rngs=nnx.Rngs(0))
  graphdef, params = nnx.split(m, nnx.Param)

  def loss(params):
    logits = nnx.merge(graphdef, params)(tokens, pos, seg)
    return jnp.mean(jax.nn.log_softmax(logits)[..., 0]), logits

  (_, logits), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
  return logits, grads


@pytest.mark.parametrize("temp", temperature.TEMPERATURES)
def test_model_with_pallas_equals_xla(temp):
  """A tiny model (GQA, learned sink, T5 biases, two documents per row): logits and every
  parameter's gradient under impl=pallas equal impl=xla; each temperature option."""
  cfg = tiny_config("t5").model
  cfg.num_layers, cfg.num_kv_heads, cfg.vocab_size, cfg.max_len = 1, 2, 64, 16
  cfg.attention.sink, cfg.attention.temperature, cfg.attention.block_size = "learned", temp, 8
  cfg.attention.beta_c = 0.5 if temp == "none" else 0.0  # the eval-time temperature too
  if impl.unsupported(cfg):  # scale-invariant attention: refused, xla under auto
    cfg.attention.impl = "pallas"
    with pytest.raises(ValueError, match="model.attention.impl"):
      impl.check_impl(cfg)
    cfg.attention.impl = "auto"
    assert impl.resolve_impl(cfg, "gpu") == "xla"
    return
  tokens = jax.random.randint(jax.random.key(0), (B, T), 0, 64)
  seg = jnp.broadcast_to((jnp.arange(T) >= SPLIT).astype(jnp.int32) + 1, (B, T))
  pos = attention.document_index(seg)
  want, want_grads = _model_loss(cfg, "xla", tokens, pos, seg)
  got, got_grads = _model_loss(cfg, "pallas", tokens, pos, seg)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  for w, g in zip(jax.tree.leaves(want_grads), jax.tree.leaves(got_grads)):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_bfloat16_model_forward_is_close_to_xla():
  """bf16 compute (the device check's dtype): logits within bf16 rounding of the XLA path's."""
  cfg = tiny_config("alibi").model
  cfg.num_layers, cfg.num_kv_heads, cfg.vocab_size = 1, 2, 64
  cfg.dtype, cfg.attention.block_size = "bfloat16", 8
  tokens = jax.random.randint(jax.random.key(0), (B, T), 0, 64)
  seg = jnp.broadcast_to((jnp.arange(T) >= SPLIT).astype(jnp.int32) + 1, (B, T))
  pos = attention.document_index(seg)
  logits = {}
  for name in ("xla", "pallas"):
    cfg.attention.impl = name
    decoder = model.Decoder(cfg, rngs=nnx.Rngs(0))
    logits[name] = jax.jit(lambda t, p, s, m=decoder: m(t, p, s))(tokens, pos, seg)
  assert logits["pallas"].dtype == jnp.float32
  np.testing.assert_allclose(logits["pallas"], logits["xla"], rtol=0, atol=0.05)
  assert float(jnp.abs(logits["xla"]).max()) > 0.5  # logits of a size the tolerance is small to


def test_each_kernel_evaluates_the_bias_once_a_block():
  """KERPLE-log's bias on fractional positions (compress: no distance table) has one log1p a
  block; the dq kernel takes the parameters' vjp from the same evaluation that gives its
  logits, so it holds one log1p in each of its three key loops (edge blocks, interior ones,
  edge blocks), like the forward and dk/dv kernels (it evaluated the bias twice, once more
  for the vjp: a log1p an element per block)."""
  scheme = positions.build(positions.default_config("kerple_log"), DIMS, rngs=nnx.Rngs(0))
  graphdef, state = nnx.split(scheme)
  x = _inputs()
  kernel = impl.flash_kernel(BLOCK)

  def loss(q, state):
    s = nnx.merge(graphdef, state)
    plan = kernel.prepare(
      x["pos"],
      x["seg"],
      scheme=s,
      remap=remaps.build(remaps.default_config("compress"), DIMS),
      pattern=None,
    )
    return jnp.sum(kernel.attend(q, x["k"], x["v"], plan, scheme=s, sink_H=None) * x["w"])

  jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(x["q"], state).jaxpr
  calls = [e for e in equations(jaxpr) if e.primitive.name == "pallas_call"]
  logs = [sum(k.primitive.name == "log1p" for k in equations(e.params["jaxpr"])) for e in calls]
  assert len(logs) == 3 and logs == [3, 3, 3], logs  # forward, dq, dk/dv


# --- Distance tables: a bias of the distance alone is read from an H x 2N table. ---

TABLE_SCHEMES = sorted(n for n in schemes_with("bias") if positions.spec(n).cls.bias_of_distance)


@pytest.mark.parametrize("remap", ["none", "self_extend"])
@pytest.mark.parametrize("documents", [1, 2])
@pytest.mark.parametrize("name", TABLE_SCHEMES)
def test_a_table_scheme_reads_the_table_and_equals_dense(name, documents, remap):
  """Values and gradients (q, k, v, sink and the scheme's own parameters, through the table's
  Jacobian) equal the dense path, with one or two documents per row (segment ids) and with
  Self-Extend's grouped integer positions (two branches, each reading the table)."""
  fields = {"window": 5, "group": 2} if remap == "self_extend" else None
  x = _inputs(split=SPLIT if documents == 2 else T)
  _compare(name, remap=remap, fields=fields, inputs=x, table=True)


@pytest.mark.parametrize("name", ["alibi", "kerple_log", "t5"])
def test_positions_past_the_table_take_the_hook_and_equal_dense(name):
  """Integer positions up to 4 x 10 = 40 reach past the table (distances -32 .. 31 at T = 21,
  as randomized training positions may): the hook kernels run instead, still exact."""
  _compare(name, inputs=_inputs(stretch=4), table=False)


def test_fractional_positions_call_the_hook_and_equal_dense():
  _compare("kerple_log", remap="compress", fields={"start": 6}, table=False)


TRANSCENDENTAL = {
  "exp", "exp2", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "logistic", "pow",
  "sqrt", "rsqrt", "erf", "atan2", "div", "floor", "ceil", "round",
}  # fmt: skip


def _table_kernels(jaxpr):
  """The pallas_calls of `jaxpr` on the distance-table path: a `cond`'s true branch (positions
  inside the table, `flash._in_table`) only; every other nested jaxpr."""
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "pallas_call":
      yield eqn
      continue
    if eqn.primitive.name == "cond":
      subs = [eqn.params["branches"][-1].jaxpr]
    else:
      subs = jax.extend.core.jaxprs_in_params(eqn.params)
    for sub in subs:
      yield from _table_kernels(sub)


def _kernel_op_counts(name):
  """Per kernel (forward, dq, dk/dv of each layer): its transcendental, division and rounding
  primitives, in the jaxpr of a tiny model's forward and backward under impl=pallas."""
  cfg = tiny_config(name).model
  cfg.num_layers, cfg.vocab_size, cfg.max_len = 1, 64, 16
  cfg.attention.impl, cfg.attention.block_size = "pallas", 8
  graphdef, params = nnx.split(model.Decoder(cfg, rngs=nnx.Rngs(0)), nnx.Param)
  tokens = jnp.zeros((B, T), jnp.int32)
  seg = jnp.broadcast_to((jnp.arange(T) >= SPLIT).astype(jnp.int32) + 1, (B, T))

  def loss(params):
    return nnx.merge(graphdef, params)(tokens, attention.document_index(seg), seg).sum()

  jaxpr = jax.make_jaxpr(jax.grad(loss))(params).jaxpr
  calls = list(_table_kernels(jaxpr))
  return [
    sum(e.primitive.name in TRANSCENDENTAL for e in equations(c.params["jaxpr"])) for c in calls
  ]


@pytest.mark.parametrize("name", TABLE_SCHEMES)
def test_a_table_scheme_kernel_does_no_more_arithmetic_than_nope(name):
  """The bias is a table read: no log, exp, sin, cos, pow, division or floor of the scheme's
  in any kernel beyond NoPE's own (the softmax's exp and log)."""
  nope = _kernel_op_counts("nope")
  got = _kernel_op_counts(name)
  assert len(got) == len(nope) == 3, (got, nope)
  assert all(g <= n for g, n in zip(got, nope)), (got, nope)


# --- The main loop: key and query ranges in O(T), no T x T or blocks x blocks array. ---


@pytest.mark.parametrize(
  "name, pattern", [("kerple_log", None), ("alibi", "sliding_window"), ("fire", None)]
)
def test_a_million_tokens_build_no_quadratic_array(name, pattern):
  """The forward and backward of a 2^20-token row (two documents; a sliding window; a table
  with its Jacobian; FIRE's hook), traced without running: no array anywhere, kernels
  included, has two axes as long as the number of blocks (a block mask had T/128 x T/128)."""
  t, block = 2**20, 128
  scheme = positions.build(positions.default_config(name), DIMS, rngs=nnx.Rngs(0))
  window = None
  if pattern is not None:
    window = patterns.build(patterns.default_config(pattern))
  remap_fn = remaps.build(remaps.default_config("none"), DIMS)

  def loss(q, k, v, seg):
    plan = attention.prepare_chunked(
      attention.document_index(seg), seg, scheme=scheme, remap=remap_fn, pattern=window
    )
    return impl.attend_flash(q, k, v, plan, scheme=scheme, block=block).sum()

  args = [
    jax.ShapeDtypeStruct((1, t, H, E), jnp.float32),
    jax.ShapeDtypeStruct((1, t, G, E), jnp.float32),
    jax.ShapeDtypeStruct((1, G, t, E), jnp.float32),
    jax.ShapeDtypeStruct((1, t), jnp.int32),
  ]
  jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2)))(*args).jaxpr
  shapes = {v.aval.shape for e in equations(jaxpr) for v in e.outvars if hasattr(v.aval, "shape")}
  long = [s for s in shapes if sum(n >= t // block for n in s) > 1]
  assert not long, long
  assert (1, t, H, E) in shapes  # the trace does reach the full length


def test_a_query_block_visits_its_documents_key_blocks_only():
  """Two documents of 40 and 24 tokens in 8-blocks, from O(1) reads of the row: a query block
  visits the key blocks from its document's start (or its window's) through its diagonal,
  masking the diagonal alone; a key block visits the query blocks from its diagonal through
  its document's end (or its window's).
  Each as (first, last + 1, masked) for the edge blocks before, the interior ones, the edge
  blocks after."""
  st = flash._Static(
    uses=(None,), pattern=None, bias=None, num_leaves=0, num_consts=0, num_head_consts=0,
    head_axes=(), has_sink=False, per=1, block_q=8, block_k=8, interpret=True, backend="cpu",
  )  # fmt: skip
  seg_T = jnp.asarray([1] * 40 + [2] * 24)
  doc_T = attention.document_index(seg_T[None])[0]
  r = flash._Refs(
    *[[]] * 4, None, None, seg_T, doc_T, flash.doc_end(seg_T[None])[0], [], [], None, None
  )

  def spans(ranges):
    return [(int(lo), int(hi), masked) for lo, hi, masked in ranges]

  # query block 7 (56-63): keys 40-63, blocks 5 and 6 all visible, 7 the diagonal
  assert spans(flash._key_ranges(st, r, 7)) == [(5, 5, True), (5, 7, False), (7, 8, True)]
  # query block 4 (32-39, document 1): blocks 0-3 all visible, 4 the diagonal
  assert spans(flash._key_ranges(st, r, 4)) == [(0, 0, True), (0, 4, False), (4, 5, True)]
  # key block 5 (40-47): query blocks 5 (its diagonal) then 6-7, its document's end (63)
  assert spans(flash._query_ranges(st, r, 5)) == [(5, 6, True), (6, 8, False), (8, 8, True)]
  # key block 4 (32-39): query block 4 only (the document ends at 39)
  assert spans(flash._query_ranges(st, r, 4)) == [(4, 5, True), (5, 5, False), (5, 5, True)]
  # a 10-token sliding window, alone or intersected (model.position_window): one masked loop
  # over the blocks it reaches; query block 3 (24-31) from key 15's, key block 0 (0-7) to
  # query 16's
  window = functools.partial(patterns.sliding_window, window=10)
  streaming = patterns.build(patterns.default_config("streaming"))
  for pattern in (window, patterns.intersect(streaming, window)):
    windowed = dataclasses.replace(st, pattern=pattern)
    assert spans(flash._key_ranges(windowed, r, 3)) == [(1, 4, True)]
    assert spans(flash._query_ranges(windowed, r, 0)) == [(0, 3, True)]
  unbounded = dataclasses.replace(st, pattern=streaming)  # its sink: every block from 0
  assert spans(flash._key_ranges(unbounded, r, 3)) == [(0, 4, True)]


# --- FoX: the prefix sums c of its log forget gates go into the kernels. ---


def test_fox_with_pallas_equals_xla():
  """FoX's c_i - c_j read by the kernels from the query and key blocks' c: logits and every
  parameter's gradient (the gates' weights through dc: the dq kernel's row sums of dS, the
  dk/dv kernel's column sums) equal impl=xla; GQA, a learned sink, two documents per row."""
  cfg = tiny_config("fox").model
  cfg.num_layers, cfg.num_kv_heads, cfg.vocab_size, cfg.max_len = 1, 2, 64, 16
  cfg.attention.sink, cfg.attention.block_size = "learned", 8
  impl.check_impl(cfg)
  tokens = jax.random.randint(jax.random.key(0), (B, T), 0, 64)
  seg = jnp.broadcast_to((jnp.arange(T) >= SPLIT).astype(jnp.int32) + 1, (B, T))
  pos = attention.document_index(seg)
  want, want_grads = _model_loss(cfg, "xla", tokens, pos, seg)
  got, got_grads = _model_loss(cfg, "pallas", tokens, pos, seg)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  leaves = jax.tree_util.tree_leaves_with_path(got_grads)
  gates = [g for path, g in leaves if "w_DxH" in jax.tree_util.keystr(path)]
  assert gates and float(jnp.abs(gates[0]).max()) > 0  # the gates get a gradient
  for w, g in zip(jax.tree.leaves(want_grads), jax.tree.leaves(got_grads)):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_the_reference_and_the_kernel_take_prefix_sums():
  """Prefix sums c (FoX's shape: per document, per head) through the plain reference, the
  dense path and the kernel directly (16 x 8 blocks): the same output."""
  scheme = positions.build(positions.default_config("nope"), DIMS, rngs=nnx.Rngs(0))
  remap_fn = remaps.build(remaps.default_config("none"), DIMS)
  x = _inputs(4)
  a_BxTxH = -jax.nn.softplus(jax.random.normal(jax.random.key(5), (B, T, H)))
  prefix_BxTxH = attention.document_cumsum(a_BxTxH, x["seg"])
  plan = attention.prepare_chunked(x["pos"], x["seg"], scheme=scheme, remap=remap_fn)
  args = ([(x["q"], x["k"])], x["v"], plan.branches, x["pos"], x["seg"], plan.doc_BxT)
  kw = dict(scheme=scheme, sink_H=x["sink"], prefix_BxSxH=prefix_BxTxH)
  ref = reference.attention_reference(*args, **kw)
  dense = attention.dense(
    x["q"], x["k"], jnp.swapaxes(x["v"], 1, 2), x["pos"], x["seg"], remap=remap_fn, **kw
  )
  np.testing.assert_allclose(ref, jnp.swapaxes(dense, 1, 2), **TOL)
  got = jax.jit(lambda: flash.flash_attention(*args, block_q=16, block_k=8, **kw))()
  np.testing.assert_allclose(got, ref, **TOL)
  without = reference.attention_reference(*args, scheme=scheme, sink_H=x["sink"])
  assert float(jnp.abs(ref - without).max()) > 0.1  # the sums change the output
