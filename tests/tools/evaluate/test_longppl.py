"""LongPPL (Fang et al. 2025): short-context losses and the key-token perplexity, each against a
direct computation."""

import types

import numpy as np

from lcx.tools.evaluate import lengths, samples
from tests.helpers import tiny_config
from tests.tools.evaluate.test_evaluate import _untrained_runner


def test_short_nll_scores_each_target_in_the_papers_window():
  """The paper's code: targets in chunks of short / 4, a chunk scored in the `short` tokens
  ending with it. Directly: one padded row per target holding exactly that window."""
  t, short, hop = 64, 16, 4
  rng = np.random.default_rng(0)
  inputs, targets = (rng.integers(0, 256, (2, t)).astype(np.int32) for _ in range(2))
  pos, seg = np.tile(np.arange(t, dtype=np.int32), (2, 1)), np.ones((2, t), np.int32)
  windows = samples.Windows(inputs, targets, pos, seg, np.ones((2, t), bool), seg)
  runner = _untrained_runner(tiny_config("rope"))
  long_nll = runner.nll(inputs, targets, pos, seg)
  got = lengths.short_nll(runner, windows, short, long_nll)
  rows, where = [], []
  for row in range(2):
    for j in range(t):
      end = min((j // hop + 1) * hop, t)
      if end <= short:
        continue  # its whole context fits: the long window's loss
      start = end - short
      width = j + 1 - start
      rows.append(
        [np.pad(a[row, start : j + 1], (0, short - width)) for a in (inputs, targets)]
        + [np.arange(short, dtype=np.int32), (np.arange(short) < width).astype(np.int32)]
      )
      where.append((row, j, width - 1))
  direct = runner.nll(*(np.stack([r[k] for r in rows]) for k in range(4)))
  expected = long_nll.copy()
  for i, (row, j, at) in enumerate(where):
    expected[row, j] = direct[i, at]
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
  assert np.abs(got - long_nll)[:, short:].max() > 1e-3  # truncation changes the losses
  np.testing.assert_array_equal(got[:, :short], long_nll[:, :short])


def test_longppl_is_the_perplexity_of_the_key_tokens():
  rng = np.random.default_rng(1)
  long_nll = rng.uniform(0, 4, (3, 50))
  short_nll = long_nll + rng.uniform(-1, 5, (3, 50))
  scored = rng.random((3, 50)) < 0.8
  doc = np.repeat(np.arange(3)[:, None], 50, 1) + 10
  windows = types.SimpleNamespace(scored_NxT=scored, doc_NxT=doc)
  doc_index = {10: 0, 11: 1, 12: 2}
  weights = np.ones((0, 3))
  got = lengths.longppl(long_nll, short_nll, windows, doc_index, weights, 16)
  key = scored & (short_nll - long_nll > 2.0) & (long_nll < 2.0)
  assert got["key_tokens"] == key.sum() > 10
  assert np.isclose(got["longppl"], np.exp(long_nll[key].mean()))
  assert (got["short"], got["alpha"], got["beta"], got["longppl_ci"]) == (16, 2.0, -2.0, None)
  none = lengths.longppl(long_nll, long_nll, windows, doc_index, weights, 16)
  assert (none["longppl"], none["key_tokens"]) == (None, 0)


def test_the_evaluation_records_longppl_per_length_when_asked(tmp_path):
  from lcx.run import train
  from lcx.tools import evaluate

  config = tiny_config("rope", steps=5, checkpoint_every=1000)
  config.eval.update(multipliers=(1, 4), longppl=True, variants="none")
  train.train(config, str(tmp_path))
  result = evaluate.evaluate(config, str(tmp_path))["none"]
  at_l, past = result["lengths"]["32"]["longppl"], result["lengths"]["128"]["longppl"]
  assert (at_l["longppl"], at_l["key_tokens"], at_l["short"]) == (None, 0, 32)
  assert past["short"] == 32 and past["key_tokens"] >= 0
  assert (past["longppl"] is None) == (past["key_tokens"] == 0)
  config.eval.longppl = False
  assert "longppl" not in evaluate.evaluate(config, str(tmp_path))["none"]["lengths"]["128"]
