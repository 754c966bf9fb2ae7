"""Dual Chunk Attention (2402.17463) as a remap: its logits against the paper's position ids,
built here chunk by chunk as the paper and ChunkLlama's code list them."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.model.decoder import Decoder
from lcx.model.positions import remaps
from tests.helpers import compiled, tiny_config
from tests.model.positions.test_remaps import (
  T,
  distances,
  lower,
  merged_logits,
  qk,
  reference_logits,
  remap,
  scheme,
)


def paper_distance(chunk_size, local_window):
  """(i, j) -> the query's position id minus the key's, from the paper's id lists: keys
  P_k = [0 .. s-1] per chunk; queries P_q^intra = [0 .. s-1], P_q^succ = [s .. s+w-1, then
  chunk_size for the rest] (ChunkLlama clamps at chunk_size) and P_q^inter = P_q^succ's last,
  picked by how many chunks back the key lies."""
  s = chunk_size - local_window
  k_ids = [r for _ in range(T // s + 1) for r in range(s)]
  intra = list(k_ids)
  succ_one = [s + r if r < local_window else chunk_size for r in range(s)]
  succ = [x for _ in range(T // s + 1) for x in succ_one]
  inter = succ_one[-1]

  def distance(i, j):
    back = i // s - j // s
    q = intra[i] if back == 0 else succ[i] if back == 1 else inter
    return q - k_ids[j]

  return distance


@pytest.mark.parametrize("name", ["rope", "alibi", "t5"])
@pytest.mark.parametrize("chunk_size, local_window", [(8, 3), (6, 0), (10, 4)])
def test_dual_chunk_logits_use_the_papers_position_ids(name, chunk_size, local_window):
  sch = scheme(name)
  q, k = qk()
  rmp = remap("dual_chunk", chunk_size=chunk_size, local_window=local_window)
  got = merged_logits(sch, rmp, q, k, jnp.arange(T)[None])
  want = reference_logits(sch, q, k, distances(paper_distance(chunk_size, local_window)))
  np.testing.assert_allclose(lower(got), want[0], atol=1e-4)


def test_every_distance_stays_below_the_chunk_size_and_defaults_follow_chunkllama():
  """The point of DCA: no relative distance reaches chunk_size, at any length; None fields
  are 3L/4 and L/16 (L = 16: chunk 12, window 1)."""
  d = distances(paper_distance(8, 3))
  assert d[np.tril_indices(T)].max() == 8 and d[np.tril_indices(T)].min() == 0
  branches = remap("dual_chunk").branches(jnp.arange(T)[None], jnp.arange(T)[None])
  np.testing.assert_array_equal(branches[0].k_pos[0], np.arange(T) % 11)
  np.testing.assert_array_equal(branches[1].q_pos[0], np.minimum(np.arange(T) % 11 + 11, 12))
  np.testing.assert_array_equal(branches[2].q_pos[0], np.full(T, 12))


@pytest.mark.parametrize(
  "fields, message",
  [
    ({"chunk_size": 1}, "model.remap.chunk_size=1 is not allowed; allowed: >= 2 (None: 3L/4)"),
    ({"local_window": -1}, "model.remap.local_window=-1 is not allowed; allowed: >= 0"),
    (
      {"chunk_size": 8, "local_window": 8},
      "model.remap.local_window=8 is not allowed; allowed: < model.remap.chunk_size=8",
    ),
  ],
)
def test_bad_dual_chunk_fields_name_the_field(fields, message):
  cfg = remaps.default_config("dual_chunk")
  cfg.update(fields)
  with pytest.raises(ValueError, match=r"^" + message.replace("(", r"\(").replace(")", r"\)")):
    remaps.validate(cfg)


def test_dual_chunk_is_refused_with_absolute_embeddings():
  assert not remaps.accepts("dual_chunk", "sinusoidal") and remaps.accepts("dual_chunk", "rope")


def test_dual_chunk_model_chunked_equals_dense_past_the_training_length():
  cfg = tiny_config("rope").model
  cfg.vocab_size = 259
  cfg.remap = remaps.default_config("dual_chunk")
  model = Decoder(cfg, rngs=nnx.Rngs(0))  # L = 32: chunks of 24 - 2 = 22
  model.chunk_size = 8
  t = 70
  args = jnp.arange(t)[None] * 7 % 259, jnp.arange(t)[None], jnp.ones((1, t), jnp.int32)
  chunked, dense = compiled(model)(*args, kernel="chunked"), compiled(model)(*args)
  np.testing.assert_allclose(chunked, dense, atol=2e-4, rtol=2e-4)
