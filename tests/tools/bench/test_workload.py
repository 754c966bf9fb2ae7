"""lcx.tools.bench.workload: every option row is a valid config that builds and takes a finite train
step (slow), and unregistered schemes are skipped with a note."""

import numpy as np
import pytest

from lcx.run import sharding
from lcx.tools.bench import workload
from tests.helpers import bench_options


def test_every_option_row_sets_a_valid_config_that_differs_from_its_scheme():
  opts = bench_options()
  for row in workload.option_rows(list(workload.MODEL_OPTIONS)):
    scheme = row.partition("+")[0]
    config = workload.options_config(opts, row, "tiny")
    assert config.model.to_dict() != workload.options_config(opts, scheme, "tiny").model.to_dict()
    sharding.validate(config)  # ValueError naming the field if an option sets a wrong one


@pytest.mark.slow
@pytest.mark.parametrize("row", workload.option_rows(list(workload.MODEL_OPTIONS)))
def test_every_option_row_builds_and_takes_a_train_step(row):
  """What the positions section runs for each row (`buildable`), on a tiny plan: every option
  compiles, steps, and gives a finite loss with a nonzero gradient (one test per row, so
  parallel workers share them)."""
  opts = bench_options("--model_size=tiny", "--batch_size=2", "--seq_len=16")
  programs, failed = workload.buildable(opts, [row])
  assert failed == {} and list(programs) == [row]
  metrics = programs[row].step()
  assert np.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0, row


def test_unregistered_schemes_are_skipped_with_a_note(capsys):
  have, missing = workload.registered(["nope", "no_such_scheme"])
  assert (have, missing) == (["nope"], ["no_such_scheme"])
  assert "no_such_scheme" in capsys.readouterr().out
