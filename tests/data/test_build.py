import pytest

from lcx.data import build, corpus, sources


def test_build_makes_both_splits_once(fake_stdlib_cfg, capsys, monkeypatch):
  build.build(fake_stdlib_cfg)
  assert "stdlib train:" in capsys.readouterr().out

  def fail_to_collect(*args, **kwargs):
    raise AssertionError("built a second time")

  monkeypatch.setattr(corpus.LcxCorpus, "_split_generators", fail_to_collect)
  build.build(fake_stdlib_cfg)
  assert len(sources.split_records(fake_stdlib_cfg, corpus.VALIDATION).records) > 0


def test_books_build_fetches_first(fake_stdlib_cfg, monkeypatch):
  fetched = []
  monkeypatch.setitem(build.FETCHERS, "books", fetched.append)
  monkeypatch.setitem(sources.CORPUS_SPECS, "books", sources.CORPUS_SPECS["stdlib"])
  fake_stdlib_cfg.name = "books"
  build.build(fake_stdlib_cfg)
  assert fetched == [fake_stdlib_cfg]


@pytest.mark.parametrize("name", ["tfds", "task"])
def test_sources_lcx_does_not_build_are_refused(fake_stdlib_cfg, name):
  fake_stdlib_cfg.update(name=name, tfds_name="pg19")
  with pytest.raises(ValueError, match=f"data.name='{name}' is not built by lcx"):
    build.build(fake_stdlib_cfg)
