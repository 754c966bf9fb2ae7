"""Remaps: branches merged as the attention kernel merges them give the documented relative
positions, with rotary and bias schemes alike."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.model import attention, positions
from lcx.model.positions import remaps
from tests.helpers import compiled

DIMS = positions.Dims(d_model=32, num_heads=2, head_dim=8, max_len=16)
T = 24


def remap(name, **fields):
  cfg = remaps.default_config(name)
  cfg.update(fields)
  return remaps.build(cfg, DIMS)


def scheme(name):
  cfg = positions.default_config(name)
  return positions.build(cfg, DIMS, rngs=nnx.Rngs(0))


def merged_logits(sch, rmp, q, k, pos_BxT):
  """The attention kernel's merge: the last branch, overridden where earlier ones `use`."""
  return compiled(_merged_logits)(q, k, pos_BxT, sch=sch, rmp=rmp)


def _merged_logits(q, k, pos_BxT, *, sch, rmp):
  out = None
  for branch in reversed(rmp.branches(pos_BxT, pos_BxT)):
    qs = q if branch.q_scale is None else q * branch.q_scale[:, :, None, None]
    qb, kb = sch.rotate(qs, k, branch.q_pos, branch.k_pos)
    logits = jnp.einsum("bqhd,bkhd->bhqk", qb, kb)
    bias = sch.bias(branch.q_pos, branch.k_pos)
    logits = logits if bias is None else logits + bias
    if out is None:
      assert branch.use is None
      out = logits
    else:
      use_BxQxK = branch.use(pos_BxT[:, :, None], pos_BxT[:, None, :])
      out = jnp.where(use_BxQxK[:, None], logits, out)
  return out


def reference_logits(sch, q, k, distance_QxK, q_scale_T=np.ones(T)):
  """Each (i, j) logit computed alone: q_i times q_scale[i] at position distance[i, j], k_j
  at 0."""
  out = np.zeros((1, 2, T, T))
  for i in range(T):
    for j in range(i + 1):
      d = jnp.array([[distance_QxK[i, j]]], jnp.float32)
      qi, kj = sch.rotate(q[:, i : i + 1] * q_scale_T[i], k[:, j : j + 1], d, jnp.zeros_like(d))
      logit = jnp.einsum("bqhd,bkhd->bhqk", qi, kj)
      bias = sch.bias(d, jnp.zeros_like(d))
      out[0, :, i, j] = (logit if bias is None else logit + bias)[0, :, 0, 0]
  return out


def qk():
  kq, kk = jax.random.split(jax.random.key(0))
  return jax.random.normal(kq, (1, T, 2, 8)), jax.random.normal(kk, (1, T, 2, 8))


def lower(x_1xHxTxT):
  """HxTxT, zero above the diagonal (future keys are masked anyway)."""
  return np.asarray(x_1xHxTxT)[0] * np.tril(np.ones((T, T)))


def distances(fn):
  return np.array([[fn(i, j) for j in range(T)] for i in range(T)], np.float32)


@pytest.mark.parametrize("name", ["rope", "alibi", "t5"])
def test_rerope_clips_relative_distance_at_the_window(name):
  sch = scheme(name)
  q, k = qk()
  pos = jnp.arange(T)[None]
  got = merged_logits(sch, remap("rerope", window=5, log_n_scaling=False), q, k, pos)
  want = reference_logits(sch, q, k, distances(lambda i, j: min(i - j, 5)))
  np.testing.assert_allclose(lower(got), want[0], atol=1e-4)


# bojone/rerope: query_states *= max(1, log(position_ids + 1) / log(training_length)).
LOG_N_T = np.maximum(np.log(np.arange(T) + 1.0) / np.log(DIMS.max_len), 1.0)


@pytest.mark.parametrize("name", ["rope", "alibi"])
def test_rerope_log_n_scales_queries_past_the_training_length(name):
  """Queries at i >= L = 16 are scaled by ln(i + 1) / ln(16) (1.022 at i = 16, 1.146 at 23)
  in both branches; the bias is not (it does not read q)."""
  sch = scheme(name)
  q, k = qk()
  pos = jnp.arange(T)[None]
  assert LOG_N_T[15] == 1.0 and LOG_N_T[23] == pytest.approx(1.1462, abs=1e-4)
  got = merged_logits(sch, remap("rerope", window=5), q, k, pos)
  want = reference_logits(sch, q, k, distances(lambda i, j: min(i - j, 5)), LOG_N_T)
  np.testing.assert_allclose(lower(got), want[0], atol=1e-4)


@pytest.mark.parametrize("kernel", ["dense", "chunked"])
def test_attention_kernels_apply_rerope_log_n(kernel):
  """The kernels' output equals softmax of the directly computed scaled logits, times v."""
  sch = scheme("rope")
  q, k = qk()
  v = jax.random.normal(jax.random.key(3), (1, T, 2, 8))
  pos = jnp.arange(T)[None]
  seg = jnp.ones((1, T), jnp.int32)
  rmp = remap("rerope", window=5)
  run = {
    "dense": compiled(attention.dense),
    "chunked": lambda *a, **kw: compiled(attention.chunked)(*a, **kw, chunk_size=8),
  }[kernel]
  got = np.asarray(run(q, k, v, pos, seg, scheme=sch, remap=rmp))
  logits = reference_logits(sch, q, k, distances(lambda i, j: min(i - j, 5)), LOG_N_T)[0]
  logits = np.where(np.tril(np.ones((T, T))) > 0, logits / np.sqrt(8), -np.inf)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  want = np.einsum("hqk,khd->qhd", probs, np.asarray(v)[0])
  np.testing.assert_allclose(got.reshape(want.shape), want, atol=1e-4)


@pytest.mark.parametrize("name", ["rope", "alibi"])
def test_self_extend_groups_distances_beyond_the_window(name):
  sch = scheme(name)
  q, k = qk()
  pos = jnp.arange(T)[None]
  w, g = 6, 4

  def grouped(i, j):
    return i - j if i - j < w else i // g + w - w // g - j // g

  got = merged_logits(sch, remap("self_extend", window=w, group=g), q, k, pos)
  want = reference_logits(sch, q, k, distances(grouped))
  np.testing.assert_allclose(lower(got), want[0], atol=1e-4)


def test_self_extend_positions():
  branches = remap("self_extend", window=4, group=2).branches(
    jnp.arange(10)[None], jnp.arange(10)[None]
  )
  np.testing.assert_array_equal(branches[1].q_pos[0], np.arange(10) // 2 + 4 - 2)
  np.testing.assert_array_equal(branches[1].k_pos[0], np.arange(10) // 2)
  use = branches[0].use(jnp.array([[[9]]]), jnp.array([[[5, 6]]]))
  np.testing.assert_array_equal(use[0, 0], [False, True])


@pytest.mark.parametrize("name", ["rope", "alibi"])
def test_streaming_numbers_sink_keys_by_cache_slot(name):
  """Sink 2, window 5: a cache of 7 slots; beyond the window the query sits at slot
  min(i, 6) and the key at its own position."""
  sch = scheme(name)
  q, k = qk()

  def slot(i, j):
    return i - j if i - j < 5 else min(i, 6) - j

  got = merged_logits(sch, remap("streaming", sink=2, window=5), q, k, jnp.arange(T)[None])
  want = reference_logits(sch, q, k, distances(slot))
  np.testing.assert_allclose(lower(got), want[0], atol=1e-4)
  assert slot(20, 1) == 5 and slot(20, 17) == 3  # a sink key: 6 - 1, a window key: true


def test_compress_is_identity_then_slope_alpha():
  pos = jnp.array([[0, 8, 16, 17, 40]])
  (branch,) = remap("compress", alpha=0.25).branches(pos, pos)
  np.testing.assert_allclose(branch.q_pos[0], [0, 8, 16, 16.25, 22])
  (branch,) = remap("compress", alpha=0.5, start=4).branches(pos, pos)
  np.testing.assert_allclose(branch.k_pos[0], [0, 6, 10, 10.5, 22])
  assert branch.use is None


def test_compress_with_alibi_uses_compressed_distance():
  sch = scheme("alibi")
  pos = jnp.arange(T)[None]
  got = merged_logits(sch, remap("compress", alpha=0.5), *qk(), pos) - merged_logits(
    sch, remap("none"), *qk(), pos
  )

  def squeeze(p):
    return p if p <= 16 else 16 + 0.5 * (p - 16)

  shift = distances(lambda i, j: (i - j) - (squeeze(i) - squeeze(j)))
  np.testing.assert_allclose(
    lower(got)[1], np.tril(positions.alibi_slopes(2)[1] * shift), atol=1e-5
  )


def test_none_is_one_unchanged_branch():
  pos = jnp.arange(5)[None]
  (branch,) = remap("none").branches(pos, pos)
  assert branch.q_pos is pos and branch.k_pos is pos and branch.use is None


def test_default_configs_list_every_field():
  assert remaps.default_config().to_dict() == {"name": "none"}
  assert remaps.default_config("self_extend").to_dict() == {
    "name": "self_extend",
    "window": 128,
    "group": 4,
  }
  assert remaps.default_config("compress").to_dict() == {
    "name": "compress",
    "alpha": 0.5,
    "start": None,
  }


@pytest.mark.parametrize(
  "name, fields, message",
  [
    (
      "yarn",
      {},
      "model.remap.name='yarn' is not allowed; allowed: compress, dual_chunk, none, rerope, "
      "self_extend, streaming",
    ),
    ("streaming", {"sink": 0}, "model.remap.sink=0 is not allowed; allowed: >= 1"),
    ("rerope", {"window": 0}, "model.remap.window=0 is not allowed; allowed: >= 1"),
    ("self_extend", {"group": 0}, "model.remap.group=0 is not allowed; allowed: >= 1"),
    ("compress", {"alpha": 1.5}, "model.remap.alpha=1.5 is not allowed; allowed: in (0, 1]"),
    (
      "rerope",
      {"group": 2},
      "model.remap.group is not a known field; allowed: log_n_scaling, window",
    ),
  ],
)
def test_invalid_remap_names_the_field(name, fields, message):
  cfg = remaps.default_config(name if name in remaps.REMAPS else "none")
  cfg.name = name
  for key, value in fields.items():
    cfg[key] = value
  with pytest.raises(ValueError) as error:
    remaps.validate(cfg)
  assert message in str(error.value)
