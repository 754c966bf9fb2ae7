"""Protocols by hand: which tokens each window scores, with which positions and segments."""

import numpy as np
import pytest

from lcx.tools.evaluate import samples

BOS, EOS = 256, 257


def _doc(n, first):
  """[BOS] + n tokens + [EOS], tokens first, first+1, ..."""
  return np.array([BOS, *range(first, first + n), EOS], np.int32)


def test_stream_keeps_documents_apart_as_training_packs_them():
  docs = [_doc(3, 0), _doc(5, 10)]  # 4 and 6 pairs, one window of 8
  (seq,) = samples.select(docs, "stream", longest=8, num_tokens=8, seed=0)
  w = samples.cut([seq], 8, "windows")
  assert w.inputs_NxT.shape == (1, 8) and w.scored_NxT.all()
  # No target is a BOS (no EOS -> BOS pair), no input is an EOS: pairs are per document.
  assert not (w.targets_NxT == BOS).any() and not (w.inputs_NxT == EOS).any()
  second = int(np.flatnonzero(w.inputs_NxT[0] == BOS)[1])  # where the second document starts
  np.testing.assert_array_equal(w.segments_NxT[0], [1] * second + [2] * (8 - second))
  np.testing.assert_array_equal(w.positions_NxT[0], [*range(second), *range(8 - second)])


def test_a_document_cut_by_a_window_edge_restarts_at_position_0():
  seq = samples.Sequence(
    np.arange(6), np.arange(1, 7), np.zeros(6, np.int32), np.array([1, 0, 0, 0, 0, 0], bool)
  )
  w = samples.cut([seq], 4, "windows")  # one window: the 2 leftover tokens make no window
  assert w.positions_NxT.tolist() == [[0, 1, 2, 3]]
  w = samples.cut([seq], 3, "windows")
  assert w.positions_NxT.tolist() == [[0, 1, 2], [0, 1, 2]]  # as training's concat rows
  assert w.segments_NxT.tolist() == [[1, 1, 1], [1, 1, 1]]


def test_sliding_scores_each_token_once_with_the_context_hand_checked():
  seq = samples.select([_doc(9, 0)], "long", longest=10, num_tokens=10, seed=0)
  w = samples.cut(seq, 4, "sliding", stride=2)
  # windows start at 0, 2, 4, 6; the first scores all 4, the others their last 2
  np.testing.assert_array_equal(w.inputs_NxT[:, 0], [BOS, 1, 3, 5])
  np.testing.assert_array_equal(
    w.scored_NxT, [[1, 1, 1, 1], [0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 1, 1]]
  )
  np.testing.assert_array_equal(w.positions_NxT, np.tile(np.arange(4), (4, 1)))
  scored_targets = w.targets_NxT[w.scored_NxT]
  np.testing.assert_array_equal(scored_targets, [*range(9), EOS])  # every target once
  # A tail no stride reaches gets a last window ending at the sequence's end.
  tail = samples.cut(seq, 4, "sliding", stride=4)
  np.testing.assert_array_equal(tail.inputs_NxT[:, 0], [BOS, 3, 5])
  assert tail.scored_NxT.sum() == 10


def test_sliding_with_stride_t_is_windows():
  seqs = samples.select([_doc(40, 0), _doc(50, 100)], "stream", longest=8, num_tokens=80, seed=3)
  a, b = samples.cut(seqs, 8, "windows"), samples.cut(seqs, 8, "sliding", stride=8)
  for x, y in zip(a.__dict__.values(), b.__dict__.values()):
    np.testing.assert_array_equal(x, y)


def test_last_k_scores_the_same_tokens_at_every_length():
  seqs = samples.select(
    [_doc(30, 0), _doc(40, 100), _doc(5, 200)], "long", longest=16, num_tokens=100, seed=0
  )
  assert len(seqs) == 2  # the 6-pair document is too short
  scored = []
  for t in (4, 8, 16):
    w = samples.cut(seqs, t, "last_k", last_k=3)
    assert w.scored_NxT.sum(1).tolist() == [3, 3]
    assert w.positions_NxT[0].tolist() == list(range(t))  # context grows with t
    scored.append(sorted(w.targets_NxT[w.scored_NxT].tolist()))
  assert scored[0] == scored[1] == scored[2]


def test_every_length_scores_the_same_tokens():
  docs = [_doc(n, 1000 * i) for i, n in enumerate([70, 20, 300, 45, 90, 11])]
  for mode in samples.DOCUMENTS:
    seqs = samples.select(docs, mode, longest=32, num_tokens=128, seed=1)
    got = [
      sorted(samples.cut(seqs, t, "windows").targets_NxT.ravel().tolist()) for t in (8, 16, 32)
    ]
    assert got[0] == got[1] == got[2]


def test_a_split_of_few_long_documents_is_scored_up_to_the_budget_in_equal_shares():
  """Issue 59 item 3: 7 held-out books gave 7 x 1/32 of the budget (21 windows at 16x where 100
  were asked); each now adds up to 1/7 of it, so the sample reaches what was asked when the
  split holds it, and no document is more than its share."""
  docs = [_doc(30_000, 0) for _ in range(7)]
  (stream,) = samples.select(docs, "stream", longest=2048, num_tokens=204_800, seed=0)
  assert len(stream.inputs_N) == 204_800  # 100 windows of 2048
  assert np.bincount(stream.doc_N).max() <= samples.stream_cap(204_800, 2048, 7) == -(-204_800 // 7)
  small = [_doc(3000, 0) for _ in range(7)]  # fewer tokens than asked: every window there is
  (stream,) = samples.select(small, "stream", longest=2048, num_tokens=204_800, seed=0)
  assert len(stream.inputs_N) == 7 * 3001 // 2048 * 2048  # 3001 pairs each


def test_documents_are_drawn_across_the_split_and_no_one_dominates():
  rng = np.random.default_rng(0)
  sizes = rng.integers(10, 400, size=300)
  sizes[0] = 50_000  # one huge file first in path order (the old sample was 54% one file)
  docs = [_doc(int(n), 0) for n in sizes]
  (stream,) = samples.select(docs, "stream", longest=64, num_tokens=8192, seed=0)
  share = np.bincount(stream.doc_N).max() / len(stream.doc_N)
  assert share <= samples.stream_cap(8192, 64) / 8192 == 1 / 32
  used = np.unique(stream.doc_N)
  assert len(used) >= 32 and used.max() > 100  # not the first documents in path order
  (again,) = samples.select(docs, "stream", longest=64, num_tokens=8192, seed=0)
  np.testing.assert_array_equal(stream.inputs_N, again.inputs_N)  # seeded
  (other,) = samples.select(docs, "stream", longest=64, num_tokens=8192, seed=1)
  assert not np.array_equal(np.unique(other.doc_N), used)


def test_clear_errors():
  with pytest.raises(
    ValueError,
    match=r"eval.documents='long': no validation document has 64 "
    r"tokens \(the longest eval length; the longest document has 11\)",
  ):
    samples.select([_doc(10, 0)], "long", longest=64, num_tokens=100, seed=0)
  with pytest.raises(
    ValueError,
    match=r"has 11 tokens, fewer than one window of the longest "
    r"eval length 64",
  ):
    samples.select([_doc(10, 0)], "stream", longest=64, num_tokens=100, seed=0)
  with pytest.raises(
    ValueError,
    match=r"^eval.protocol='x' is not allowed; allowed: "
    r"windows, sliding, last_k$",
  ):
    samples.cut([], 4, "x")


@pytest.mark.parametrize("num_docs", [1, 2, 3, 9, 40, 301])
def test_the_search_and_evaluation_splits_are_disjoint_fixed_and_cover_the_validation(num_docs):
  search, evaluation = (samples.split_ids(num_docs, name) for name in ("search", "evaluation"))
  assert not set(search) & set(evaluation)
  assert sorted(search + evaluation) == list(range(num_docs))
  assert len(search) == (0 if num_docs < 3 else max(1, round(num_docs / 4)))
  assert len(evaluation) >= min(num_docs, 2)  # an interval over documents needs two
  assert search == samples.split_ids(num_docs, "search")  # no seed or setting moves it
  docs = [_doc(40 + i, 1000 * i) for i in range(num_docs)]
  for seed in range(5):
    for mode in samples.DOCUMENTS:
      for name, ids in (("search", search), ("evaluation", evaluation)):
        if not ids:
          continue
        seqs = samples.select(docs, mode, longest=32, num_tokens=4096, seed=seed, split=name)
        drawn = set(np.concatenate([s.doc_N for s in seqs]).tolist())
        assert drawn and drawn <= set(ids)


def test_an_unknown_split_is_refused_naming_the_allowed():
  with pytest.raises(
    ValueError, match=r"^split='test' is not allowed; allowed: evaluation, search$"
  ):
    samples.split_ids(5, "test")
