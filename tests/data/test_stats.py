import numpy as np
import pytest

from lcx.data import corpus, sources, stats


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
  texts = list(sources.iter_texts(fake_stdlib_cfg, corpus.VALIDATION))
  lengths_N = stats.split_lengths(fake_stdlib_cfg, corpus.VALIDATION)
  np.testing.assert_array_equal(lengths_N, [len(t) + 2 for t in texts])


@pytest.mark.slow
def test_main_prints_each_split_of_a_text_files_corpus(tmp_path):
  from tests.helpers import run_lcx

  sizes = {"train": (1100, 10, 5000), "validation": (20,)}
  for split, lengths in sizes.items():
    (tmp_path / "in" / split).mkdir(parents=True)
    for i, n in enumerate(lengths):
      (tmp_path / "in" / split / f"{i}.txt").write_text("x" * n)
  out = run_lcx(
    [
      "--config=configs/base.py",
      "--config.data.name=text_files",
      f"--config.data.text_files={tmp_path / 'in'}",
      "--config.data.text_files_split=folders",
      f"--config.data.data_dir={tmp_path / 'datasets'}",
    ],
    module="lcx.data.stats",
  ).stdout
  assert "text_files train: 3 documents, 6116 tokens (median 1102, max 5002)" in out
  assert "documents reaching >=1k: 2  >=4k: 1  >=16k: 0  >=64k: 0" in out
  assert "text_files validation: 1 documents, 22 tokens (median 22, max 22)" in out
