import pytest
import tensorflow_datasets as tfds

import lcx.data
from lcx.data import config, corpus, sources


def _tfds_cfg(tmp_path, **overrides):
  data_cfg = config.default_config()
  data_cfg.update(
    name="tfds",
    tfds_name="lm1b",
    data_dir=str(tmp_path),
    validation_split="test",
    seq_len=16,
    batch_size=2,
  )
  data_cfg.update(overrides)
  return data_cfg


@pytest.fixture
def mock_lm1b():
  with tfds.testing.mock_data(num_examples=12, policy=tfds.testing.MockPolicy.USE_CODE):
    yield


def test_tfds_dataset_texts_come_from_the_named_feature_and_split(tmp_path, mock_lm1b):
  texts = sources.split_texts(_tfds_cfg(tmp_path), corpus.VALIDATION)
  assert len(texts) == 12 and all(isinstance(t, bytes) and t for t in texts)
  assert texts == sources.split_texts(_tfds_cfg(tmp_path), corpus.VALIDATION)


def test_tfds_validation_tokens_and_training_batches(tmp_path, mock_lm1b):
  data_cfg = _tfds_cfg(tmp_path)
  documents = lcx.data.validation_documents(data_cfg)
  assert len(documents) == 12
  batch = next(lcx.data.make_train_iterator(data_cfg))
  assert batch["inputs"].shape == (2, 16)


def test_tfds_training_iterator_resumes_exactly(tmp_path, mock_lm1b, assert_resumes):
  assert_resumes(_tfds_cfg(tmp_path))


def test_wrong_text_feature_names_the_field(tmp_path, mock_lm1b):
  data_cfg = _tfds_cfg(tmp_path, text_feature="body")
  with pytest.raises(ValueError, match="data.text_feature='body' .* features are text"):
    sources.split_texts(data_cfg, corpus.VALIDATION)


def test_unprepared_tfds_dataset_is_a_clear_error(tmp_path):
  with pytest.raises(ValueError, match=r"data.tfds_name='lm1b' .* could not be read"):
    sources.split_records(_tfds_cfg(tmp_path), corpus.TRAIN)


def test_tasks_have_no_text_records(tmp_path):
  data_cfg = config.default_config()
  data_cfg.name = "task"
  with pytest.raises(ValueError, match="data.name='task' has no text documents"):
    sources.split_records(data_cfg, corpus.TRAIN)
