import pytest

from lcx.data import config, sources


def _cfg(**overrides):
  data_cfg = config.default_config()
  data_cfg.update(overrides)
  return data_cfg


def test_default_config_is_valid():
  config.validate(config.default_config(), process_count=1)


def test_every_text_source_is_a_valid_name():
  assert set(sources.TEXT_SOURCES) | {"task"} == set(config.SOURCE_CHECKS)


@pytest.mark.parametrize(
  "overrides, message",
  [
    ({"name": "wikipedia"}, r"^data.name='wikipedia' is not allowed; allowed: stdlib, books, "),
    ({"tokenizer": "bpe"}, r"^data.tokenizer='bpe' is not allowed; allowed: byte, sentencepiece$"),
    ({"packing": "greedy"}, r"^data.packing='greedy' is not allowed; allowed: auto, concat"),
    ({"seq_len": 0}, r"^data.seq_len=0 is not allowed; allowed: >= 1$"),
    ({"batch_size": 0}, r"^data.batch_size=0 is not allowed; allowed: >= 1$"),
    (
      {"validation_fraction": 1.0},
      r"^data.validation_fraction=1.0 is not allowed; allowed: in \(0, 1\)$",
    ),
    (
      {"tokenizer": "sentencepiece", "vocab_size": 100},
      r"^data.vocab_size=100 is not allowed; allowed: >= 260 for sentencepiece",
    ),
    ({"name": "text_files"}, r"data.text_files must name"),
    (
      {"name": "text_files", "text_files": "x", "text_files_split": "random"},
      r"^data.text_files_split='random' is not allowed; allowed: hash, folders$",
    ),
    ({"name": "tfds"}, r"data.tfds_name must name"),
    ({"name": "task", "task": "chess"}, r"^data.task='chess' is not allowed; allowed: copy, "),
    ({"name": "task", "tokenizer": "sentencepiece"}, r"tasks are defined over bytes"),
    ({"name": "task", "task_min_len": 5, "task_max_len": 4}, r"data.task_min_len=5"),
    (
      {"name": "task", "task_eval_factor": 0},
      r"^data.task_eval_factor=0 is not allowed; allowed: >= 1$",
    ),
    (
      {"name": "task", "task_eval_examples": 0},
      r"^data.task_eval_examples=0 is not allowed; allowed: >= 1$",
    ),
    (
      {"name": "task", "task_eval_depths": (0.5,)},
      r"data.task_eval_depths=\(0.5,\) needs a task with a needle depth \(passkey\)",
    ),
    (
      {"name": "task", "task": "passkey", "task_eval_depths": (0.5, 2.0)},
      r"^data.task_eval_depths=\(0.5, 2.0\) is not allowed; allowed: depths in \[0, 1\]$",
    ),
  ],
)
def test_bad_values_name_the_field_and_the_allowed_values(overrides, message):
  with pytest.raises(ValueError, match=message):
    config.validate(_cfg(**overrides), process_count=1)


def test_batch_size_must_divide_by_the_process_count():
  config.validate(_cfg(batch_size=16), process_count=4)
  with pytest.raises(ValueError, match=r"data.batch_size=16 .* process count \(3\)"):
    config.validate(_cfg(batch_size=16), process_count=3)


def test_data_dir_falls_back_to_the_environment_then_the_cache(monkeypatch, tmp_path):
  assert config.data_dir(_cfg(data_dir=str(tmp_path))) == tmp_path
  monkeypatch.setenv("LCX_DATA_DIR", str(tmp_path / "env"))
  assert config.data_dir(_cfg()) == tmp_path / "env"
  monkeypatch.delenv("LCX_DATA_DIR")
  assert str(config.data_dir(_cfg())).endswith(".cache/lcx/datasets")


def test_auto_packing_keeps_task_examples_whole():
  assert config.packing(_cfg(name="task")) == "first_fit"
  assert config.packing(_cfg(name="stdlib")) == "concat"
  assert config.packing(_cfg(name="task", packing="concat")) == "concat"


def test_checked_names_match_the_registries():
  from lcx.data import packing, pipeline

  assert set(pipeline.TRAIN_EXAMPLES) == set(config.SOURCE_CHECKS)
  assert set(pipeline.TOKENIZERS) == set(config.TOKENIZERS)
  assert set(packing.PACKERS) | {"auto"} == set(config.PACKINGS)
