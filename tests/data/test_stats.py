import numpy as np

from lcx.data import corpus
from lcx.data import stats


def test_length_stats_counts_documents_reaching_each_threshold():
  lengths_N = np.array([10, 1024, 5000, 20000, 70000, 1023])
  result = stats.length_stats(lengths_N)
  assert result["documents"] == 6
  assert result["tokens"] == int(lengths_N.sum())
  assert result["max_tokens"] == 70000
  assert result["reaching"] == {1024: 4, 4096: 3, 16384: 2, 65536: 1}
  text = stats.format_stats("books", "train", result)
  assert "books train: 6 documents" in text and ">=64k: 1" in text


def test_split_lengths_count_bos_and_eos(fake_stdlib_cfg):
  texts = list(stats.sources.iter_texts(fake_stdlib_cfg, corpus.VALIDATION))
  lengths_N = stats.split_lengths(fake_stdlib_cfg, corpus.VALIDATION)
  np.testing.assert_array_equal(lengths_N, [len(t) + 2 for t in texts])
